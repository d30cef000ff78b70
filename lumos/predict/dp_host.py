"""Predict a DP change of a CPU run whose data parallelism runs on the host's collectives (gloo).

The what-if transforms rebuild a run from its layers and re-time device collectives; a CPU
capture's collectives are host ops, which they do not re-time (`whatif.refuse_unmodelled_dp`).
Two DP changes are made here (`lumos.transform.dp_host`):
- to a group of one, where FSDP2 issues no collective and DDP's all-reduces wait for no one: a
  CPU capture holds everything for it (`predict_one_rank`);
- from a one-rank FSDP2 or DDP capture to N ranks, with what N ranks add in each FSDP2 hook, or in
  each DDP bucket's all-reduce and its finalize, read off calibration recordings of the same
  program at another size (`predict_from_one_rank`): the one-rank trace has the hooks but none of
  the work, and nothing in it times gloo on this host.
The step graph of the base's lowest rank is replayed, its host work the median over its profiled
steps (and over other recordings', `recordings`) as for every prediction.
"""

from __future__ import annotations

from typing import Sequence

from lumos.analysis.run_replay import run_breakdown
from lumos.durations.dp_host import fit_host_collective_costs
from lumos.graph.profiled_steps import host_median_step_graph
from lumos.model.dp_flavour import find_dp_flavour, host_dp_degree
from lumos.sim import simulate
from lumos.trace import TraceTable
from lumos.transform.dp_host import from_one_rank, to_one_rank

from .options import PredictOptions
from .prediction import add_actual, round_metrics
from .whatif import check_steps

__all__ = ["host_collective_run", "one_rank_dp_run", "predict_from_one_rank", "predict_one_rank", "replay_unchanged"]


def _on_device(tables: Sequence[TraceTable]) -> bool:
    return any((t.stream >= 0).any() or (t.device >= 0).any() for t in tables)


def host_collective_run(tables: Sequence[TraceTable], step=None) -> bool:
    """A run with no device event whose DP collectives are host ops (gloo on CPU) over more than one
    rank (DDP's all-reduces over a group of one are a `one_rank_dp_run`)."""
    if _on_device(tables):
        return False
    flavours = {t.rank: find_dp_flavour(t, step) for t in tables}
    if not any(f.collectives for f in flavours.values()):
        return False
    return not (all(f.ddp for f in flavours.values()) and host_dp_degree(tables, step, flavours=flavours) == 1)


def one_rank_dp_run(tables: Sequence[TraceTable], step=None) -> bool:
    """A run with no device event that trains with FSDP on a group of one (no collective at all), or
    with DDP on a group of one (its all-reduces over the group of one)."""
    if _on_device(tables):
        return False
    flavours = {t.rank: find_dp_flavour(t, step) for t in tables}
    if all(f.kind == "fsdp" and not f.collectives for f in flavours.values()):
        return True
    return all(f.ddp for f in flavours.values()) and host_dp_degree(tables, step, flavours=flavours) == 1


def replay_unchanged(base_tables: Sequence[TraceTable], options: PredictOptions = PredictOptions(),
                     recordings: Sequence[Sequence[TraceTable]] = ()) -> float:
    """Iteration (us) of the base's lowest rank's step graph replayed unchanged, its host work as the
    predictions from it take it (`options.step`, `options.host`, `recordings`)."""
    table = min(base_tables, key=lambda t: t.rank)
    graph, _ = host_median_step_graph(table, options.step, options.host, recordings)
    sched = simulate(graph)
    return round(float(run_breakdown(graph, sched.start, sched.end).iteration.iteration_us), 3)


def _document(table: TraceTable, target, base_dp: int, base_sharding: str, dp: int, sharding: str,
              notes: list, graph_counts: dict, host: str, steps: list, base_name: str) -> dict:
    """The `lumos predict` JSON of a host-DP prediction, without memory, interval or rebuild."""
    sched = simulate(target)
    predicted = round_metrics(run_breakdown(target, sched.start, sched.end).iteration.as_dict())
    cfg = (table.metadata.get("lumosCapture") or {}).get("config") or {}
    microbatches = (table.metadata.get("lumosCapture") or {}).get("microbatches")
    shape = {"layers": cfg.get("layers"), "hidden": cfg.get("hidden"), "ffn": cfg.get("ffn"),
             "micro_batch": cfg.get("micro_batch")}
    return {"base": base_name,
            "target": {"tp": 1, "pp": 1, "dp": dp, **shape, "dp_sharding": sharding},
            "base_config": {"tp": 1, "pp": 1, "dp": base_dp, **shape, "dp_sharding": base_sharding},
            "microbatches": microbatches,
            "predicted": predicted,
            "critical_stage_rank": int(table.rank),
            "graph": {"tasks": int(target.n_tasks), "edges": int(target.n_edges), "rendezvous": 0, **graph_counts},
            "notes": notes + [f"from rank {table.rank}'s step graph (the ranks run the same program)"],
            "host": {"mode": host, "steps": {str(table.rank): steps}}}


def predict_from_one_rank(base_tables: Sequence[TraceTable], dp: int,
                          calibration: Sequence[tuple[Sequence[TraceTable], Sequence[TraceTable]]],
                          options: PredictOptions = PredictOptions(), *,
                          actual_tables: Sequence[TraceTable] | None = None,
                          recordings: Sequence[Sequence[TraceTable]] = (), base_name: str = "") -> dict:
    """The base (a `one_rank_dp_run`) at `dp` ranks, what the ranks add fitted on `calibration`:
    pairs (the same program at another size at DP `dp`, the same at one rank). Of `options`, `step`
    and `host` apply."""
    step, host = options.step, options.host
    check_steps(base_tables, host, recordings=recordings)
    table = min(base_tables, key=lambda t: t.rank)
    if not one_rank_dp_run(base_tables, step):
        raise ValueError(f"{table.path}: not a one-rank FSDP2 or DDP capture without device work: the calibrated "
                         "DP change is made from one rank only")
    costs = fit_host_collective_costs(calibration)
    if costs.dp != dp:
        raise ValueError(f"{table.path}: --dp {dp} asked, but the calibration recordings ran at DP {costs.dp}: "
                         "record them at the degree to predict")
    base_kind = find_dp_flavour(table, step).kind
    if (base_kind == "fsdp") != costs.sharding.startswith("fsdp"):
        raise ValueError(f"{table.path}: the base trains with {base_kind} at one rank, the calibration "
                         f"recordings with {costs.sharding}: give recordings of the base's program")
    graph, steps = host_median_step_graph(table, step, host, recordings)
    target, added, notes = from_one_rank(graph, table, costs)
    # the target runs as the calibration's DP runs did (their strategy is what their hooks added)
    doc = _document(table, target, 1, base_kind, dp, costs.sharding, notes,
                    {"added_us": round(sum(added.values()), 1)}, host, steps, base_name)
    doc["calibration"] = costs.as_dict()
    if actual_tables is not None:
        add_actual(doc, actual_tables, step)
    return doc


def predict_one_rank(base_tables: Sequence[TraceTable], options: PredictOptions = PredictOptions(), *,
                     actual_tables: Sequence[TraceTable] | None = None,
                     recordings: Sequence[Sequence[TraceTable]] = (), base_name: str = "") -> dict:
    """The base (a `host_collective_run`) at DP 1: the `lumos predict` JSON shape, without memory,
    interval or rebuild (`graph.rendezvous` 0). Of `options`, `step` and `host` apply."""
    step, host = options.step, options.host
    check_steps(base_tables, host, recordings=recordings)
    table = min(base_tables, key=lambda t: t.rank)
    flavours = {t.rank: find_dp_flavour(t, step) for t in base_tables}
    dp = host_dp_degree(base_tables, step, flavours=flavours)
    if dp <= 1:
        raise ValueError(f"{table.path}: the base runs at DP 1 already (its host collectives span a group of one)")
    graph, steps = host_median_step_graph(table, step, host, recordings)
    target, found, notes = to_one_rank(graph, table)
    doc = _document(table, target, dp, flavours[table.rank].kind, 1, "none", notes,
                    {"taken_out": int(found.tasks.sum())}, host, steps, base_name)
    if actual_tables is not None:
        add_actual(doc, actual_tables, step)
    return doc
