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

from pathlib import Path
from typing import Sequence

import numpy as np

from lumos.analysis.run_replay import replayed
from lumos.durations.dp_host import HostCollectiveCosts, fit_host_collective_costs
from lumos.graph.profiled_steps import host_median_step_graph
from lumos.model.dp_flavour import find_dp_flavour, host_dp_degree
from lumos.trace import TraceTable, find_steps
from lumos.transform.dp_host import alone_on_host, from_one_rank, to_one_rank

from .options import PredictOptions
from .prediction import add_actual, measure_run, round_metrics
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
    return round(float(replayed(graph).iteration.iteration_us), 3)


def _document(table: TraceTable, target, base_dp: int, base_sharding: str, dp: int, sharding: str,
              notes: list, graph_counts: dict, host: str, steps: list, base_name: str) -> dict:
    """The `lumos predict` JSON of a host-DP prediction, without memory, interval or rebuild."""
    predicted = round_metrics(replayed(target).iteration.as_dict())
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
    base_kind = find_dp_flavour(table, step).kind
    costs = _calibration(table, calibration, dp, base_kind, f"--dp {dp} asked")
    graph, steps = host_median_step_graph(table, step, host, recordings)
    target, added, notes = from_one_rank(graph, table, costs)
    # the target runs as the calibration's DP runs did (their strategy is what their hooks added)
    doc = _document(table, target, 1, base_kind, dp, costs.sharding, notes,
                    {"added_us": round(sum(added.values()), 1)}, host, steps, base_name)
    doc["calibration"] = costs.as_dict()
    if actual_tables is not None:
        add_actual(doc, actual_tables, step)
    return doc


def _calibration(table: TraceTable, pairs, dp: int, base_kind: str, why: str) -> HostCollectiveCosts:
    """The costs fitted on `pairs`, which must have run at DP `dp` with the base's DP flavour."""
    costs = fit_host_collective_costs(pairs)
    if costs.dp != dp:
        raise ValueError(f"{table.path}: {why}, but the calibration recordings ran at DP {costs.dp}: "
                         f"record them at DP {dp} and at one rank")
    if _family(base_kind) != _family(costs.sharding):
        raise ValueError(f"{table.path}: the base trains with {base_kind}, the calibration "
                         f"recordings with {costs.sharding}: give recordings of the base's program")
    return costs


def _family(kind: str) -> str:
    """fsdp for every FSDP flavour (fsdp_full at N ranks is fsdp with no collective at one), else the kind."""
    return "fsdp" if kind.startswith("fsdp") else kind


def alone_slowdown(pairs, dp: int, base_kind: str, options: PredictOptions, where: str) -> dict:
    """How much slower than one rank alone the host work of `dp` ranks ran on this host: per pair (the
    same program at another size at DP `dp`, the same at one rank), the prediction `predict_one_rank`
    makes without calibration from the first, over the mean measured iteration of the second. This
    asks the calibration what the transform itself leaves out (the ranks' shared cores; at 4 ranks on
    2 cores the time outside the hooks also holds waits the transform already took out)."""
    ratios, names = [], []
    for at_dp, at_one in pairs:
        one, table = min(at_one, key=lambda t: t.rank), min(at_dp, key=lambda t: t.rank)
        pair = f"{Path(str(table.path)).parent.name} vs {Path(str(one.path)).parent.name}"
        kinds = {_family(find_dp_flavour(t).kind) for t in (table, one)}
        if kinds != {_family(base_kind)} or host_dp_degree(at_dp) != dp or host_dp_degree(at_one) != 1 or len(at_one) != 1:
            raise ValueError(f"{where}: calibration pair {pair} is not {_family(base_kind)} at DP {dp} and at one rank "
                             f"({' and '.join(sorted(kinds))} at DP {host_dp_degree(at_dp)} and "
                             f"{host_dp_degree(at_one)}): give recordings of the base's program")
        graph, _ = host_median_step_graph(table, options.step, options.host)
        predicted = replayed(to_one_rank(graph, table)[0]).iteration.iteration_us
        measured = np.mean([measure_run(at_one, step=s.number)["iteration_us"] for s in find_steps(one)])
        ratios.append(float(predicted / measured))
        names.append(pair)
    return {"dp": dp, "sharding": base_kind, "slowdown": round(float(np.mean(ratios)), 4),
            "per_pair": [round(r, 4) for r in ratios], "recordings": names}


def predict_one_rank(base_tables: Sequence[TraceTable], options: PredictOptions = PredictOptions(), *,
                     actual_tables: Sequence[TraceTable] | None = None,
                     recordings: Sequence[Sequence[TraceTable]] = (), base_name: str = "",
                     calibration: Sequence[tuple[Sequence[TraceTable], Sequence[TraceTable]]] = ()) -> dict:
    """The base (a `host_collective_run`) at DP 1: the `lumos predict` JSON shape, without memory,
    interval or rebuild (`graph.rendezvous` 0). Of `options`, `step` and `host` apply. With
    `calibration` (pairs: another model size at the base's DP, the same at one rank), the kept host
    work runs as fast as one rank alone on the host does (`transform.dp_host.alone_on_host`)."""
    step, host = options.step, options.host
    check_steps(base_tables, host, recordings=recordings)
    table = min(base_tables, key=lambda t: t.rank)
    flavours = {t.rank: find_dp_flavour(t, step) for t in base_tables}
    dp = host_dp_degree(base_tables, step, flavours=flavours)
    if dp <= 1:
        raise ValueError(f"{table.path}: the base runs at DP 1 already (its host collectives span a group of one)")
    graph, steps = host_median_step_graph(table, step, host, recordings)
    target, found, notes = to_one_rank(graph, table, shared_host=not calibration)
    alone = None
    if calibration:
        alone = alone_slowdown(calibration, dp, flavours[table.rank].kind, options, table.path)
        target = alone_on_host(target, found, alone["slowdown"])
        notes.append(f"the kept host work / {alone['slowdown']:.3f}: the base's {dp} ranks shared this host's "
                     f"cores, one rank runs alone (this prediction made from each calibration pair's DP {dp} "
                     f"recording, over its one-rank recording's measured iteration, mean of "
                     f"{len(alone['per_pair'])} pairs: {', '.join(alone['recordings'])})")
    doc = _document(table, target, dp, flavours[table.rank].kind, 1, "none", notes,
                    {"taken_out": int(found.tasks.sum())}, host, steps, base_name)
    if alone is not None:
        doc["calibration"] = alone
    if actual_tables is not None:
        add_actual(doc, actual_tables, step)
    return doc
