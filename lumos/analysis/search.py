"""`lumos search BASE --gpus N`: every layout of N GPUs predicted from one base trace, ranked.

Candidates are TP x PP x DP x micro-batch size: TP divides the heads, hidden, FFN and
vocabulary sizes (Megatron's split), PP divides the layer count, TP x PP x DP = N, and with
`--global-batch B` the batch
splits into whole micro-batches (B divisible by DP x micro-batch; micro-batches per
iteration = B / (DP x micro-batch)); without it each candidate keeps the base's micro-batch
count. Layouts that do not fit in memory (`lumos.transform.memory`) are listed as such and not simulated.
"""

from __future__ import annotations

import dataclasses
import sys

from lumos.transform.memory import MemorySettings, plan_memory
from lumos.transform.schedule import layers_of_stage
from lumos.transform.suppliers.collectives import load_profile
from lumos.transform.tp import tp_misfits
from lumos.transform.whatif import base_plan, transform

from .predict import simulate_plan

__all__ = ["candidates", "search"]


def candidates(base, gpus: int, micro_batches: list[int], global_batch: int | None) -> list[dict]:
    """Valid (tp, pp, dp, micro_batch, microbatches) for `gpus`."""
    out = []
    for tp in range(1, gpus + 1):
        if gpus % tp or tp_misfits(base.shape, tp):
            continue
        for pp in range(1, gpus // tp + 1):
            if (gpus // tp) % pp or base.layers % pp:
                continue
            dp = gpus // (tp * pp)
            for mbs in micro_batches:
                if global_batch is not None:
                    if global_batch % (dp * mbs):
                        continue
                    m = global_batch // (dp * mbs)
                else:
                    m = base.microbatches
                out.append({"tp": tp, "pp": pp, "dp": dp, "micro_batch": mbs, "microbatches": m})
    return out


def search(tables, gpus: int, micro_batches: list[int] | None = None, global_batch: int | None = None,
           memory: dict | None = None, progress: bool = True) -> list[dict]:
    """Predicted iteration time and memory of every candidate (micro-batch sizes: default the base's);
    fitting ones ranked fastest first."""
    base = base_plan(tables)
    micro_batches = micro_batches or [base.shape.micro_batch]
    settings = MemorySettings.from_profile(load_profile(), **(memory or {}))
    rows = []
    cands = candidates(base, gpus, micro_batches, global_batch)
    if not cands:
        raise ValueError(f"no layout of {gpus} GPUs fits the base ({base.shape.heads} heads, {base.layers} layers"
                         + (f", global batch {global_batch}" if global_batch else "") + ")")
    bar = _progress(len(cands), progress)
    for c in cands:
        shape = dataclasses.replace(base.shape, micro_batch=c["micro_batch"], tp=c["tp"])
        per_stage = [len(list(layers_of_stage(s, c["pp"], base.layers))) for s in range(c["pp"])]
        mem = plan_memory(shape, per_stage, c["pp"], c["dp"], c["microbatches"], settings)
        row = dict(c, memory_gib_per_gpu=mem["memory_gib_per_gpu"], fits=mem["fits"], iteration_us=None)
        if mem["fits"]:
            plan = transform(base, tp=c["tp"], pp=c["pp"], dp=c["dp"], micro_batch=c["micro_batch"],
                             global_batch=c["microbatches"] * c["dp"] * c["micro_batch"])
            _, _, bd = simulate_plan(plan)
            row["iteration_us"] = round(float(bd.as_dict()["iteration_us"]), 3)
        rows.append(row)
        bar.update(1)
    bar.close()
    fit = sorted((r for r in rows if r["fits"]), key=lambda r: r["iteration_us"])
    return fit + [r for r in rows if not r["fits"]]


def _progress(total: int, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc="layouts", unit="layout", file=sys.stderr,
                disable=not (enabled and sys.stderr.isatty()), leave=False)
