"""Predict one rank from a CPU run whose data parallelism runs on the host's collectives (gloo).

The what-if transforms rebuild a run from its layers and re-time device collectives; a CPU
capture's collectives are host ops, which they do not re-time (`whatif.refuse_unmodelled_dp`).
The one DP change made here is the one a CPU capture holds everything for: to a group of one,
where FSDP2 issues no collective (`lumos.transform.host_dp`). The step graph of the base's
lowest rank is replayed without them, its host work the median over its profiled steps (and
over other recordings', `recordings`) as for every prediction.
"""

from __future__ import annotations

from typing import Sequence

from lumos.graph import build_graph
from lumos.graph.profiled_steps import profiled_steps, with_step_medians
from lumos.sim import simulate
from lumos.trace import TraceTable
from lumos.transform.dp_flavour import find_dp_flavour, host_dp_degree
from lumos.transform.host_dp import to_one_rank
from lumos.transform.whatif import check_steps

from .predict import add_actual, round_metrics
from .run_replay import run_breakdown

__all__ = ["host_collective_run", "predict_one_rank"]


def host_collective_run(tables: Sequence[TraceTable], step=None) -> bool:
    """A run with no device event whose DP collectives are host ops (gloo on CPU)."""
    for t in tables:
        if (t.stream >= 0).any() or (t.device >= 0).any():
            return False
    return any(find_dp_flavour(t, step).collectives for t in tables)


def predict_one_rank(base_tables: Sequence[TraceTable], actual_tables: Sequence[TraceTable] | None = None,
                     step=None, host: str = "median", recordings: Sequence[Sequence[TraceTable]] = (),
                     base_name: str = "") -> dict:
    """The base (a `host_collective_run`) at DP 1: the `lumos predict` JSON shape, without memory,
    interval or rebuild (`graph.rendezvous` 0)."""
    check_steps(base_tables, host, recordings=recordings)
    table = min(base_tables, key=lambda t: t.rank)
    flavours = {t.rank: find_dp_flavour(t, step) for t in base_tables}
    dp = host_dp_degree(base_tables, step, flavours=flavours)
    if dp <= 1:
        raise ValueError(f"{table.path}: the base runs at DP 1 already (its host collectives span a group of one)")
    graph = build_graph(table, step=step)
    steps = [graph.summary.get("step")]
    if host == "median":
        pairing = profiled_steps(graph, table, recordings)
        graph = with_step_medians(graph, pairing, kernels=False)   # a CPU run: no kernels
        steps = list(pairing.steps)
    target, found, notes = to_one_rank(graph, table)
    sched = simulate(target)
    predicted = round_metrics(run_breakdown(target, sched.start, sched.end).iteration.as_dict())
    cfg = (table.metadata.get("lumosCapture") or {}).get("config") or {}
    microbatches = (table.metadata.get("lumosCapture") or {}).get("microbatches")
    shape = {"layers": cfg.get("layers"), "hidden": cfg.get("hidden"), "ffn": cfg.get("ffn"),
             "micro_batch": cfg.get("micro_batch")}
    doc = {"base": base_name,
           "target": {"tp": 1, "pp": 1, "dp": 1, **shape, "dp_sharding": "none"},
           "base_config": {"tp": 1, "pp": 1, "dp": dp, **shape, "dp_sharding": flavours[table.rank].kind},
           "microbatches": microbatches,
           "predicted": predicted,
           "critical_stage_rank": int(table.rank),
           "graph": {"tasks": int(target.n_tasks), "edges": int(target.n_edges), "rendezvous": 0,
                     "taken_out": int(found.tasks.sum())},
           "notes": notes + [f"from rank {table.rank}'s step graph (the ranks run the same program)"],
           "host": {"mode": host, "steps": {str(table.rank): steps}}}
    if actual_tables is not None:
        add_actual(doc, actual_tables, step)
    return doc
