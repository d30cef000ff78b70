"""Predict a configuration that was never run, from one profiled base run.

The plan and its what-if changes come from `lumos.predict.whatif`; this
module replays the changed graph and reads the run-level breakdown. Run level,
for predicted and actual alike: the iteration is the longest GPU span over the
included ranks (one per stage); the four components are that rank's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from lumos.analysis.breakdown import COMPONENTS, METRICS, breakdown, relative_error_pct
from lumos.analysis.run_replay import critical_rank, run_breakdown
from lumos.graph.edges.cross_rank import add_rendezvous
from lumos.model.recover import summary as structure_summary
from lumos.sim import simulate
from lumos.trace import TraceTable
from lumos.trace.steps import select_step
from lumos.transform.moe import moe_now
from lumos.transform.plan import Plan
from lumos.transform.speed import compute_kernels

from .contention import contention_effect
from .device_memory import device_memory, with_device
from .fixed_point import replay_to_fixed_point
from .nic_sharing import nic_effect
from .no_op import cpu_only_note, refuse_no_ops, tp_note
from .options import PredictOptions
from .peer_waits import apply_peer_waits, holds_base_tasks, read_peer_waits, resolve_mode, settle
from .whatif import base_plan, memory_of, transform

__all__ = ["predict", "add_actual", "round_metrics", "simulate_plan", "measure_run", "measured_steps"]

KEYS = METRICS


def simulate_plan(plan: Plan, engine: str = "auto"):
    """Replay a plan's graph (its pending rendezvous joined, the transfers that newly cross hosts
    sharing their NIC: `nic_sharing`, compute kernels slowed by the communication beside them:
    `contention`); the graph, schedule and run breakdown."""
    graph = add_rendezvous(plan.graph, plan.pairs, set_durations=False) if plan.pairs else plan.graph
    sched = simulate(graph, engine=engine)
    graph, sched = replay_to_fixed_point(graph, sched, [nic_effect(plan, graph), contention_effect(plan, graph)],
                                         lambda g: simulate(g, engine=engine))
    return graph, sched, run_breakdown(graph, sched.start, sched.end)


def measure_run(tables: Sequence[TraceTable], step=None) -> dict:
    """Measured run-level breakdown of a run's traces (no graph, no replay)."""
    from lumos.graph.tasks import select_tasks
    from lumos.trace.schema import comm_kernel_mask

    per = {}
    for t in tables:
        sel = select_tasks(t, select_step(t, step))
        comm = sel.is_gpu & comm_kernel_mask(t.name[sel.event])
        per[t.rank] = breakdown(sel.ts, sel.ts + sel.dur, sel.is_gpu, comm, sel.in_step)
    crit = critical_rank(per)
    return {"critical_rank": crit, **per[crit].as_dict()}


def measured_steps(path) -> list[dict]:
    """Run-level measured breakdown of every profiled step of the run at `path`, in step order."""
    from lumos.trace import find_steps, load_run

    tables = load_run(path)
    rows = []
    for s in find_steps(tables[0]):
        m = measure_run(tables, step=s.number)
        rows.append({"run": Path(path).name, "step": s.number, **round_metrics(m)})
    return rows


def round_metrics(d: dict) -> dict:
    """The breakdown's metrics to the nanosecond, as every prediction document carries them."""
    return {k: round(float(d[k]), 3) for k in KEYS}


def predict(base_tables: Sequence[TraceTable], target: dict, options: PredictOptions = PredictOptions(), *,
            actual_tables: Sequence[TraceTable] | None = None, actual_manifest: dict | None = None,
            base_name: str = "", plan: Plan | None = None,
            recordings: Sequence[Sequence[TraceTable]] = (), on_graph=None) -> dict:
    """Predicted run-level breakdown of `target` ({tp, pp, dp, layers, hidden, ffn}; None = as the base),
    a configuration never run, from one profiled base run; how it is made is `options` (`options.py`).

    `actual_tables` (and its `actual_manifest`) add the measured breakdown and the errors (the JSON of
    `lumos predict`); `plan`: `base_plan(base_tables, options)` made once for many predictions from one
    base; `recordings`: other recordings of the base, pooled into its medians when the plan is fitted here;
    `on_graph(graph, ranks)`: given the predicted graph (the target's, replayed to its fixed point, its
    rendezvous joined) and the ranks it simulates, before the document is made (`lumos predict --export`).

        doc = predict(load_run("base"), {"pp": 4}, PredictOptions(global_batch=64, samples=40))
    """
    if plan is None:
        plan = base_plan(base_tables, options, recordings=recordings)
    tgt = {k: target.get(k) for k in ("tp", "pp", "dp", "layers", "hidden", "ffn", "kv_heads", "seq", "vp", "cp",
                                      "first_stage_layers", "last_stage_layers", "ep", "experts", "top_k",
                                      "expert_ffn", "capacity_factor")}
    tgt["pad_to_capacity"] = bool(target.get("pad_to_capacity"))
    refuse_no_ops(plan, tgt, options)   # a change that would change nothing: refused, with what the base lacks
    engine, peer_waits, compute_speed = options.engine, options.peer_waits, options.compute_speed
    mode = resolve_mode(plan, peer_waits)
    waits = _peer_waits(plan, mode, engine)
    rounds = []

    def run(speed):
        nonlocal waits, mode
        o = target_plan(plan, tgt, options, speed)
        if waits is not None and peer_waits == "auto" and not holds_base_tasks(plan, o):
            waits, mode = None, "additive"    # auto: a rebuilt target has no task of the base to anchor to
        if waits is None:
            return (o, *simulate_plan(o, engine=engine))
        if o.graph is plan.graph:   # an unchanged target shares the base's graph
            o = o.clone()
        apply_peer_waits(plan, o, waits)
        graph, sched, bd, r = settle(o, waits, lambda p: simulate_plan(p, engine=engine))
        rounds.append(r)
        return o, graph, sched, bd

    out, graph, sched, bd = run(compute_speed)
    clock = clock_setting(base_tables, options.clocks)
    if clock is not None:
        out, graph, sched, bd, clock_doc = _under_clock(run, clock, compute_speed, (out, graph, sched, bd))
        out.notes.append(clock_doc["note"])
    if on_graph is not None:
        on_graph(graph, [int(r) for r in out.ranks])
    predicted = round_metrics(bd.as_dict())
    doc = {"base": base_name,
           "target": {"tp": out.tp, "pp": out.pp, "vp": out.chunks, "dp": out.dp // out.cp, "cp": out.cp,
                      "layers": out.layers, "stage_layers": list(out.stage_layers),
                      "hidden": out.shape.hidden, "ffn": out.shape.ffn, "kv_heads": out.shape.kv, "seq": out.shape.seq,
                      "micro_batch": out.shape.micro_batch, "dp_sharding": out.sharding or "none"},
           "base_config": {"tp": plan.tp, "pp": plan.pp, "vp": plan.chunks, "dp": plan.dp // plan.cp, "cp": plan.cp,
                           "layers": plan.layers,
                           "hidden": plan.shape.hidden, "ffn": plan.shape.ffn, "kv_heads": plan.shape.kv,
                           "seq": plan.shape.seq,
                           "micro_batch": plan.shape.micro_batch, "microbatches": plan.microbatches,
                           "dp_sharding": plan.sharding or "none"},
           "microbatches": out.microbatches,
           "hardware": {"compute_speed": compute_speed or 1.0, "network_speed": options.network_speed or 1.0},
           "predicted": predicted,
           "critical_stage_rank": bd.critical_rank,
           "graph": {"tasks": int(graph.n_tasks), "edges": int(graph.n_edges),
                     "rendezvous": len(out.pairs)},
           "suppliers": {"collectives": plan.collectives.as_dict(),
                         "compute_fixed_us": {k: round(v, 3) for k, v in plan.compute.fixed_us.items()},
                         "gemm": plan.compute.gemm_summary()},
           "notes": out.notes,
           "host": {"mode": options.host, "kernels": options.kernels,
                    "steps": {str(r): list(h.steps) for r, h in sorted(plan.profiled_steps.items())}},
           "structure": structure_summary(plan.st.recovery)}
    doc["notes"] += median_notes(plan.profiled_steps, options.host, options.kernels)
    doc["notes"] += [n for n in (tp_note(plan, tgt), cpu_only_note(plan)) if n]
    if graph.summary.get("nic_sharing"):
        doc["nic_sharing"] = ns = graph.summary["nic_sharing"]
        doc["notes"].append(f"NIC sharing: {ns['slowed']} of the {ns['of']} transfers that cross hosts only in the "
                            f"target{_reshared(ns)} ran beside another on their GPU's NIC, {ns['added_ms']} ms longer in all "
                            f"({ns['replays']} replays{'' if ns['settled'] else ', not settled'}; "
                            "lumos.predict.nic_sharing)")
    doc["contention"] = {**plan.contention.as_dict(), **{k: v for k, v in graph.summary.get("contention", {}).items()
                                                         if k in ("added_ms", "replays", "settled")}}
    if plan.contention.active:
        cn = doc["contention"]
        doc["notes"].append(f"compute under communication: the base's kernels ran {cn['slowdown']:.1%} slower wholly "
                            f"under a communication kernel (weighted median over {cn['kernels']} kernels); the target's "
                            f"overlap adds {cn.get('added_ms', 0.0)} ms of compute to their time alone "
                            f"({cn.get('replays', 0)} replays; lumos.durations.contention)")
    if peer_waits == "auto" and plan.sharding and waits is None:
        doc["notes"].append("peer waits additive: auto anchors a sharded base's waits only where the target keeps "
                            "the base's tasks (a change of DP or speed alone); this one rebuilds them")
    if waits is not None:
        doc["peer_waits"] = pw = {"mode": mode, "asked": peer_waits, **waits.as_dict(), "rounds": rounds[-1]}
        doc["notes"].append(f"peer waits anchored: {pw['anchored_wait_ms']} ms that {pw['anchored']} of the base's "
                            f"{pw['collectives']} DP collectives waited for their peers replayed as the peers' "
                            f"arrival, not kernel time ({pw['rounds']} replay(s) after the first settled the floors)")
    if clock is not None:
        doc["clock"] = {k: v for k, v in clock_doc.items() if k != "note"}
    memory, device = device_memory(base_tables, options.memory)   # the base's own GPU, else the profile's
    doc["memory"] = with_device(memory_of(out, memory), device)
    if options.samples:
        from lumos.analysis.uncertainty import predict_interval
        clock_steps = None
        if clock is not None and clock_doc.get("step_levels"):
            mask = np.zeros(graph.n_tasks, dtype=bool)
            kernels = compute_kernels(out)
            mask[:len(kernels)] = kernels
            clock_steps = (mask, clock_doc["step_levels"])
        doc["interval"] = predict_interval(base_tables, graph, out.pairs, options.samples, options.seed,
                                           lambda s, e: run_breakdown(graph, s, e).iteration,
                                           engine="reference" if engine == "reference" else "compiled",
                                           host_steps=plan.host_steps, clock_steps=clock_steps,
                                           arrivals=None if waits is None else waits.arrivals())
    if plan.st.moe is not None:
        doc["target"]["moe"] = moe_summary(out)
        doc["base_config"]["moe"] = moe_summary(plan)
        if options.samples:
            doc["routing"] = routing_interval(plan, tgt, options, compute_speed, base_tables)
    if actual_tables is not None:
        add_actual(doc, actual_tables, options.step, emulated=bool((actual_manifest or {}).get("emulated", False)))
    return doc


def target_plan(plan: Plan, tgt: dict, options: PredictOptions, compute_speed, **extra) -> Plan:
    """`transform` of `plan` into the target `tgt` as `options` say, at `compute_speed` (`extra`: a routing draw)."""
    return transform(plan, global_batch=options.global_batch, micro_batch=options.micro_batch,
                     compute_speed=compute_speed, network_speed=options.network_speed,
                     microbatch_rule=options.microbatch_rule, fsdp_strategy=options.fsdp_strategy, **extra, **tgt)


def moe_summary(plan: Plan) -> dict:
    """An MoE plan's experts, top-k, EP and expert width (the target's where a transform changed them)."""
    experts, top_k, ffn = moe_now(plan)
    return {"experts": experts, "top_k": top_k, "ep": plan.ep, "expert_ffn": ffn,
            "routing": plan.routing.as_dict() if plan.routing is not None else None}


def routing_interval(plan: Plan, tgt: dict, options: PredictOptions, compute_speed, base_tables) -> dict:
    """The prediction's interval over `options.samples` draws of the MoE layers' routing (each layer and
    micro-batch its own draw from the base's fitted unevenness, `lumos.durations.routing`), each replayed with
    one draw of the kernels' and collectives' spread fitted on the base (`lumos.analysis.uncertainty`): what
    varies from one iteration of an MoE run to the next."""
    from lumos.analysis.uncertainty import fit_tables, monte_carlo, summarize

    fitted = fit_tables(base_tables)
    rng = np.random.default_rng(options.seed)
    rows = []
    for i in range(options.samples):
        o = target_plan(plan, tgt, options, compute_speed, routing_draw=rng)
        graph = simulate_plan(o, engine=options.engine)[0]
        model = fitted.model(graph, own=False, instances=o.pairs)
        rows.append(monte_carlo(graph, model, 1, options.seed + i,
                                measure=lambda s, e, g=graph: run_breakdown(g, s, e).iteration)[0])
    x = np.array(rows)
    # the base is one iteration, as uneven as any: each sample also carries another sample's deviation from the
    # median (the base's own draw), so that the interval is one for a new run, not for the runs' mean
    x = x + (x[rng.permutation(len(x))] - np.median(x, axis=0))
    doc = summarize(x, options.seed)
    doc["what"] = ("each sample a draw of every MoE layer's routing from the base's fitted unevenness and one of "
                   "the kernels' and collectives' spread, replayed, plus another sample's deviation (the base's "
                   "own draw)")
    return doc


def _peer_waits(plan: Plan, mode: str, engine: str):
    """The base's DP collectives split into transfer and peer wait (once per plan), or None (additive)."""
    if mode == "additive":
        return None
    if "peer_waits" not in plan.memo:
        _, sched, _ = simulate_plan(plan, engine=engine)
        plan.memo["peer_waits"] = read_peer_waits(plan, sched.start, sched.end)
    return plan.memo["peer_waits"]


def _reshared(ns: dict) -> str:
    """The NIC sharing note's words for the moved pipeline exchange (`Plan.reshared`), if any."""
    n = ns.get("reshared")
    return (f" or were moved by the rebuild ({n} of them the overlapped pipeline exchange's, their base sharing taken "
            "out: lumos.transform.p2p_overlap)") if n else ""


def median_notes(profiled_steps: dict, host: str, kernels: str) -> list[str]:
    """A note saying what is a median over profiled steps, and over whose, where other recordings lent any."""
    lent = sorted({s.split(":")[0] for h in profiled_steps.values() for s in h.steps if isinstance(s, str)})
    what = [w for w, mode in (("host work (CPU ops and the gaps between them)", host),
                              ("kernel durations (all but collectives)", kernels)) if mode == "median"]
    if not lent or not what:
        return []
    n = max(h.n_steps for h in profiled_steps.values())
    return [f"{' and '.join(what)}: the median over {n} profiled steps, the base's and those of {', '.join(lent)}"]


def add_actual(doc: dict, actual_tables: Sequence[TraceTable], step=None, emulated: bool = False) -> None:
    """Put the actual run's measured breakdown and the prediction's errors into `doc`."""
    measured = measure_run(actual_tables, step=step)
    predicted = doc["predicted"]
    doc["measured"] = round_metrics(measured)
    doc["error_pct"] = round(relative_error_pct(predicted["iteration_us"], measured["iteration_us"]), 4)
    comp = {k: relative_error_pct(predicted[k], measured[k]) for k in COMPONENTS}
    doc["component_error_pct"] = {k: None if v is None else round(v, 4) for k, v in comp.items()}
    doc["emulated_actual"] = emulated


def clock_setting(base_tables: Sequence[TraceTable], mode: str):
    """(mode, SustainedClock, GPU name, iterations before the profiled ones, profiled steps, base period ms)
    for the base's GPU, or None for no clock model.

    `recorded` and `steady` need the constants and the base's profiler schedule and say which is
    missing; `auto` falls back to None without them.
    """
    from lumos.durations.clocks import CLOCK_MODES, clock_for
    from lumos.durations.collectives import load_profile
    from lumos.trace import find_steps

    if mode not in CLOCK_MODES:
        raise ValueError(f"clocks must be one of {', '.join(CLOCK_MODES)}, got {mode!r}")
    if mode == "off":
        return None
    t = base_tables[0]
    gpu = t.gpu_name
    clock = clock_for(gpu, load_profile())
    cap = t.metadata.get("lumosCapture") or {}
    steps = find_steps(t)
    missing = ("config/predict/clusters/h100_roce.yaml has no sustained_clock for its GPU "
               f"({gpu or 'no deviceProperties name'})" if clock is None else
               "it does not say its profiler schedule (lumosCapture wait/warmup, written by `lumos capture`)"
               if not {"wait", "warmup"} <= set(cap) else "it has no ProfilerStep# ranges" if not steps else None)
    if missing:
        if mode == "auto":
            return None
        raise ValueError(f"{t.path}: --clocks {mode} needs the base's clock model, but {missing}")
    period_ms = sum(s.end - s.start for s in steps) / len(steps) / 1e3
    skipped = int(cap["wait"]) + int(cap["warmup"])
    mode = "recorded" if mode == "auto" else mode
    return mode, clock, gpu, skipped, len(steps), period_ms


def _under_clock(run, setting, compute_speed, first, max_rounds: int = 6):
    """Re-time compute kernels by the target's clock over the base's until the period settles: a slower
    clock lengthens the iteration, which can move more of the profiled window past the boost (the
    factor only grows with the period, so the rounds rise to a fixed point)."""
    mode, clock, gpu, skipped, steps, base_ms = setting
    base_level = clock.window(base_ms, skipped, steps)
    result, factor, rounds = first, 1.0, 0
    while rounds < max_rounds:
        period_ms = result[3].iteration.iteration_us / 1e3
        level = clock.window(period_ms, skipped, steps) if mode == "recorded" else 1.0 + clock.steady
        if abs(level / base_level - factor) < 1e-4:
            break
        factor, rounds = level / base_level, rounds + 1
        result = run((compute_speed or 1.0) / factor)
    out, graph, sched, bd = result
    what = (f"a recording made like the base's ({skipped} iterations before {steps} profiled, "
            f"{bd.iteration.iteration_us / 1e3:.1f} ms each)" if mode == "recorded" else "a long run")
    note = (f"sustained clocks ({gpu}, {mode}): compute kernels x{factor:.4f} the base's time, the clock of {what} "
            f"against the base's ({base_ms:.1f} ms iterations); --clocks off leaves them as measured")
    levels = []
    if mode == "recorded":   # each profiled step's own clock over the window's mean (the interval draws one)
        p = bd.iteration.iteration_us / 1e3
        mean = clock.window(p, skipped, steps)
        levels = [round(clock.mean((skipped + k) * p, (skipped + k + 1) * p) / mean, 6) for k in range(steps)]
    return out, graph, sched, bd, {"mode": mode, "gpu": gpu, "factor": round(factor, 5), "rounds": rounds,
                                   "base_period_ms": round(base_ms, 3), "constants": clock.as_dict(),
                                   "step_levels": levels, "note": note}


