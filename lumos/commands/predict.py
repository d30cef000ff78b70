"""`lumos predict BASE --tp T --pp P --dp D [...]`: predict a configuration from a base run."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from lumos import collector
from lumos.analysis import COMPONENTS
from lumos.errors import UserError
from lumos.transform.cp import refuse_cp_form
from lumos.transform.dp_sharding import STRATEGIES
from lumos.predict.micro_batch_count import MICROBATCH_RULES

from .flags import (ENGINE_HELP, FORMAT_HELP, non_negative_float, non_negative_int, output_file, output_path,
                    positive_float, positive_int)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("predict", help="predict a new configuration from a base trace (what-if)",
                       description=__doc__)
    p.add_argument("base", help="directory of the base run (one trace per pipeline stage)")
    p.add_argument("--tp", type=positive_int, default=None,
                   help="tensor-parallel degree (re-shards GEMMs, heads and TP collectives: lumos/transform/tp.py)")
    p.add_argument("--pp", type=positive_int, default=None, help="pipeline-parallel degree")
    p.add_argument("--dp", type=positive_int, default=None, help="data-parallel degree")
    p.add_argument("--layers", type=positive_int, default=None, help="number of transformer layers")
    p.add_argument("--hidden", type=positive_int, default=None, help="hidden size")
    p.add_argument("--ffn", type=positive_int, default=None, help="FFN hidden size")
    p.add_argument("--seq", type=positive_int, default=None, help="sequence length (tokens per sequence)")
    p.add_argument("--kv-heads", type=positive_int, default=None,
                   help="key/value heads of grouped-query attention (must divide the query heads)")
    p.add_argument("--cp", type=positive_int, default=None,
                   help="context-parallel ranks per sequence (from a base that ran with context parallelism)")
    p.add_argument("--cp-form", choices=("allgather", "ring"), default=None,
                   help="the target's form of context parallelism: the base's own (Llama 3's all-gather, or the "
                        "p2p ring); the other form is refused (lumos/transform/cp.py)")
    p.add_argument("--ep", type=positive_int, default=None,
                   help="expert-parallel ranks of an MoE base's layers (divides the experts and TP x DP; "
                        "lumos/transform/moe.py)")
    p.add_argument("--experts", type=positive_int, default=None, help="routed experts per MoE layer")
    p.add_argument("--top-k", type=positive_int, default=None, help="experts each token is routed to")
    p.add_argument("--expert-ffn", type=positive_int, default=None, help="each routed expert's FFN width")
    p.add_argument("--capacity-factor", type=positive_float, default=None,
                   help="each expert takes at most this factor x its fair share of a rank's tokens, the rest dropped "
                        "(Megatron's --moe-expert-capacity-factor; the base is taken as dropless)")
    p.add_argument("--pad-to-capacity", action="store_true",
                   help="with --capacity-factor: every expert's input padded to its capacity")
    p.add_argument("--first-stage-layers", type=positive_int, default=None,
                   help="layers of the first pipeline stage (Megatron's num_layers_in_first_pipeline_stage); the rest "
                        "split evenly over the others")
    p.add_argument("--last-stage-layers", type=positive_int, default=None,
                   help="layers of the last pipeline stage (num_layers_in_last_pipeline_stage)")
    p.add_argument("--vp", type=positive_int, default=None,
                   help="model chunks per pipeline stage: 1 is 1F1B, more is Megatron's interleaved 1F1B "
                        "(must divide each stage's layers; micro-batches a multiple of PP)")
    p.add_argument("--global-batch", type=positive_int, default=None,
                   help="global batch (sequences): micro-batches per iteration = B / (dp x micro-batch); "
                        "default: --microbatch-rule")
    p.add_argument("--micro-batch", type=positive_int, default=None,
                   help="micro-batch size (sequences); with --global-batch it also sets the micro-batch count")
    p.add_argument("--microbatch-rule", choices=MICROBATCH_RULES, default="auto",
                   help="micro-batches per iteration without --global-batch: tp_x_pp (the paper's protocol, "
                        "TP x PP of the target), keep (the base's count), auto (default: tp_x_pp when the "
                        "base's count is its TP x PP, else keep)")
    p.add_argument("--compute-speed", type=positive_float, default=None,
                   help="compute kernels X times faster (0.5 = half as fast)")
    p.add_argument("--network-speed", type=positive_float, default=None,
                   help="collective bandwidth (NVLink and network) Y times higher")
    add_cluster_flag(p)
    p.add_argument("--gemm-efficiency", choices=("waves", "flops"), default="waves",
                   help="how a re-shaped GEMM is re-timed: waves (default: waves x k, wave quantization over "
                        "the GPU's SMs where the kernel names its tile) or flops (the FLOP ratio alone)")
    p.add_argument("--clocks", choices=("auto", "recorded", "steady", "off"), default="auto",
                   help="sustained GPU clocks (lumos/durations/clocks.py): recorded (compute kernels at the "
                        "clock a recording of the target made like the base's would show), steady (a long run), off "
                        "(as measured); auto (default): recorded where config/predict/clusters/h100_roce.yaml has the base's GPU "
                        "and the base says its profiler schedule, else off")
    p.add_argument("--host", choices=("median", "step"), default="median",
                   help="the base's host work (CPU ops and the Python between them): median (default: each op "
                        "and gap the median over the base's profiled steps; --samples draws one step's at a "
                        "time) or step (the selected step's own); lumos/graph/profiled_steps.py")
    p.add_argument("--kernels", choices=("median", "step"), default="median",
                   help="the base's kernel durations (all but collectives), before the GEMM and other suppliers "
                        "are fitted on them: median (default: each kernel the median over the base's profiled "
                        "steps) or step (the selected step's own)")
    p.add_argument("--peer-waits", choices=("auto", "additive", "anchored"), default="auto",
                   help="what the base's data-parallel collectives waited for their peers: additive (kept as "
                        "kernel time, the model's change added), anchored (replayed as the peers' arrival after "
                        "the kernel that released each bucket, the transfer re-timed; for a change of DP or "
                        "speed alone) or auto (default: anchored for a sharded base where the target keeps its "
                        "tasks, else additive); lumos/predict/peer_waits.py")
    p.add_argument("--contention", choices=("fit", "off"), default="fit",
                   help="compute kernels slowed by the communication kernels beside them: fit (default: the "
                        "slowdown the base's own kernels show under communication, taken out of their durations "
                        "and put back by the target's overlap in the replay; nothing where the base shows none) "
                        "or off (the base's durations as measured); lumos/durations/contention.py")
    p.add_argument("--other-recordings", "--host-from", dest="recordings", nargs="+", default=[], metavar="RUN",
                   help="other recordings of the base's configuration (trace files or directories, the same "
                        "ranks): their profiled steps join the medians of --host and --kernels and the host "
                        "draw of --samples, for a machine whose speed differs between recordings more than "
                        "between the steps of one (--host-from: the earlier name)")
    p.add_argument("--fsdp-strategy", choices=tuple(STRATEGIES), default=None,
                   help="FSDP sharding strategy of the target, from an FSDP base: shard_grad_op keeps every unit "
                        "gathered from its forward to its backward (no backward all-gathers; memory as ZeRO-2); "
                        "default: the base's own (lumos/transform/dp_sharding.py)")
    add_memory_flags(p)
    p.add_argument("--dp-calibration", nargs=2, action="append", default=[], metavar=("RUN_AT_DP", "RUN_AT_ONE"),
                   help="from a one-rank FSDP2 or DDP CPU capture (gloo) to --dp N: the same program at another "
                        "model size recorded at DP N and at one rank, on the same host; what N ranks add in each "
                        "FSDP2 hook, or in each DDP bucket's all-reduce and its finalize, is fitted on these pairs "
                        "(repeat the option for more pairs; lumos/durations/dp_host.py); from an N-rank one to "
                        "--dp 1: recordings at DP N and at one rank, whose time outside the hooks says how much "
                        "slower the N ranks ran sharing the host")
    p.add_argument("--ep-calibration", nargs=2, action="append", default=[], metavar=("RUN_AT_BASE_EP", "RUN_AT_EP"),
                   help="from a CPU MoE capture over gloo (lumos capture moe) to --ep N: the same program recorded on "
                        "the same host at the base's EP and at N (other rounds than the runs compared); how much "
                        "slower the ranks run and what gloo's collectives take at N are fitted on these pairs "
                        "(repeat the option for more pairs; lumos/durations/moe_host.py)")
    p.add_argument("--step", type=non_negative_int, default=None,
                   help="ProfilerStep number of the base (and actual)")
    p.add_argument("--actual", default=None, help="directory of the actual run of the target, to compare")
    p.add_argument("--out", type=output_file, default=None, help="write the prediction JSON here")
    p.add_argument("--export", type=output_path, default=None, metavar="DIR",
                   help="also write the predicted graph (the target's, as replayed) as Chakra traces, "
                        "DIR/trace.RANK.et for each rank the prediction simulates; `lumos replay DIR` replays "
                        "it back to the predicted iteration (lumos/graph/chakra_joint.py)")
    p.add_argument("--format", choices=("table", "json"), default="table", help=FORMAT_HELP)
    p.add_argument("--engine", choices=("auto", "reference", "compiled"), default="auto", help=ENGINE_HELP)
    p.add_argument("--samples", type=non_negative_int, default=0, metavar="N",
                   help="also replay the prediction N times with durations drawn from the spread fitted on "
                        "the base and report the median and 50/90/95%% intervals (docs/intervals.md)")
    p.add_argument("--seed", type=non_negative_int, default=0, help="seed of --samples (default 0)")
    p.set_defaults(func=run)


def add_cluster_flag(p: argparse.ArgumentParser) -> None:
    """--cluster (`lumos predict` and `lumos search` share it)."""
    from lumos.durations.collectives import DEFAULT_CLUSTER, cluster_names

    p.add_argument("--cluster", choices=cluster_names(), default=None,
                   help=f"cluster profile (config/predict/clusters/NAME.yaml; default {DEFAULT_CLUSTER}): times "
                        "the collectives a target needs and the base has none of (a one-GPU base's TP "
                        "all-reduces, gradient buckets, pipeline sends) and network levels the base never used")
    p.add_argument("--nccl-tests", nargs="+", metavar="LOG", default=(),
                   help="output of NVIDIA's nccl-tests (all_reduce_perf, all_gather_perf, reduce_scatter_perf, "
                        "sendrecv_perf, alltoall_perf) run on the target cluster: the levels the base has no "
                        "collective on are fitted on it instead of the profile's figures "
                        "(lumos/durations/nccl_tests.py)")


def add_memory_flags(p: argparse.ArgumentParser) -> None:
    """The memory model's settings as flags (`lumos predict` and `lumos search` share them)."""
    mem = p.add_argument_group("memory model (defaults: the cluster profile, config/predict/clusters/)")
    mem.add_argument("--bytes-per-param", type=positive_float, default=None,
                     help="parameter + gradient + optimizer-state bytes per parameter (18: bf16 mixed-precision Adam)")
    mem.add_argument("--distributed-optimizer", action="store_true", default=None,
                     help="optimizer state sharded over data-parallel ranks")
    mem.add_argument("--sharding", choices=("none", "zero1", "zero2", "zero3"), default=None,
                     help="data-parallel sharding of optimizer state (zero1), + gradients (zero2, FSDP "
                          "SHARD_GRAD_OP), + parameters (zero3, FSDP FULL_SHARD); default: the base's own "
                          "(none for all-reduce DP). Memory only: the step time is that of the base's DP")
    mem.add_argument("--recompute", choices=("none", "selective", "full", "selective_op", "selective_layer"),
                     default=None,
                     help="activation recomputation (Korthikanti et al.): none, selective (attention scores "
                          "recomputed, not kept) or full (each layer keeps its input only); torchtitan's "
                          "selective_op (per-op SelectiveAC: the input, every other matmul's and attention's "
                          "outputs kept) or selective_layer (every --ac-every-th block of a stage keeps its input "
                          "only, the others everything); default: selective_layer where the base's recompute "
                          "ranges show every N-th block (N > 1), else the profile's")
    mem.add_argument("--ac-every", type=positive_int, default=None,
                     help="with --recompute selective_layer: every N-th block of a stage checkpointed "
                          "(default: the base's)")
    mem.add_argument("--sequence-parallel", action="store_true", default=None,
                     help="sequence parallelism: the activations TP would replicate (layer norms, dropout) "
                          "sharded over the TP ranks too")
    mem.add_argument("--no-flash-attention", dest="flash_attention", action="store_false", default=None,
                     help="attention keeps its s x s scores (unfused); default: a fused kernel keeps none")
    mem.add_argument("--activation-bytes", type=positive_float, default=None,
                     help="bytes per activation element: 2 (bf16/fp16, default), 4 (float32)")
    mem.add_argument("--workspace-gib", type=non_negative_float, default=None,
                     help="the constant part (default: calibrated from the base's GPU [memory] events, "
                          "else the profile's)")
    mem.add_argument("--gpu-memory-gib", type=positive_float, default=None, help="memory of one GPU")


def memory_overrides(args) -> dict:
    return {k: getattr(args, k) for k in ("bytes_per_param", "distributed_optimizer", "sharding", "recompute",
                                          "ac_every", "sequence_parallel", "flash_attention", "activation_bytes",
                                          "workspace_gib", "gpu_memory_gib")}


def predict_options(args):
    """The flags as the `PredictOptions` of a prediction (`lumos.predict.options`)."""
    from lumos.predict.options import PredictOptions

    return PredictOptions(global_batch=args.global_batch, micro_batch=args.micro_batch,
                          microbatch_rule=args.microbatch_rule, compute_speed=args.compute_speed,
                          network_speed=args.network_speed, fsdp_strategy=args.fsdp_strategy,
                          memory=memory_overrides(args), step=args.step, gemm_efficiency=args.gemm_efficiency,
                          host=args.host, kernels=args.kernels, contention=args.contention, clocks=args.clocks,
                          peer_waits=args.peer_waits, engine=args.engine, samples=args.samples, seed=args.seed,
                          cluster=args.cluster, nccl_tests=tuple(args.nccl_tests))


# The last base run this process loaded, and its plans: a pipeline job that predicts many targets from
# one base in one process (`workflow/scripts/predict.py`) loads and fits the base once.
_LAST_BASE: dict = {}


def _run_key(path: str):
    p = Path(path)
    files = sorted(p.iterdir()) if p.is_dir() else [p] if p.exists() else []
    return (str(p.resolve()), tuple((str(f), f.stat().st_mtime_ns, f.stat().st_size) for f in files)) if files else None


def _base_tables(path: str):
    from lumos.trace import load_run

    key = _run_key(path)
    if key is None or _LAST_BASE.get("key") != key:   # load_run names what is missing
        _LAST_BASE.clear()
        _LAST_BASE.update(key=key, tables=load_run(path), plans={})
    return _LAST_BASE["tables"]


def _base_and_plan(path: str, options, recordings=()):
    from lumos.trace import load_run
    from lumos.predict.whatif import base_plan

    _base_tables(path)
    plans = _LAST_BASE["plans"]
    which = (options.plan_key(), tuple(_run_key(r) or r for r in recordings))
    if which not in plans:
        plans[which] = base_plan(_LAST_BASE["tables"], options, recordings=[load_run(r) for r in recordings])
    return _LAST_BASE["tables"], plans[which]


def run(args) -> int:
    with collector.paused():   # its ~10^5 op shapes, blocks and edges are freed by reference counting
        return _run(args)


def _run(args) -> int:
    from lumos.predict.prediction import predict
    from lumos.trace.run import read_manifest
    from lumos.trace import load_run

    try:
        options = predict_options(args)
        if (args.ep is not None or args.ep_calibration) and _host_moe_base(args):
            _refuse_export(args, "a CPU MoE capture's EP change is predicted without a graph of the target "
                                 "(lumos/predict/moe_host.py)")
            return _run_host_ep(args, options)
        if args.dp is not None and _host_collective_base(args):
            _refuse_export(args, "a base whose collectives are host ops (gloo) is predicted without a graph "
                                 "of the target (lumos/predict/dp_host.py)")
            return _run_host_dp(args, options)
        if args.dp is not None and (args.dp_calibration or _one_rank_dp_base(args)):
            _refuse_export(args, "a prediction from a one-rank DDP or FSDP2 capture has no graph of the target "
                                 "(lumos/predict/dp_host.py)")
            return _run_from_one_rank(args, options)
        if args.samples:
            _refuse_export(args, f"--samples {args.samples} replays the prediction {args.samples} times over, one "
                                 "graph per draw; export the point prediction (without --samples)")
        base, plan = _base_and_plan(args.base, options, args.recordings)
        refuse_cp_form(plan, args.cp, args.cp_form)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    actual = load_run(args.actual) if args.actual else None
    target = {"tp": args.tp, "pp": args.pp, "dp": args.dp, "layers": args.layers,
              "hidden": args.hidden, "ffn": args.ffn, "kv_heads": args.kv_heads, "seq": args.seq, "vp": args.vp,
              "cp": args.cp, "first_stage_layers": args.first_stage_layers, "last_stage_layers": args.last_stage_layers,
              "ep": args.ep, "experts": args.experts, "top_k": args.top_k, "expert_ffn": args.expert_ffn,
              "capacity_factor": args.capacity_factor, "pad_to_capacity": args.pad_to_capacity}
    exported = {}
    try:
        doc = predict(base, target, options, actual_tables=actual,
                      actual_manifest=read_manifest(args.actual) if args.actual else None,
                      base_name=str(args.base), plan=plan,
                      on_graph=(lambda g, r: exported.update(graph=g, ranks=r)) if args.export else None)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if args.export:
        doc["export"] = _export(args.export, exported["graph"], exported["ranks"])
    unmodelled = {str(t.rank): t.unmodelled_note() for t in base if t.unmodelled}
    if unmodelled:   # the base's device work the prediction leaves out, per rank
        doc["not_modelled"] = unmodelled
    from lumos.predict.base_measured import measured_base
    doc["measured_base"] = measured_base(base, plan, options, doc)
    return _emit(args, doc)


def _refuse_export(args, why: str) -> None:
    if args.export:
        raise UserError(f"--export {args.export}: {why}")


def _export(out: str, graph, ranks) -> dict:
    """The predicted graph written as Chakra traces (`lumos.graph.chakra_joint`); what was written."""
    from lumos.graph.chakra_joint import export_joint

    if Path(out).is_file():
        raise UserError(f"--export {out} is a file; give a directory")
    s = export_joint(graph, ranks, out)
    print(f"wrote the predicted graph as {len(s.files)} Chakra trace{'s' if len(s.files) > 1 else ''} to {s.out} "
          f"(ranks {', '.join(map(str, s.ranks))}, {s.bytes / 1e6:.2f} MB); lumos replay {s.out} replays it",
          file=sys.stderr)
    return {"dir": str(s.out), "files": [p.name for p in s.files], "ranks": s.ranks, "bytes": s.bytes,
            "comm_as_compute": s.demoted.get("predicted", 0), "rendezvous_in_metadata": s.virtual}


def _emit(args, doc: dict) -> int:
    from lumos.trace.atomic import write_text_atomic

    text = json.dumps(doc, indent=1)
    if args.out:
        write_text_atomic(args.out, text + "\n")
    if args.format == "json":
        sys.stdout.write(text + "\n")
    else:
        print(format_table(doc))
    return 0


def _host_collective_base(args) -> bool:
    from lumos.predict.dp_host import host_collective_run

    return host_collective_run(_base_tables(args.base), args.step)


def _host_moe_base(args) -> bool:
    from lumos.predict.moe_host import host_moe_run

    return host_moe_run(_base_tables(args.base))


def _run_host_ep(args, options) -> int:
    """`--ep N` from a CPU MoE capture over gloo, with `--ep-calibration` (`lumos.predict.moe_host`)."""
    from lumos.predict.moe_host import predict_host_ep

    base = _base_tables(args.base)
    also = _besides_dp(args) + [f"--{k.replace('_', '-')}" for k in ("experts", "top_k", "expert_ffn",
                                                                     "capacity_factor") if getattr(args, k) is not None]
    also += ["--pad-to-capacity"] if args.pad_to_capacity else []
    also += ["--dp-calibration"] if args.dp_calibration else []
    if args.dp is not None and args.dp != args.ep:
        also.append(f"--dp {args.dp} (DP = EP in such a run: each rank trains its own micro-batch)")
    if also:
        raise UserError(f"{base[0].path}: from a CPU MoE capture over gloo only --ep N (with --ep-calibration) is "
                        f"predicted, not {', '.join(also)}")
    if args.ep is None:
        raise UserError(f"{base[0].path}: --ep-calibration calibrates an EP change: give --ep N")
    if not args.ep_calibration:
        raise UserError(f"{base[0].path}: the base's token exchanges are host collectives (gloo) at its own EP; how "
                        f"much slower its ranks run at EP {args.ep} and what gloo's all-to-alls take over {args.ep} "
                        "ranks on this host are in no base trace: give --ep-calibration RUN_AT_BASE_EP RUN_AT_EP, the "
                        f"same program recorded at the base's EP and at {args.ep} on the same host (other rounds "
                        "than the runs compared; e.g. resources/traces/moe_cpu)")
    return _run_calibrated(args, base, predict_host_ep, args.ep, args.ep_calibration, options)


def _one_rank_dp_base(args) -> bool:
    from lumos.predict.dp_host import one_rank_dp_run

    return one_rank_dp_run(_base_tables(args.base), args.step)


# what a prediction from a host-collective base (gloo on CPU) cannot change besides DP
_NOT_WITH_HOST_DP = ("tp", "pp", "vp", "cp", "first_stage_layers", "last_stage_layers", "layers", "hidden", "ffn", "kv_heads", "seq", "global_batch", "micro_batch", "compute_speed",
                     "network_speed", "fsdp_strategy")


def _besides_dp(args) -> list[str]:
    """The flags asked that a host-collective base cannot change (with --samples)."""
    also = [f"--{k.replace('_', '-')}" for k in _NOT_WITH_HOST_DP if getattr(args, k) is not None]
    return also + (["--samples"] if args.samples else [])


def _run_host_dp(args, options) -> int:
    """`--dp 1` from a base whose collectives are host ops (`lumos.predict.dp_host`)."""
    from lumos.predict.dp_host import predict_one_rank
    from lumos.trace import load_run

    base = _base_tables(args.base)
    also = _besides_dp(args)
    if args.dp != 1 or also:
        asked = ", ".join(also + ([f"--dp {args.dp}"] if args.dp != 1 else []))
        raise UserError(f"{base[0].path}: the base's collectives are host ops (gloo). From such a base only "
                        "--dp 1 alone is predicted (FSDP2 issues no collective at a group of one; "
                        f"lumos/transform/dp_host.py), not {asked}: a larger group would need gloo's time per "
                        "message and FSDP2's host work per collective at that size, and the other transforms "
                        "re-time device work, which a CPU run has none of")
    recordings = [load_run(r) for r in args.recordings]
    pairs = [(load_run(a), load_run(b)) for a, b in args.dp_calibration]
    doc = predict_one_rank(base, options, actual_tables=load_run(args.actual) if args.actual else None,
                           recordings=recordings, base_name=str(args.base), calibration=pairs)
    return _emit(args, _with_measured_base(doc, base, options, recordings))


def _run_from_one_rank(args, options) -> int:
    """`--dp N` from a one-rank FSDP2 or DDP CPU capture, with `--dp-calibration` (`lumos.predict.dp_host`)."""
    from lumos.model.dp_flavour import find_dp_flavour
    from lumos.predict.dp_host import predict_from_one_rank

    base = _base_tables(args.base)
    ddp = find_dp_flavour(base[0], args.step).ddp
    what = "DDP" if ddp else "FSDP2"
    also = _besides_dp(args)
    if also:
        raise UserError(f"{base[0].path}: from a one-rank {what} CPU capture only --dp N (with --dp-calibration) "
                        f"is predicted, not {', '.join(also)}")
    if args.dp < 2:
        raise UserError(f"{base[0].path}: the base runs at DP 1 already (a one-rank {what} capture)")
    if not args.dp_calibration:
        holds = ("DDP's bucket all-reduces over a group of one but none of the waiting" if ddp else
                 "FSDP2's hooks but none of the work")
        raise UserError(f"{base[0].path}: a one-rank {what} capture has {holds} "
                        f"{args.dp} ranks do in them, and nothing that times gloo on this host: give "
                        "--dp-calibration RUN_AT_DP RUN_AT_ONE, the same program at another model size recorded "
                        f"at DP {args.dp} and at one rank on the same host (e.g. resources/traces/"
                        f"{'dp_cpu_sizes' if ddp else 'fsdp_cpu_sizes'})")
    return _run_calibrated(args, base, predict_from_one_rank, args.dp, args.dp_calibration, options)


def _run_calibrated(args, base, predict_fn, degree: int, calibration, options) -> int:
    """A CPU prediction calibrated on recording pairs (`--dp-calibration`, `--ep-calibration`), emitted."""
    from lumos.trace import load_run

    pairs = [(load_run(a), load_run(b)) for a, b in calibration]
    recordings = [load_run(r) for r in args.recordings]
    doc = predict_fn(base, degree, pairs, options, actual_tables=load_run(args.actual) if args.actual else None,
                     recordings=recordings, base_name=str(args.base))
    return _emit(args, _with_measured_base(doc, base, options, recordings))


def _with_measured_base(doc: dict, base, options, recordings) -> dict:
    """`doc` with the host-DP base's measured iteration and its unchanged replay (`lumos.predict.base_measured`)."""
    from lumos.predict.base_measured import measured_host_base

    doc["measured_base"] = measured_host_base(base, options, doc, recordings)
    return doc


def _sharding_note(memory: str, base: str, target: str) -> str:
    """What the memory line assumes about sharding, and whether the time assumes the same."""
    if memory == "none":
        return ""
    if target != base:
        return f" (with {memory} sharding of the DP state, as the target's {target} does)"
    if base != "none":
        return f" (with {memory} sharding of the DP state, as the base's {base} does)"
    return f" (with {memory} sharding of the DP state; the time assumes all-reduce DP)"


def format_table(doc: dict) -> str:
    t = doc["target"]
    mbs = f", micro-batch {t['micro_batch']}" if "micro_batch" in t else ""
    vp = f" vp{t['vp']}" if t.get("vp", 1) > 1 or doc.get("base_config", {}).get("vp", 1) > 1 else ""
    vp += f" cp{t['cp']}" if t.get("cp", 1) > 1 or doc.get("base_config", {}).get("cp", 1) > 1 else ""
    ep, base_ep = (t.get("moe") or {}).get("ep", 1), (doc.get("base_config", {}).get("moe") or {}).get("ep", 1)
    vp += f" ep{ep}" if ep > 1 or base_ep > 1 else ""
    lines = [f"{doc['base']} -> tp{t['tp']} pp{t['pp']}{vp} dp{t['dp']} layers {t['layers']} hidden {t['hidden']} "
             f"ffn {t['ffn']}" + (f" kv-heads {t['kv_heads']}" if t.get("kv_heads") not in (
                 None, doc.get("base_config", {}).get("kv_heads")) else "") + f" ({doc['microbatches']} micro-batches{mbs})"]
    have = "measured" in doc
    label = "actual (emulated) ms" if doc.get("emulated_actual") else "actual ms"
    lines.append(f"  {'':<18}{'predicted ms':>14}" + (f"{label:>22}{'error %':>9}" if have else ""))
    for key in ("iteration_us",) + COMPONENTS:
        p = doc["predicted"][key]
        row = f"  {key[:-3].replace('_', ' '):<18}{p / 1e3:>14.3f}"
        if have:
            m = doc["measured"][key]
            err = f"{100 * (p - m) / m:+.2f}" if m else "-"
            row += f"{m / 1e3:>22.3f}{err:>9}"
        lines.append(row)
    if "measured_base" in doc:
        from lumos.predict.base_measured import format_base
        lines.append(format_base(doc["measured_base"]))
    if "memory" in doc and doc["memory"].get("gpu_memory_gib") is None:   # a CPU-only base: no GPU to fit in
        lines.append(f"  memory (peak stage, the model's estimate): {doc['memory']['memory_gib_per_gpu']:.1f} GiB; "
                     "no GPU (a CPU-only trace): no capacity, no fit verdict")
    elif "memory" in doc:
        m = doc["memory"]
        shard = m.get("assumptions", {}).get("sharding", "none")
        base_dp = doc.get("base_config", {}).get("dp_sharding", "none")
        lines.append(f"  memory per GPU (peak stage): {m['memory_gib_per_gpu']:.1f} GiB of {m['gpu_memory_gib']:.1f}"
                     f" -> {'fits' if m['fits'] else 'does NOT fit'}"
                     + _sharding_note(shard, base_dp, t.get("dp_sharding", base_dp)))
    source = doc.get("structure", {}).get("source")
    if source in ("repetition", "modules"):
        how = "by repetition of its ops" if source == "repetition" else "from the profiler's module events"
        lines.append(f"  note: the base trace has no layer ranges; its layers were found {how} "
                     "(`lumos replay BASE --structure`)")
    for n in doc.get("notes", []):
        lines.append(f"  note: {n}")
    for rank, note in doc.get("not_modelled", {}).items():
        lines.append(f"  not modelled in base rank {rank}: {note}")
    if "interval" in doc:
        from lumos.analysis.uncertainty import format_interval
        lines.append(format_interval(doc["interval"]))
    return "\n".join(lines)
