"""Predict a configuration that was never run, from one profiled base run.

base traces -> run graph (one rank per stage, rendezvous) -> structure and
suppliers fitted on the base -> transforms (width, DP, layers/PP/micro-batches)
-> replay -> run-level breakdown. Run level, for predicted and actual alike:
the iteration is the longest GPU span over the included ranks (one per
stage); the four components are that rank's.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Sequence

import numpy as np

from lumos.analysis import COMPONENTS, breakdown, relative_error_pct
from lumos.graph.run_graph import build_run_graph, run_breakdown
from lumos.graph.edges.cross_rank import add_rendezvous
from lumos.graph.model import TaskKind
from lumos.trace import TraceTable
from lumos.trace.steps import select_step

from .dp import change_dp
from .plan import Plan, comm_roles
from .rebuild import rebuild
from .structure import find_structure
from .suppliers import CollectiveSpec, ComputeSpec, fit_alpha_beta, fit_compute
from .suppliers.collectives import load_profile
from .micro_batch import change_micro_batch
from .microbatch_count import target_microbatches
from .speed import change_speed
from .width import change_width

KEYS = ("iteration_us",) + COMPONENTS


def base_plan(tables: Sequence[TraceTable], step=None, profile: dict | None = None) -> Plan:
    """The base run as a plan: run graph with rendezvous, structure, suppliers fitted on it."""
    graph = build_run_graph(tables, step=step)
    st = find_structure(graph, list(tables))
    role = comm_roles(st)
    samples = [(CollectiveSpec(st.coll[t], st.nbytes[t], st.group[t]), graph.dur[t])
               for t in np.flatnonzero(st.coll != None) if st.group[t]]  # noqa: E711
    coll_model = fit_alpha_beta(samples, profile or load_profile())
    gpu = np.flatnonzero((graph.kind == TaskKind.GPU) & ~graph.comm & (st.op_dims != None))  # noqa: E711
    comp = fit_compute([(ComputeSpec(str(st.op_name[t]), st.op_dims[t]), graph.dur[t]) for t in gpu])
    ranks = sorted(st.stage_of_rank)
    return Plan(graph=graph, st=st, role=role, shape=st.shape, tp=st.tp, pp=st.pp, dp=st.dp,
                layers=st.layers, microbatches=st.microbatches, ranks=ranks,
                collectives=coll_model, compute=comp, base_shape=st.shape)


def transform(plan: Plan, tp: int | None = None, pp: int | None = None, dp: int | None = None,
              layers: int | None = None, hidden: int | None = None, ffn: int | None = None,
              global_batch: int | None = None, micro_batch: int | None = None,
              compute_speed: float | None = None, network_speed: float | None = None,
              microbatch_rule: str = "auto") -> Plan:
    """Apply the what-if changes in a fixed order: hardware speed, width, micro-batch size, DP, then one
    pipeline rebuild. Micro-batches per iteration: `global_batch`, else `microbatch_rule`
    (`microbatch_count.py`: auto = the paper's TP x PP when the base follows it, else the base's)."""
    if tp is not None and tp != plan.tp:
        raise ValueError(f"changing TP ({plan.tp} -> {tp}) is not supported (as in the paper)")
    pp = pp or plan.pp
    dp = dp or plan.dp
    out = change_speed(plan, compute_speed, network_speed)
    out = change_width(out, hidden, ffn)
    out = change_micro_batch(out, micro_batch)
    out = change_dp(out, dp)
    m, note = target_microbatches(plan.microbatches, plan.tp, plan.pp, tp=plan.tp, pp=pp, dp=dp,
                                  micro_batch=out.shape.micro_batch, global_batch=global_batch,
                                  rule=microbatch_rule)
    if out is plan:  # nothing so far copied the base: its notes must not collect this target's
        out = dataclasses.replace(plan, notes=list(plan.notes))
    out.notes.append(note)
    layers = layers or plan.layers
    changed_width = out.shape.hidden != plan.shape.hidden or out.shape.ffn != plan.shape.ffn
    if pp != plan.pp or layers != plan.layers or m != plan.microbatches or changed_width:
        out = rebuild(out, pp=pp, layers=layers, microbatches=m)
    return out


def simulate_plan(plan: Plan, engine: str = "auto"):
    from lumos.sim import simulate

    graph = add_rendezvous(plan.graph, plan.pairs, set_durations=False) if plan.pairs else plan.graph
    sched = simulate(graph, engine=engine)
    return graph, sched, run_breakdown(graph, sched.start, sched.end)


def measure_run(tables: Sequence[TraceTable], step=None) -> dict:
    """Measured run-level breakdown of a run's traces (no graph, no replay)."""
    from lumos.graph.tasks import select_tasks
    from lumos.trace.schema import is_comm_kernel

    per = {}
    for t in tables:
        sel = select_tasks(t, select_step(t, step))
        name = t.name[sel.event]
        comm = sel.is_gpu & np.array([is_comm_kernel(n) for n in name], dtype=bool)
        per[t.rank] = breakdown(sel.ts, sel.ts + sel.dur, sel.is_gpu, comm, sel.in_step)
    crit = max(per, key=lambda r: per[r].iteration_us)
    return {"critical_rank": crit, **per[crit].as_dict()}


def memory_of(plan: Plan, overrides: dict | None = None) -> dict:
    """Peak memory per GPU of a plan's configuration (`memory.py`), settings from the cluster profile."""
    from .memory import MemorySettings, plan_memory
    from .schedule import layers_of_stage

    settings = MemorySettings.from_profile(load_profile(), **(overrides or {}))
    per_stage = [len(list(layers_of_stage(s, plan.pp, plan.layers))) for s in range(plan.pp)]
    return plan_memory(plan.shape, per_stage, plan.pp, plan.dp, plan.microbatches, settings)


def measured_steps(path) -> list[dict]:
    """Run-level measured breakdown of every profiled step of the run at `path`, in step order."""
    from lumos.trace import find_steps, load_run

    tables = load_run(path)
    rows = []
    for s in find_steps(tables[0]):
        m = measure_run(tables, step=s.number)
        rows.append({"run": Path(path).name, "step": s.number, **_round(m)})
    return rows


def _round(d: dict) -> dict:
    return {k: round(float(d[k]), 3) for k in KEYS}


def predict(base_tables: Sequence[TraceTable], target: dict, global_batch: int | None = None,
            micro_batch: int | None = None, actual_tables: Sequence[TraceTable] | None = None,
            actual_manifest: dict | None = None, base_name: str = "", engine: str = "auto",
            step=None, compute_speed: float | None = None, network_speed: float | None = None,
            memory: dict | None = None, microbatch_rule: str = "auto", samples: int = 0, seed: int = 0) -> dict:
    """Predicted run-level breakdown for `target` ({tp, pp, dp, layers, hidden, ffn}; None = as base).

    With `actual_tables`, also the measured breakdown and the errors (JSON shape of `lumos predict`).
    `microbatch_rule` (auto, tp_x_pp, keep) sets the target's micro-batch count when `global_batch`
    does not (`microbatch_count.py`). `samples` > 0 adds an `interval` from that many sampled
    replays (`lumos.analysis.uncertainty.predict_interval`, seeded by `seed`).
    """
    plan = base_plan(base_tables, step=step)
    tgt = {k: target.get(k) for k in ("tp", "pp", "dp", "layers", "hidden", "ffn")}
    out = transform(plan, global_batch=global_batch, micro_batch=micro_batch, compute_speed=compute_speed,
                    network_speed=network_speed, microbatch_rule=microbatch_rule, **tgt)
    graph, sched, bd = simulate_plan(out, engine=engine)
    predicted = _round(bd.as_dict())
    doc = {"base": base_name,
           "target": {"tp": out.tp, "pp": out.pp, "dp": out.dp, "layers": out.layers,
                      "hidden": out.shape.hidden, "ffn": out.shape.ffn,
                      "micro_batch": out.shape.micro_batch},
           "base_config": {"tp": plan.tp, "pp": plan.pp, "dp": plan.dp, "layers": plan.layers,
                           "hidden": plan.shape.hidden, "ffn": plan.shape.ffn,
                           "micro_batch": plan.shape.micro_batch, "microbatches": plan.microbatches},
           "microbatches": out.microbatches,
           "hardware": {"compute_speed": compute_speed or 1.0, "network_speed": network_speed or 1.0},
           "predicted": predicted,
           "critical_stage_rank": bd.critical_rank,
           "graph": {"tasks": int(graph.n_tasks), "edges": int(graph.n_edges),
                     "rendezvous": len(out.pairs)},
           "suppliers": {"collectives": plan.collectives.as_dict(),
                         "compute_fixed_us": {k: round(v, 3) for k, v in plan.compute.fixed_us.items()}},
           "notes": out.notes}
    doc["memory"] = memory_of(out, memory)
    if samples:
        from lumos.analysis.uncertainty import predict_interval
        doc["interval"] = predict_interval(base_tables, graph, out.pairs, samples, seed,
                                           lambda s, e: run_breakdown(graph, s, e).iteration,
                                           engine="reference" if engine == "reference" else "compiled")
    if actual_tables is not None:
        measured = measure_run(actual_tables, step=step)
        doc["measured"] = _round(measured)
        doc["error_pct"] = round(relative_error_pct(predicted["iteration_us"], measured["iteration_us"]), 4)
        comp = {k: relative_error_pct(predicted[k], measured[k]) for k in COMPONENTS}
        doc["component_error_pct"] = {k: None if v is None else round(v, 4) for k, v in comp.items()}
        doc["emulated_actual"] = bool((actual_manifest or {}).get("emulated", False))
    return doc


def read_manifest(path: str | Path) -> dict:
    p = Path(path)
    m = p / "manifest.json" if p.is_dir() else p.parent / "manifest.json"
    if m.exists():
        return json.loads(m.read_text())
    return {}
