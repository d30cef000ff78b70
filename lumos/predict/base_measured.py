"""The base's measured iteration beside its unchanged replay, said with every prediction.

Measured as for an actual run (`prediction.measure_run`, as `lumos replay --iteration gpu` measures
it): the run level, the longest GPU span over the base's stage ranks, a CPU-only trace's the span of
its CPU tasks; at the step the prediction's graph is built from, and at each of the base's own
profiled steps its medians (`--host`, `--kernels` median) are taken over. Replayed unchanged: the
prediction of the base's own layout from the same plan and options (its clock model, peer waits,
engine), which is the prediction itself where the target changes nothing; once per plan.
"""

from __future__ import annotations

from typing import Sequence

from lumos.trace import TraceTable
from lumos.trace.steps import select_step

__all__ = ["measured_base", "measured_host_base", "format_base"]

# what, of the target, keeps it the base's own layout (`predict`'s doc: target vs base_config)
_LAYOUT = ("tp", "pp", "vp", "dp", "cp", "layers", "hidden", "ffn", "kv_heads", "seq", "micro_batch", "dp_sharding",
           "ep", "experts", "top_k", "expert_ffn")


def _measured(tables: Sequence[TraceTable], step, own_steps: list, medians: list) -> dict:
    from .prediction import measure_run, round_metrics

    t = min(tables, key=lambda x: x.rank)
    chosen = select_step(t, step)
    m = measure_run(tables, step=step)
    out = {"step": chosen.number if chosen is not None else None, "critical_rank": int(m["critical_rank"]),
           **round_metrics(m)}
    if len(own_steps) > 1 and medians:
        out["medians_of"] = medians
        out["profiled_steps"] = {str(s): round(float(measure_run(tables, step=s)["iteration_us"]), 3)
                                 for s in own_steps}
    return out


def _own_steps(doc: dict) -> list:
    """The base's own profiled steps the prediction's medians are over (not other recordings')."""
    return sorted({s for steps in doc.get("host", {}).get("steps", {}).values() for s in steps
                   if isinstance(s, int)})


def _medians(doc: dict) -> list:
    """What of the replay is a median over the profiled steps (`--host`, `--kernels`; a host-DP doc: host only)."""
    host = doc.get("host", {})
    modes = (("host work", host.get("mode")), ("kernels", host.get("kernels")))
    return [what for what, mode in modes if mode == "median"]


def _unchanged(doc: dict, plan) -> bool:
    """Whether the prediction asked for the base as it ran (then its replay is the unchanged one)."""
    t, b, hw = doc["target"], doc["base_config"], doc.get("hardware", {})
    return (all(t.get(k) == b.get(k) for k in _LAYOUT) and doc["microbatches"] == b.get("microbatches")
            and list(t.get("stage_layers", plan.stage_layers)) == list(plan.stage_layers)
            and hw.get("compute_speed", 1.0) == 1.0 and hw.get("network_speed", 1.0) == 1.0)


def measured_base(tables: Sequence[TraceTable], plan, options, doc: dict) -> dict:
    """`doc["measured_base"]` of a `predict` document made from `plan` (of `tables`) with `options`."""
    stages = [t for t in tables if t.rank in plan.st.stage_of_rank] or list(tables)
    from .no_op import cpu_only

    medians = [m for m in _medians(doc) if not (m == "kernels" and cpu_only(plan))]   # a CPU-only base has none
    out = _measured(stages, options.step, _own_steps(doc), medians)
    if _unchanged(doc, plan):
        out["replayed_unchanged_us"] = doc["predicted"]["iteration_us"]
        return out
    key = ("replayed_unchanged", options.clocks, options.peer_waits, options.engine)
    if key not in plan.memo:
        from .prediction import predict

        plain = options.changed(global_batch=None, micro_batch=None, microbatch_rule="keep", compute_speed=None,
                                network_speed=None, fsdp_strategy=None, samples=0)
        plan.memo[key] = predict(tables, {}, plain, plan=plan)["predicted"]["iteration_us"]
    out["replayed_unchanged_us"] = plan.memo[key]
    return out


def measured_host_base(tables: Sequence[TraceTable], options, doc: dict, recordings=()) -> dict:
    """`doc["measured_base"]` of a prediction from a CPU base with host collectives (`dp_host`): its
    lowest rank's step graph replayed unchanged, as the prediction replays it changed."""
    from .dp_host import replay_unchanged

    out = _measured(list(tables), options.step, _own_steps(doc), _medians(doc))
    out["replayed_unchanged_us"] = replay_unchanged(tables, options, recordings)
    return out


def format_base(m: dict) -> str:
    """The table line of `measured_base`."""
    line = (f"  base: measured {m['iteration_us'] / 1e3:.3f} ms (step {m['step']}), replayed unchanged "
            f"{m['replayed_unchanged_us'] / 1e3:.3f} ms")
    steps = m.get("profiled_steps")
    if steps:
        line += (f"; its profiled steps {', '.join(steps)} measured "
                 f"{', '.join(f'{v / 1e3:.3f}' for v in steps.values())} ms (the replay's "
                 f"{' and '.join(m['medians_of'])}: medians over them)")
    return line
