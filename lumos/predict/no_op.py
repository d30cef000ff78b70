"""What-ifs that would change nothing they were asked to change: refused with the reason.

The transforms re-time what the base has; what a GPU base lacks, `lumos/transform/add_collectives.py`
adds (a one-GPU base's TP all-reduces, gradient buckets and pipeline sends). What is left:
- `--dp` on a CPU capture (its collectives are host ops, not inserted) or on a base whose data
  parallelism is not all-reduce DP would be predicted at its own time, whatever the degree;
- `--network-speed` re-times collectives: a base without any, and a target adding none, keeps its time;
- on a CPU-only base (no GPU kernel: the host does the work), `--compute-speed` and `--tp` re-time GPU
  kernels and collectives only, so its CPU ops keep their time (a width or micro-batch change re-times
  the CPU ops themselves, `lumos/model/host_gaps.py`).
Each is refused (`refuse_no_ops`), one line naming what was asked and what the base lacks. What
such a base's prediction does change is said in a note: a CPU-only base's rebuild (layers,
micro-batches, the optimizer's host loop; `cpu_only_note`), a TP change of a base without TP
collectives that gets none inserted (its GEMMs re-sharded; `tp_note`).
"""

from __future__ import annotations

import numpy as np

from lumos.graph.model import TaskKind
from lumos.transform.add_collectives import missing

__all__ = ["cpu_only", "refusals", "refuse_no_ops", "cpu_only_note", "tp_note"]


def cpu_only(plan) -> bool:
    """A base with no GPU task: a CPU capture, the host does all the work."""
    return not np.any(plan.graph.kind == TaskKind.GPU)


def _has(plan, role: str) -> bool:
    return bool(np.any(plan.role == role))


def _run_of(plan) -> str:
    one = plan.tp * plan.pp * plan.dp == 1
    if cpu_only(plan):
        return "a one-rank CPU run" if one else "a CPU-only run"
    return "a one-GPU run" if one else f"it runs at DP {plan.dp}"


def refusals(plan, target: dict, options) -> list[str]:
    """One line per change asked of `plan`'s base that would change nothing there (`target`: tp, dp, ...;
    None = as the base; `options`: a PredictOptions)."""
    tp, dp = target.get("tp"), target.get("dp")
    compute, network = options.compute_speed, options.network_speed
    out = []
    if cpu_only(plan):
        host = "the base is a CPU-only trace (no GPU kernel), and {}: the base's CPU ops would keep their time"
        if compute is not None and compute != 1.0:
            out.append(f"--compute-speed {compute:g}: " + host.format("the compute speed scales GPU kernels only"))
        if tp is not None and tp != plan.tp:
            out.append(f"--tp {tp}: " + host.format(
                "a TP change re-shards GPU kernels and re-groups TP collectives only"))

    adds = missing(plan, tp or plan.tp, target.get("pp") or plan.pp, dp or plan.dp)
    if dp is not None and dp != plan.dp and not _has(plan, "dp") and "dp" not in adds:
        why = ("a CPU capture's collectives are host ops, which are not inserted (from a one-rank FSDP2 or DDP capture, "
               "--dp with --dp-calibration predicts them)" if cpu_only(plan) else
               "its data parallelism is not all-reduce DP, so no gradient bucket is inserted")
        out.append(f"--dp {dp}: the base has no data-parallel collective to re-time ({_run_of(plan)}); {why}")
    if network is not None and network != 1.0 and not np.any(plan.st.coll != None) and not adds:  # noqa: E711
        out.append(f"--network-speed {network:g}: the base has no collective to re-time ({_run_of(plan)}): a faster "
                   "network changes nothing in it")
    return out


def refuse_no_ops(plan, target: dict, options) -> None:
    """A ValueError (one line) naming each change asked that would change nothing (`refusals`)."""
    said = refusals(plan, target, options)
    if said:
        raise ValueError("; ".join(said))


def cpu_only_note(plan) -> str | None:
    """What a prediction from a CPU-only base re-times and what it does not; None for a GPU base."""
    if not cpu_only(plan):
        return None
    return ("a CPU-only base (no GPU kernel): its ops and the time inside them (lumos/model/host_gaps.py) are "
            "re-timed for a new width or micro-batch size by their work (FLOPs for GEMMs and attention, elements "
            "for the rest); the rebuild copies layers and micro-batches, and the optimizer's host loop scales with "
            "the parameters; the Python between ops keeps its time")


def tp_note(plan, target: dict) -> str | None:
    """A TP change of a GPU base without TP collectives where none are inserted (a TP decrease, or a
    base at TP > 1 whose trace shows none): what is and is not in its prediction."""
    tp = target.get("tp")
    if tp is None or tp == plan.tp or _has(plan, "tp") or cpu_only(plan) or "tp" in missing(plan, tp, 1, 1):
        return None
    return (f"TP {plan.tp} -> {tp} from a base with no tensor-parallel collective: its GEMMs, heads and shard-wide "
            f"element-wise work are re-sharded, but a base at TP {plan.tp} whose trace shows no TP collective does "
            f"not say where its all-reduces are, so none is inserted and this prediction has none of those a "
            f"TP {tp} layout runs")
