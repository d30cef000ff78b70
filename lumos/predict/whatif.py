"""The base run as a plan, and the what-if changes applied to it: graph surgery only.

base traces -> run graph (one rank per stage, rendezvous) -> structure and
suppliers fitted on the base -> transforms (width, DP, layers/PP/micro-batches).
Replaying the result and scoring it is analysis (`lumos.predict.prediction`),
which sits above this layer.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Sequence

import numpy as np

from lumos.durations import CollectiveSpec, ComputeSpec, fit_alpha_beta, fit_compute
from lumos.durations.nccl_tests import read_nccl_tests
from lumos.durations.collectives import cluster_path, level_of, load_profile
from lumos.durations.contention import NO_CONTENTION, base_shares, fit_contention
from lumos.errors import UserError
from lumos.graph.model import TaskKind
from lumos.graph.run_graph import build_run_graph
from lumos.model.checkpointing import run_ac_period
from lumos.model.dp_flavour import find_dp_flavour, host_dp_degree
from lumos.model.host_gaps import host_gaps
from lumos.model.recover import recover_layers, summary
from lumos.durations.experts import fit_expert_cost
from lumos.durations.routing import fit_routing
from lumos.model.structure import StageMismatch, find_structure
from lumos.trace import TraceTable
from lumos.trace.run import read_manifest
from lumos.trace.table import devices
from lumos.transform.add_collectives import add_collectives, missing
from lumos.transform.cp import change_cp
from lumos.transform.cp_ring import pair_groups
from lumos.transform.dp import change_dp
from lumos.transform.dp_sharding import change_fsdp_strategy
from lumos.transform.micro_batch_size import change_micro_batch
from lumos.transform.moe import change_moe, exchange_offsets, expert_samples, moe_layer_parts, moe_now, moe_target
from lumos.transform.plan import Plan, comm_roles, cp_form, refuse_rebucketing
from lumos.transform.rebuild import rebuild
from lumos.transform.schedule import (ScheduleError, accounted_chunks, accounted_ends, layers_per_stage, split_layers,
                                     stage_split)
from lumos.transform.sequence import change_seq
from lumos.transform.speed import change_speed, compute_mask
from lumos.transform.tp import change_tp
from lumos.transform.width import change_width

from .memory_calibration import calibrate, measured_peak
from .micro_batch_count import target_micro_batches
from .options import STEP_MODES, PredictOptions

__all__ = ["STEP_MODES", "base_plan", "check_steps", "transform", "memory_of", "structure_report",
           "data_parallel_report"]


def refuse_stage_granularity(path) -> None:
    """An emulated base whose stages ran their layers as one block per micro-batch (`lumos emulate`'s
    `emulator.granularity=stage`, which `auto` picks above 60,000 layer passes) has no layer to read the
    model's shape from or to copy: refused with the way out."""
    if read_manifest(path).get("granularity") == "stage":
        raise ValueError(f"{path}: emulated at emulator.granularity=stage (each stage's layers one block per "
                         "micro-batch): no layer range to read the model's shape from or to rebuild the run with; "
                         "emulate the base with emulator.granularity=fine or coarse (or fewer micro-batches, "
                         "below auto's 60,000 layer passes)")


def base_plan(tables: Sequence[TraceTable], options: PredictOptions = PredictOptions(), *,
              profile: dict | None = None, recordings: Sequence[Sequence[TraceTable]] = ()) -> Plan:
    """The base run as a plan: run graph with rendezvous, structure, suppliers fitted on it, as
    `options` says (its PLAN_FIELDS: step, gemm_efficiency, host, kernels, contention; `options.py`).
    `recordings`: other recordings of the base's configuration, whose profiled steps join the medians
    (and, for host work, the interval's draw). `profile`: the cluster profile (default: the config's)."""
    step, host, kernels = options.step, options.host, options.kernels
    check_steps(tables, host, kernels, recordings)
    refuse_stage_granularity(tables[0].path)
    graph = build_run_graph(tables, step=step, host_medians=host == "median", kernel_medians=kernels == "median",
                            recordings=recordings)
    profile = profile or load_profile(cluster_path(options.cluster))
    found, how = recover_layers(list(tables), step)   # ranges appended: the graph's rows stay valid
    if all(h.source == "none" for h in how):
        raise ValueError(f"{tables[0].path}: {how[0].note}. The what-if transforms rebuild a run from its "
                         "transformer layers; this trace has none (`lumos replay --structure` says what was found)")
    flavours = dp_flavours(tables, step)
    refuse_unmodelled_dp(tables, flavours, on_device=bool(np.any(graph.comm)))
    st = find_structure(graph, found, dp_hint=_dp_hint(graph, tables, flavours))
    st.recovery = [h.as_dict() for h in how]
    role = comm_roles(st)
    if cp_form(st, role) == "ring":   # each exchange timed on the pair it runs between, not the CP group it names
        pair_groups(SimpleNamespace(graph=graph, st=st, role=role))
    slowdown = alone_under_comm(graph, st, found) if options.contention == "fit" else NO_CONTENTION
    samples = [(CollectiveSpec(st.coll[t], st.nbytes[t], st.group[t]), graph.dur[t])
               for t in np.flatnonzero(st.coll != None) if st.group[t]]  # noqa: E711
    coll_model = fit_alpha_beta(samples, profile, reference=_cluster_measured(options, profile))
    host_ops = not np.any(graph.kind == TaskKind.GPU)    # a CPU capture: its ops (and gaps inside them) compute
    kind = TaskKind.CPU if host_ops else TaskKind.GPU
    work = np.flatnonzero((graph.kind == kind) & ~graph.comm & (st.op_dims != None))  # noqa: E711
    samples = [(ComputeSpec(str(st.op_name[t]), st.op_dims[t]), graph.dur[t]) for t in work]
    gaps = host_gaps(graph, tables) if host_ops else None
    if gaps is not None:
        samples += [(ComputeSpec(n, d), graph.lag[e]) for e, n, d in zip(gaps.edge.tolist(), gaps.op_name, gaps.op_dims)]
    comp = fit_compute(samples, sms=trace_sms(tables, profile) if options.gemm_efficiency == "waves" and not host_ops
                       else 0, host_ops=host_ops)
    ranks = sorted(st.stage_of_rank)
    sharding = base_sharding(flavours)
    measured = measured_peak(tables, st.stage_of_rank, st.shape, stage_split(st.pp, st.layers, st.stage_layers),
                             st.pp, st.dp, st.microbatches, step=step,
                             sharding=SHARDED_MEMORY.get(sharding), chunks=st.chunks)
    plan = Plan(graph=graph, st=st, role=role, shape=st.shape, tp=st.tp, pp=st.pp, dp=st.dp,
                layers=st.layers, microbatches=st.microbatches, ranks=ranks,
                collectives=coll_model, compute=comp, base_shape=st.shape, measured_memory=measured,
                profiled_steps=graph.summary.get("profiled_steps", {}), host_draw=host == "median", sharding=sharding,
                base_crossing=crossing_kinds(st, role, coll_model.gpus_per_host), contention=slowdown,
                profile=profile, host_gaps=gaps, chunks=st.chunks, stage_layers=st.stage_layers,
                chunk_layers=st.chunk_layers, cp=st.cp, cp_form=cp_form(st, role), ep=st.moe.ep if st.moe is not None else 1,
                routing=_routing(st))
    if st.moe is not None:   # the experts' cost against their rows, fitted on the base's own MoE layers
        plan.moe_parts = moe_layer_parts(plan)
        plan.expert_cost = fit_expert_cost(expert_samples(plan), st.moe.experts_local, comp.fixed_us.get("gemm", 0.0))
        plan.exchange_offsets = exchange_offsets(plan)
    return plan


def _routing(st):
    """The base's routing unevenness (an MoE base's), or None."""
    m = st.moe
    return None if m is None else fit_routing(m.received, m.tokens, m.top_k, m.experts, m.ep)


def alone_under_comm(graph, st, tables: Sequence[TraceTable]):
    """The slowdown the base's compute kernels show under communication (`durations/contention.py`),
    with each kernel's duration set, in place, to its time alone: the suppliers fitted next and every
    transform see durations free of the base's overlap, and the replay puts back the target's."""
    tasks = np.flatnonzero(compute_mask(graph, st) & (graph.event >= 0))
    dur, share = base_shares(graph, tables, tasks)
    keys = np.array([f"{graph.name[t]}|{st.op_dims[t]}" for t in tasks.tolist()], dtype=object)
    fitted = fit_contention(keys, dur, share)
    if fitted.active:
        graph.dur[tasks] = fitted.alone(graph.dur[tasks], share)
    return fitted


def crossing_kinds(st, role: np.ndarray, gpus_per_host: int) -> frozenset:
    """(role, kind) of the base's collectives whose process group spans hosts."""
    return frozenset((role[t], st.coll[t]) for t in np.flatnonzero(st.coll != None).tolist()  # noqa: E711
                     if st.group[t] and level_of(st.group[t], gpus_per_host) == "inter_host")


def check_steps(tables: Sequence[TraceTable], host: str, kernels: str = "median",
                recordings: Sequence[Sequence[TraceTable]] = ()) -> None:
    """A clear error for a step mode the predictions do not know, or other recordings that cannot
    lend the base anything (`lumos.graph.profiled_steps` pools them into medians)."""
    for what, mode in (("host", host), ("kernels", kernels)):
        if mode not in STEP_MODES:
            raise ValueError(f"{what} must be one of {', '.join(STEP_MODES)}, got {mode!r}")
    if recordings and host != "median" and kernels != "median":
        raise ValueError("other recordings (--other-recordings) are pooled into medians: they need --host median "
                         "or --kernels median, not both 'step'")
    base_ranks = {t.rank for t in tables}
    for run in recordings:
        if run and not base_ranks & {t.rank for t in run}:
            raise ValueError(f"{run[0].path}: a recording with none of the base's ranks "
                             f"({', '.join(map(str, sorted(base_ranks)))}) cannot lend it host work or kernels")


def trace_sms(tables: Sequence[TraceTable], profile: dict) -> int:
    """The GPU's streaming multiprocessors: the trace's own `deviceProperties` (Kineto writes them,
    so do our emulator and capture), else the profile's `num_sms` (0: unknown)."""
    for t in tables:
        for dev in devices(t.metadata):
            if isinstance(dev.get("numSms"), int) and dev["numSms"] > 0:
                return int(dev["numSms"])
    return int(profile.get("num_sms", 0))


def transform(plan: Plan, tp: int | None = None, pp: int | None = None, dp: int | None = None,
              layers: int | None = None, hidden: int | None = None, ffn: int | None = None,
              kv_heads: int | None = None, seq: int | None = None, vp: int | None = None, cp: int | None = None,
              first_stage_layers: int | None = None, last_stage_layers: int | None = None,
              global_batch: int | None = None, micro_batch: int | None = None,
              compute_speed: float | None = None, network_speed: float | None = None,
              microbatch_rule: str = "auto", fsdp_strategy: str | None = None, ep: int | None = None,
              experts: int | None = None, top_k: int | None = None, expert_ffn: int | None = None,
              capacity_factor: float | None = None, pad_to_capacity: bool = False, routing_draw=None) -> Plan:
    """Apply the what-if changes in a fixed order: hardware speed, width, TP, micro-batch size, DP,
    FSDP strategy, then one pipeline rebuild. Collectives the target needs and the base has none of (a
    one-GPU base's TP all-reduces, gradient buckets, pipeline sends) are added after the width change
    (`lumos.transform.add_collectives`), timed by the base's cluster profile. Micro-batches per iteration: `global_batch`, else
    `microbatch_rule` (`micro_batch_count.py`: auto = the paper's TP x PP when the base follows it, else
    the base's). `fsdp_strategy` (full_shard, shard_grad_op; `lumos/transform/dp_sharding.py`) from an
    FSDP base."""
    for name, v in (("tp", tp), ("pp", pp), ("dp", dp), ("layers", layers), ("hidden", hidden), ("ffn", ffn),
                    ("kv_heads", kv_heads), ("seq", seq), ("vp", vp), ("cp", cp),
                    ("first_stage_layers", first_stage_layers), ("last_stage_layers", last_stage_layers),
                    ("global_batch", global_batch), ("micro_batch", micro_batch), ("ep", ep), ("experts", experts),
                    ("top_k", top_k), ("expert_ffn", expert_ffn)):
        if v is not None and (not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1):
            raise ValueError(f"{name} must be a positive integer or None (the base's), got {v!r}")
    refuse_moe_rebuild(plan, tp, pp, layers, hidden, ffn, kv_heads, seq, vp, cp, micro_batch, first_stage_layers,
                       last_stage_layers)
    refuse_non_gpt(plan, tp or plan.tp, hidden, ffn)
    refuse_kv_change(plan, kv_heads)
    tp = tp or plan.tp
    pp = pp or plan.pp
    cp = cp or plan.cp
    dp_only = dp or plan.dp // plan.cp   # the data-parallel degree asked; the plan's DP counts the CP ranks too
    dp = dp_only * cp
    _refuse_empty_stages(pp, layers or plan.layers, pp != plan.pp)
    split = None
    if first_stage_layers is not None or last_stage_layers is not None:   # Megatron's uneven end stages
        try:
            split = split_layers(layers or plan.layers, pp, first_stage_layers, last_stage_layers)
        except ScheduleError as exc:
            raise UserError(f"--first-stage-layers / --last-stage-layers: {exc}") from None
    chunks = vp or (plan.chunks if pp > 1 else 1)   # a pipeline folded to one stage has no chunks to interleave
    out = change_speed(plan, compute_speed, network_speed)
    out = change_width(out, hidden, ffn, kv_heads)
    added = missing(out, tp, pp, dp, cp)
    out = add_collectives(out, added, tp, pp, dp, out.profile or load_profile())
    out = change_tp(out, tp)
    out = change_micro_batch(out, micro_batch)
    out = change_seq(out, seq)
    out = change_cp(out, cp, dp)
    # checked before any change, against the target's DP
    moe = moe_target(out, ep, experts, top_k, expert_ffn, capacity_factor, pad_to_capacity, dp=dp_only)
    out = change_dp(out, dp)
    out = change_moe(out, moe, routing_draw)
    strategy = change_fsdp_strategy(out, fsdp_strategy)
    restrategy = strategy is not out
    out = strategy
    m, note = target_micro_batches(plan.microbatches, plan.tp, plan.pp, tp=tp, pp=pp, dp=dp_only,
                                  micro_batch=out.shape.micro_batch, global_batch=global_batch,
                                  rule=microbatch_rule)
    if plan.st.moe is not None and m != plan.microbatches:
        raise UserError(f"{m} micro-batches per iteration (the base ran {plan.microbatches}): the base's layers are "
                        "mixture-of-experts, whose layers a rebuild would not carry; keep the base's count "
                        "(--microbatch-rule keep, or a --global-batch that gives it)")
    if out is plan:  # nothing so far copied the base: its notes must not collect this target's
        out = dataclasses.replace(plan, notes=list(plan.notes))
    out.notes.append(note)
    layers = layers or plan.layers
    changed_width = (out.shape.hidden != plan.shape.hidden or out.shape.ffn != plan.shape.ffn
                     or out.shape.kv != plan.shape.kv or out.shape.seq != plan.shape.seq)
    if (pp != plan.pp or layers != plan.layers or m != plan.microbatches or changed_width or tp != plan.tp
            or restrategy or out.inserted or chunks != plan.chunks    # an added collective is a template: only
            or (split is not None and list(split) != list(plan.stage_layers))):   # a rebuild places it
        refuse_rebucketing(plan, "a PP, layer-count or micro-batch-count change" if chunks == plan.chunks
                           else "a pipeline schedule change")
        if plan.st.moe is not None:   # every MoE change re-times in place; a rebuild would drop the expert groups
            raise UserError("this target would rebuild the base's layers, which are mixture-of-experts: their expert "
                            "groups are not carried by the rebuild's templates (docs/prediction.md, "
                            "'Mixture-of-experts')")
        try:
            sizes = _end_chunks(plan, pp, layers, chunks) if split is None else None
            out = rebuild(out, pp=pp, layers=layers, microbatches=m, chunks=chunks, split=split, sizes=sizes)
        except ScheduleError as exc:
            asked = f"--vp {chunks}" if vp else f"the base's {chunks} model chunks per stage (--vp 1: 1F1B)"
            raise UserError(f"{asked} at pp {pp}, {layers} layers, {m} micro-batches: {exc}") from None
        if chunks != plan.chunks:
            out.notes.append(f"pipeline schedule: {_schedule_name(plan.chunks)} -> {_schedule_name(chunks)} "
                             "(lumos/transform/schedule.py)")
        if split is not None:
            out.notes.append("layers per stage " + "/".join(map(str, split)) + " (--first-stage-layers / "
                             "--last-stage-layers)")
        elif sizes is not None:
            out.notes.append("chunks as the base lays them out, its embedding and loss each in a layer's place (Megatron's "
                             "account_for_embedding/loss_in_pipeline_split): layers per chunk "
                             + " | ".join("/".join(map(str, c)) for c in sizes))
        elif layers % pp and (pp != plan.pp or layers != plan.layers):
            out.notes.append(f"layers split unevenly over {pp} stages: "
                             + "/".join(map(str, layers_per_stage(pp, layers))))
    return out


def _end_chunks(plan: Plan, pp: int, layers: int, chunks: int):
    """Per stage the layers of each chunk where the base's first and last chunks hold a layer fewer (the embedding
    and the loss in the split, Llama 3's layout) and the target changes its pipeline: the same rule at the
    target's stages and chunks (`schedule.accounted_chunks`); None where the base is not laid out so or keeps its
    own pipeline."""
    ends = accounted_ends(plan.chunk_layers) if plan.chunk_layers else None
    if ends is None or (pp == plan.pp and layers == plan.layers and chunks == plan.chunks) or pp < 2:
        return None
    return accounted_chunks(layers, pp, chunks, *ends)


def refuse_moe_rebuild(plan: Plan, tp, pp, layers, hidden, ffn, kv_heads, seq, vp, cp, micro_batch, first, last) -> None:
    """An MoE base takes DP, MoE (`--ep`, `--experts`, `--top-k`, `--expert-ffn`) and hardware-speed changes; the
    rest would rebuild its layers from templates, which do not carry an MoE layer's expert groups yet."""
    sh = plan.shape
    same = ((tp, plan.tp), (pp, plan.pp), (layers, plan.layers), (hidden, sh.hidden), (ffn, sh.ffn),
            (kv_heads, sh.kv), (seq, sh.seq), (vp, plan.chunks), (cp, plan.cp), (micro_batch, sh.micro_batch))
    if plan.st.moe is not None and (any(v is not None and v != b for v, b in same) or first or last):
        raise UserError("the base's layers are mixture-of-experts: Lumos predicts DP, --ep, --experts, --top-k, "
                        "--expert-ffn and hardware-speed changes from it; TP, PP, layer, width, sequence and "
                        "micro-batch changes rebuild layers whose expert groups the templates do not carry yet")


def _schedule_name(chunks: int) -> str:
    return "1F1B" if chunks == 1 else f"interleaved 1F1B with {chunks} chunks per stage"


NON_GPT_WHY = ("the query heads do not span the hidden size (heads x head dim != hidden), which the width and TP "
               "rewrites assume")


def refuse_non_gpt(plan: Plan, tp: int, hidden: int | None, ffn: int | None) -> None:
    """A width or TP change of a base whose query heads do not span its hidden size (heads x head dim !=
    hidden, as Gemma's): refused with the reason. GPT and Llama-style layers (grouped-query attention,
    SwiGLU) take every change."""
    sh = plan.shape
    if sh.heads_span_hidden:
        return
    for flag, asked, base in (("--tp", tp, plan.tp), ("--hidden", hidden, sh.hidden), ("--ffn", ffn, sh.ffn)):
        if asked is not None and asked != base:
            raise UserError(f"{flag} {asked}: the base has {sh.heads} heads of {sh.dhead} for hidden {sh.hidden}; "
                            f"{NON_GPT_WHY}")


def refuse_kv_change(plan: Plan, kv_heads: int | None) -> None:
    """--kv-heads on a base whose attention is not read as multi-head or grouped-query: nothing to change."""
    if kv_heads is None or kv_heads == plan.shape.kv:
        return
    if not plan.shape.heads_span_hidden:
        raise UserError(f"--kv-heads {kv_heads}: {NON_GPT_WHY}")


def _refuse_empty_stages(pp: int, layers: int, pp_asked: bool) -> None:
    """A pipeline of more stages than layers would replay stages that hold no layer."""
    if pp <= layers:
        return
    if pp_asked:
        raise UserError(f"--pp {pp} is more pipeline stages than the model's {layers} layers: --pp must be at most "
                        f"{layers} (each stage holds at least one layer)")
    raise UserError(f"--layers {layers} is fewer layers than the {pp} pipeline stages: --layers must be at least "
                    f"{pp} (each stage holds at least one layer)")


def memory_settings(plan: Plan, overrides: dict | None = None):
    """Memory-model settings for predictions from `plan`'s base: the cluster profile's, `overrides`
    applied, the workspace constant calibrated from the base's GPU `[memory]` events where its trace
    has them and `overrides` sets no `workspace_gib` (`memory_calibration.py`)."""
    from .memory import MemorySettings

    overrides = dict(overrides or {})
    if plan.sharding and overrides.get("sharding") is None:   # the base's own sharding, unless told otherwise
        overrides["sharding"] = SHARDED_MEMORY[plan.sharding]
    _base_checkpointing(plan, overrides)
    settings = MemorySettings.from_profile(plan.profile or load_profile(), **overrides)
    if plan.measured_memory is not None and overrides.get("workspace_gib") is None:
        settings = calibrate(settings, plan.measured_memory)
    return settings


def _base_checkpointing(plan: Plan, overrides: dict) -> None:
    """The base's per-layer selective AC where its recompute ranges show one (`checkpointing.run_ac_period`: every
    N-th block of each stage, N > 1) and no recompute is given: `selective_layer` with the base's N; an
    `ac_every` given alone means it; one given with another recompute is refused by `MemorySettings`."""
    given = overrides.get("recompute")
    if given not in (None, "selective_layer"):
        return
    n = run_ac_period(plan.st)
    if given is None and overrides.get("ac_every") is None and not (n and n > 1):
        return
    overrides["recompute"] = "selective_layer"
    if overrides.get("ac_every") is None:
        if not n:
            raise ValueError("--recompute selective_layer needs --ac-every N: the base's recompute ranges show no "
                             "every-N-th block")
        overrides["ac_every"] = n


def memory_of(plan: Plan, overrides: dict | None = None) -> dict:
    """Peak memory per GPU of a plan's configuration (`memory.py`), settings from `memory_settings`."""
    return layout_memory(moe_shape(plan), plan.pp, plan.dp, plan.layers, plan.microbatches,
                         memory_settings(plan, overrides), chunks=plan.chunks, split=plan.stage_layers or None)


def moe_shape(plan: Plan, ep: int | None = None, dp: int | None = None):
    """The plan's shape with its MoE layout for the memory model (`ModelShape.moe_*`): the target's experts,
    top-k and width (`change_moe`), `ep` and `dp` where given (a search's candidate), else the plan's."""
    m = plan.st.moe
    if m is None:
        return plan.shape
    ep, dp = ep or plan.ep, dp or plan.dp // plan.cp
    experts, top_k, ffn = moe_now(plan)
    return dataclasses.replace(plan.shape, ffn=ffn, moe_experts=experts, moe_local=experts // ep, moe_top_k=top_k,
                               moe_shared_ffn=m.shared_expert_ffn, moe_edp=max(plan.tp * dp // ep, 1))


def layout_memory(shape, pp: int, dp: int, layers: int, microbatches: int, settings, chunks: int = 1,
                  split=None) -> dict:
    """Peak memory per GPU of `shape` (its TP and micro-batch size) laid out over `pp` stages and
    `dp` replicas (`memory.plan_memory`), without building the layout's graph; `chunks` model chunks
    per stage, `split` the layers of each stage (default: as even as they go)."""
    from .memory import plan_memory

    return plan_memory(shape, stage_split(pp, layers, split or ()), pp, dp, microbatches, settings, chunks=chunks)


def dp_flavours(tables: Sequence[TraceTable], step=None) -> dict:
    """rank -> the DP flavour of its iteration (`dp_flavour.find_dp_flavour`), read once per base."""
    return {t.rank: find_dp_flavour(t, step) for t in tables}


def _cluster_measured(options: PredictOptions, profile: dict):
    """The alpha-beta model of the target cluster's nccl-tests logs (`options.nccl_tests`), or None."""
    if not options.nccl_tests:
        return None
    gph = int(profile.get("gpus_per_host", 8))
    samples, _said = read_nccl_tests(options.nccl_tests, gph)
    return fit_alpha_beta(samples, profile, sweep=True)


def _dp_hint(graph, tables: Sequence[TraceTable], flavours: dict) -> int:
    """The DP degree for `find_structure` to take when no gradient all-reduce says one: the group of
    a sharded run's all-gathers and reduce-scatters, or of a CPU run's host collectives."""
    if any(f.sharded for f in flavours.values()) or not np.any(graph.comm):
        return host_dp_degree(tables, flavours=flavours)
    return 1


# sharded flavours whose DP change the transforms make (`dp.change_dp`), and the memory model's stage
# for each: FULL_SHARD shards parameters, gradients and optimizer state (ZeRO-3); SHARD_GRAD_OP keeps
# whole parameters from forward to backward (ZeRO-2's peak); a sharded optimizer alone cannot tell its
# gradients' sharding from the trace, so ZeRO-1 (the larger) is taken
SHARDED_MEMORY = {"fsdp_full": "zero3", "zero3": "zero3", "fsdp_grad_op": "zero2", "zero12": "zero1"}


def base_sharding(flavours: dict) -> str:
    """The base's sharded DP flavour (a key of SHARDED_MEMORY), '' for all-reduce DP or none."""
    kinds = {f.kind for f in flavours.values() if f.sharded}
    return next(iter(kinds)) if len(kinds) == 1 and kinds <= set(SHARDED_MEMORY) else ""


def refuse_unmodelled_dp(tables: Sequence[TraceTable], flavours: dict, on_device: bool) -> None:
    """A clear error rather than an answer for a different program: the transforms re-time device
    collectives, all-reduce DP and the sharded flavours of SHARDED_MEMORY (FSDP / ZeRO); a base whose
    collectives are host ops (gloo on CPU), HSDP or FSDP over a group of one (no collective to resize)
    is not re-timed by them."""
    for t in tables:
        f = flavours[t.rank]
        if not on_device and f.collectives:
            c = f.collectives[0]
            one = f.ddp and int((t.metadata.get("distributedInfo") or {}).get("world_size") or 1) == 1
            hint = (". From a one-rank DDP capture on CPU, --dp N alone is predicted, with --dp-calibration "
                    "RUN_AT_N RUN_AT_ONE (docs/prediction.md, \"From a one-rank CPU capture\")" if one else "")
            raise ValueError(f"{t.path}: the base's collectives are host ops ({len(f.collectives)} in the "
                             f"iteration, e.g. {t.name[c.row]}) and no device collective: the transforms "
                             "re-time device collectives only, so a prediction would leave them unmodelled" + hint)
        if f.sharded and f.kind not in SHARDED_MEMORY:
            hint = (". From a one-rank FSDP2 capture on CPU, --dp N alone is predicted, with --dp-calibration "
                    "RUN_AT_N RUN_AT_ONE (docs/prediction.md, \"From a one-rank CPU capture\")"
                    if f.kind == "fsdp" and not on_device else "")
            raise ValueError(f"{t.path}: the base trains with {f.label}; {f.reason}. The what-if transforms "
                             "model all-reduce DP, FSDP / ZeRO-3, SHARD_GRAD_OP and sharded optimizers with "
                             "their collectives in the trace; a prediction from this base would answer for a "
                             "different program, so none is made (`lumos replay --structure` shows what was "
                             "found)" + hint)
    kinds = {f.kind for f in flavours.values()}
    if len(kinds) > 1 and kinds & set(SHARDED_MEMORY):
        raise ValueError(f"{tables[0].path}: the base's ranks train with different DP flavours "
                         f"({', '.join(sorted(kinds))}): no one DP change fits them all")


def data_parallel_report(found: dict) -> dict:
    """The DP flavour of the run (rank -> flavour, `dp_flavours`): one entry when every rank agrees,
    else per rank."""
    kinds = {f.kind for f in found.values()}
    first = found[min(found)]
    if len(kinds) == 1:
        return {**first.as_dict(), "ranks": sorted(found)}
    return {"kind": "mixed", "label": "ranks differ", "reason": "; ".join(
        f"rank {r}: {f.label}" for r, f in sorted(found.items())),
        "per_rank": {str(r): f.as_dict() for r, f in sorted(found.items())}}


def structure_report(tables: Sequence[TraceTable], step=None) -> dict:
    """What the transforms would work on in this run: where its layers came from (ranges in the
    trace, repetition, or none), layers, micro-batches, parallelism and blocks by kind."""
    graph = build_run_graph(tables, step=step)
    found, how = recover_layers(list(tables), step)
    out = summary([h.as_dict() for h in how])
    flavours = dp_flavours(tables, step)
    out["data_parallel"] = data_parallel_report(flavours)
    if out["source"] == "none":
        out["what_if"] = "none: the what-if transforms need transformer layers"
        return out
    try:
        st = find_structure(graph, found, dp_hint=_dp_hint(graph, tables, flavours))
    except StageMismatch as exc:   # e.g. one rank of a pipeline, or a DP run's every rank: what was read is shown
        out["error"] = str(exc)
        out["shape"] = shape_report(exc.shape)
        if exc.moe is not None or exc.moe_error:
            out["moe"] = moe_report(exc.moe, exc.moe_error)
        return out
    except ValueError as exc:
        out["error"] = str(exc)
        return out
    kinds: dict[str, int] = {}
    for b in st.blocks:
        kinds[b.kind] = kinds.get(b.kind, 0) + 1
    out.update(layers=st.layers, microbatches=st.microbatches, tp=st.tp, pp=st.pp, dp=st.dp // st.cp, cp=st.cp,
               chunks=st.chunks, stage_layers=list(st.stage_layers), blocks=kinds,
               what_if=MOE_WHY if st.moe is not None else "every transform" if st.shape.heads_span_hidden else
               f"every transform but width and TP ({NON_GPT_WHY})", shape=shape_report(st.shape))
    if st.moe is not None or st.moe_error:
        out["moe"] = moe_report(st.moe, st.moe_error)
    return out


MOE_WHY = ("DP, --ep, --experts, --top-k, --expert-ffn, --capacity-factor and hardware speed (lumos/transform/moe.py); "
           "TP, PP, layers, width, sequence and micro-batch changes are refused on MoE layers")


def moe_report(moe, error: str = "") -> dict:
    """An MoE run's experts, top-k, EP, expert width and tokens per expert, with their evidence; or the one
    line that says which of its readings disagree."""
    if moe is None:
        return {"error": error}
    out = {"experts": moe.experts, "experts_per_rank": moe.experts_local, "top_k": moe.top_k, "ep": moe.ep,
           "expert_ffn": moe.expert_ffn, "shared_expert_ffn": moe.shared_expert_ffn, "tokens": moe.tokens,
           "tokens_per_expert": [{"layer": layer, "microbatch": mb, "tokens": list(c)}
                                 for (layer, mb), c in sorted(moe.tokens_per_expert.items())],
           "evidence": dict(moe.evidence)}
    if moe.disagreement:
        out["disagreement"] = moe.disagreement
    return out


def shape_report(shape) -> dict:
    """The model shape the transforms work on, and what each number was read from."""
    heads = shape.heads
    return {"hidden": shape.hidden, "ffn": shape.ffn, "heads": heads, "kv_heads": shape.kv_heads or heads,
            "head_dim": shape.head_dim or shape.hidden // max(heads, 1), "mlp": "swiglu" if shape.gated else "gelu",
            "norm": shape.norm or "none seen", "vocab": shape.vocab, "seq": shape.seq,
            "micro_batch": shape.micro_batch, "tp": shape.tp, "evidence": dict(shape.evidence)}
