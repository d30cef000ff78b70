"""Predict an EP change of a CPU MoE run whose token exchanges are host collectives (gloo on CPU).

The what-if transforms re-time device collectives and rebuild one rank per pipeline stage; a CPU MoE
capture (`lumos capture moe --ep N`) holds every EP rank and its exchanges are host ops, which they
refuse (`whatif.refuse_unmodelled_dp`). Here the step graph of the base's lowest rank is changed
(`lumos.transform.moe_host.change_ep_host`): its experts re-timed for the target's experts and rows,
its host work slowed as the calibration's processes were, its gloo collectives the calibration's at
the target's group (`lumos.durations.moe_host`), then replayed; its host work the median over its
profiled steps (and over other recordings', `recordings`) as for every prediction.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from lumos.analysis.run_replay import replayed
from lumos.durations.compute import ComputeSpec, fit_compute
from lumos.durations.moe_host import fit_host_moe_costs
from lumos.graph.model import TaskKind
from lumos.graph.profiled_steps import host_median_step_graph
from lumos.model.host_gaps import host_gaps
from lumos.model.moe_host import is_host_moe, read_host_moe_step
from lumos.trace import TraceTable
from lumos.trace.steps import select_step
from lumos.transform.moe_host import EPChange, change_ep_host

from .options import PredictOptions
from .prediction import add_actual, round_metrics
from .whatif import check_steps, structure_report

__all__ = ["host_moe_run", "predict_host_ep", "target_rows"]


def host_moe_run(tables: Sequence[TraceTable]) -> bool:
    """A CPU-only MoE run whose token exchanges are host all-to-alls (gloo), every rank one."""
    return bool(tables) and all(is_host_moe(t) for t in tables)


def read_moe(tables: Sequence[TraceTable], step=None) -> tuple[dict, dict]:
    """(the MoE reading, the shape) of a run, as `lumos replay --structure` prints them."""
    rep = structure_report(tables, step)
    moe = rep.get("moe") or {}
    if not moe or "error" in moe or "experts" not in moe:
        why = moe.get("error") or rep.get("error") or "no MoE layer read"
        raise ValueError(f"{tables[0].path}: its MoE layers cannot be read ({why}; `lumos replay --structure`)")
    return moe, rep.get("shape") or {}


def target_rows(moe: dict, ep: int) -> dict:
    """(layer, global expert) -> the rows that expert takes at EP `ep`: its share of the base's tokens in
    that layer (the routing as measured) x the tokens of `ep` ranks x top-k."""
    T, k, E = int(moe["tokens"]), int(moe["top_k"]), int(moe["experts"])
    out = {}
    for entry in moe.get("tokens_per_expert", []):
        counts = np.asarray(entry["tokens"], dtype=float)
        share = counts / counts.sum() if counts.sum() > 0 else np.full(E, 1.0 / E)
        for e in range(E):
            out[(int(entry["layer"]), e)] = float(share[e]) * T * ep * k
    return out


def _host_compute(graph, table):
    """The compute model fitted on the base's own host ops and the gaps inside them (as `base_plan` fits a
    CPU capture's), and the gaps."""
    cpu = np.flatnonzero((graph.kind == TaskKind.CPU) & (graph.event >= 0))
    samples = [(ComputeSpec(str(table.name[e]), table.input_dims[e]), float(graph.dur[t]))
               for t, e in zip(cpu.tolist(), graph.event[cpu].tolist()) if table.input_dims[e]]
    gaps = host_gaps(graph, [table])
    samples += [(ComputeSpec(n, d), float(graph.lag[e])) for e, n, d in zip(gaps.edge.tolist(), gaps.op_name,
                                                                             gaps.op_dims)]
    return fit_compute(samples, host_ops=True), gaps


def predict_host_ep(base_tables: Sequence[TraceTable], ep: int,
                    calibration: Sequence[tuple[Sequence[TraceTable], Sequence[TraceTable]]],
                    options: PredictOptions = PredictOptions(), *,
                    actual_tables: Sequence[TraceTable] | None = None,
                    recordings: Sequence[Sequence[TraceTable]] = (), base_name: str = "",
                    slowdown_from: str = "dense_forward") -> dict:
    """The base (a `host_moe_run`) at EP `ep`, the host's slowdown and gloo's collectives fitted on
    `calibration`: pairs (the same program at the base's EP, the same at `ep`; the slowdown from the work
    `slowdown_from` names, `lumos.durations.moe_host.SLOWDOWN_FROM`). Of `options`, `step` and `host` apply."""
    step, host = options.step, options.host
    check_steps(base_tables, host, recordings=recordings)
    table = min(base_tables, key=lambda t: t.rank)
    if not host_moe_run(base_tables):
        raise ValueError(f"{table.path}: not a CPU MoE capture with expert parallelism over gloo (moe/expert_* "
                         "ranges and c10d::alltoall_base_ on every rank)")
    moe, shape = read_moe(base_tables, step)
    E, base_ep = int(moe["experts"]), int(moe["ep"])
    if len(base_tables) != base_ep:
        raise ValueError(f"{table.path}: {len(base_tables)} of the base's {base_ep} EP ranks: the rows each expert "
                         "gets are read from every rank")
    if ep == base_ep:
        raise ValueError(f"{table.path}: the base runs at EP {ep} already")
    if ep < 2:
        raise ValueError(f"{table.path}: EP 1 exchanges no tokens and reduces no gradient: not predicted from host "
                         "collectives (any EP above 1 that divides the experts is)")
    if E % ep:
        raise ValueError(f"{table.path}: EP {ep} must divide the {E} experts")
    n_a, n_b = E // base_ep, E // ep
    if max(n_a, n_b) % min(n_a, n_b):
        raise ValueError(f"{table.path}: EP {base_ep} -> {ep} takes {n_a} experts per rank to {n_b}: one must divide "
                         "the other (each base expert stands for whole target experts)")
    if not moe.get("tokens_per_expert"):
        raise ValueError(f"{table.path}: the tokens per expert are not read ({moe.get('evidence', {}).get('tokens per expert')})")
    costs = fit_host_moe_costs(calibration, slowdown_from=slowdown_from)
    if (costs.base_ep, costs.target_ep) != (base_ep, ep):
        raise ValueError(f"{table.path}: EP {base_ep} -> {ep} asked, but the calibration recordings run at EP "
                         f"{costs.base_ep} and {costs.target_ep}: record them at the base's and the target's EP")
    graph, steps = host_median_step_graph(table, step, host, recordings)
    comp, gaps = _host_compute(graph, table)
    chosen = select_step(table, graph.summary.get("step"))
    f, h = int(moe["expert_ffn"]), int(shape.get("hidden") or 0)
    reading = read_host_moe_step(table, chosen, ((f, h), (h, f)) if h else ())
    change = EPChange(base_ep=base_ep, target_ep=ep, experts=E, rows=target_rows(moe, ep))
    target, done, notes = change_ep_host(graph, table, reading, change, comp, gaps, costs)
    predicted = round_metrics(replayed(target).iteration.as_dict())
    pairs = None
    if len(calibration) > 1:     # the same prediction calibrated on each pair alone: how far its rounds disagree
        alone = []
        for pair in calibration:
            one, _, _ = change_ep_host(graph, table, reading, change, comp, gaps,
                                       fit_host_moe_costs([pair], slowdown_from=slowdown_from))
            alone.append(round(float(replayed(one).iteration.iteration_us), 3))
        pairs = {"iteration_us": alone, "lo_us": min(alone), "hi_us": max(alone), "recordings": costs.recordings}
        notes.append(f"calibrated on each pair alone: {', '.join(f'{x / 1e3:.1f}' for x in alone)} ms (the rounds "
                     f"disagree by {100 * (max(alone) - min(alone)) / predicted['iteration_us']:.1f}% of the "
                     "prediction; a recording of the target can land outside that)")
    cap = table.metadata.get("lumosCapture") or {}
    common = {"tp": 1, "pp": 1, "layers": cap.get("layers"), "hidden": h or None, "ffn": shape.get("ffn"),
              "micro_batch": shape.get("micro_batch")}
    moe_of = {"experts": E, "top_k": int(moe["top_k"]), "expert_ffn": f}
    doc = {"base": base_name,
           "target": {**common, "dp": ep, "moe": {**moe_of, "ep": ep}},
           "base_config": {**common, "dp": base_ep, "moe": {**moe_of, "ep": base_ep}},
           "microbatches": cap.get("microbatches", 1),
           "predicted": predicted,
           "critical_stage_rank": int(table.rank),
           "graph": {"tasks": int(target.n_tasks), "edges": int(target.n_edges), "rendezvous": 0},
           "changed": done,
           "notes": notes + [f"from rank {table.rank}'s step graph (the ranks run the same program); DP = EP "
                             "(each rank trains its own micro-batch)"],
           "host": {"mode": host, "steps": {str(table.rank): steps}},
           "calibration": costs.as_dict()}
    if pairs is not None:
        doc["calibration_pairs"] = pairs
    if actual_tables is not None:
        add_actual(doc, actual_tables, step)
    return doc
