"""What the H200 studies (`studies/h200/*.py`) share: where the recordings are, a target's
`lumos predict` flags as `predict` arguments, and kernel time by class.

`tests/durations/test_sustained_clocks.py` pins the shape-law ratios that `kernel_ms` gives
(`studies/h200/clock_steps.py` prints them for every target).
"""

from __future__ import annotations

from . import ROOT

H200 = ROOT / "resources" / "traces" / "h200"   # the recordings (measured on hardware; PROVENANCE.md there)
FLAGS = {"--layers": "layers", "--hidden": "hidden", "--ffn": "ffn", "--micro-batch": "micro_batch",
         "--global-batch": "global_batch"}


def predict_args(flags: list) -> tuple[dict, dict]:
    """A target's `lumos predict` flags (config `h200.targets.*.flags`) as `predict`'s `target` dict and
    the rest as keywords (global_batch, micro_batch): `PredictOptions(**kw)`'s, and `transform`'s."""
    kw = {FLAGS[f]: int(v) for f, v in zip(flags[::2], flags[1::2])}
    return {k: kw.pop(k) for k in ("layers", "hidden", "ffn") if k in kw}, kw


def kernel_class(name: str) -> str:
    """A GPU kernel's class by its name: gemm, attention, memcpy (copies and sets), optimizer or other."""
    if name.startswith("nvjet") or "gemm" in name.lower() or "cutlass" in name.lower():
        return "gemm"
    if "sdpa" in name or "flash" in name:
        return "attention"
    if name.startswith(("Memcpy", "Memset")):
        return "memcpy"
    if "multi_tensor_apply" in name:
        return "optimizer"
    return "other"


def kernel_ms(graph) -> tuple[float, float]:
    """(GEMM, every kernel) time of a graph, ms."""
    import numpy as np

    from lumos.graph.model import TaskKind

    gpu = np.flatnonzero(graph.kind == TaskKind.GPU)
    gemm = sum(float(graph.dur[t]) for t in gpu if kernel_class(str(graph.name[t])) == "gemm")
    return gemm / 1e3, float(graph.dur[gpu].sum()) / 1e3
