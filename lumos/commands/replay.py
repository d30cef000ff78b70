"""`lumos replay PATH`: rebuild an iteration's graph, replay it, compare with the measurement.

`--simulator dpro` replays the dPRO-style baseline instead (GPU ops in per-GPU
compute and communication queues, measured gaps; `lumos/baselines/dpro.py`).
`--drop CLASS,..` and `--drop-random FRACTION --seed S` replay an ablated
graph. Every replay is scored against the measured timeline: iteration error,
per-component L1 error and critical-path precision/recall (`metrics` in JSON).

A directory is replayed as the ranks of one run only if its files say they
are (`lumos.trace.run`); `--ranks-from-files` takes each file as its own rank
in file-name order instead. Its ranks are streamed, one rank's trace and graph
in memory at a time (`lumos.analysis.run_stream`, `replay_ranks.py`); `--structure`
and `--samples` read every rank's trace together, so they hold them all. What the tool decided for the user (a default step
that skips a stub, where the CPU tasks came from, ranks taken from file
order), GPU ops with no launch call in the trace (kept on their streams, not tied
to the host) and device events it does not model are printed under the rank's line
and listed in JSON (`graph.notes`, `graph.unlaunched_gpu_ops`, `graph.unmodelled_device_events`,
`graph.unmodelled_device_us`). Where a rule other than NCCL's made kernels communication (DeepEP,
symmetric memory, a collective's name: `lumos.trace.comm_kernels`), a line counts them by rule
(`graph.comm_kernels` in JSON, always).
With `--joint`, communication ops that found no peers are counted per file, with
the reason, on one line each (`joint.unmatched_comm` in JSON: rank -> reason -> count).

A Chakra execution trace (a `PREFIX.RANK.et` file, or a directory of them: what `lumos export`
writes, or a trace from elsewhere) is replayed the same way, rank by rank (`lumos.graph.chakra`).

`--durations-from OTHER[:STEP] [--durations gpu|cpu|all]` is the transfer
test (`lumos.analysis.transfer`): the graph of `--step` replayed with the
durations measured in another iteration (of the same file or another run of
the same job), compared with that iteration as measured, beside the
same-as-step-k, kernel-time-ratio and dPRO-style predictions.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from lumos.analysis import COMPONENTS
from lumos.analysis.ablation import attach_metrics, run_metrics
from lumos.analysis.replay import ITERATION_KINDS, RunReplay
from lumos.analysis.run_replay import JointParts
from lumos.analysis.run_stream import RankStream
from lumos.analysis.transfer import DURATION_KINDS
from lumos.errors import UserError
from lumos.graph import ALL_EDGE_CLASSES, DEFAULT_GAP_THRESHOLD_US, EdgeClass
from lumos.sim import SimulationError
from lumos.trace import load_run
from lumos.trace.comm_kernels import rule_counts_line

from .replay_ranks import rank_stages, replay_ranks, write_out
from .flags import ENGINE_HELP, FORMAT_HELP, fraction, non_negative_float, non_negative_int, output_path
from .output import emit


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("replay", help="replay a measured iteration (one trace file or a directory of ranks)",
                       description=__doc__)
    p.add_argument("path", help="a .json/.json.gz Kineto trace, or a directory with one file per rank")
    p.add_argument("--step", type=non_negative_int, default=None,
                   help="ProfilerStep number (default: a steady-state step)")
    p.add_argument("--out", type=output_path, default=None,
                   help="write the replayed timeline: a file for one rank; for several ranks, a .json/.json.gz "
                        "file gets one merged timeline (every rank measured and replayed, critical paths "
                        "marked) and any other path is a directory of one replayed file per rank")
    p.add_argument("--format", choices=("table", "json"), default="table", help=FORMAT_HELP)
    p.add_argument("--gap-threshold-us", type=non_negative_float, default=DEFAULT_GAP_THRESHOLD_US,
                   help="inter-thread gap rule threshold (us)")
    p.add_argument("--engine", choices=("auto", "reference", "compiled"), default="auto", help=ENGINE_HELP)
    p.add_argument("--iteration", choices=ITERATION_KINDS, default="step",
                   help="what the iteration is: the step period (step start to next step start on the thread "
                        "that marks steps; default) or the GPU span of the step's work ('gpu', as the paper "
                        "reports it); the other is reported beside it")
    p.add_argument("--simulator", choices=("lumos", "dpro"), default="lumos",
                   help="lumos: the execution graph and Algorithm 1; dpro: the dPRO-style baseline")
    add_edge_class_args(p)
    p.add_argument("--drop-random", type=fraction, default=0.0, metavar="FRACTION",
                   help="after the build, drop this fraction of all edges at random (ablation)")
    p.add_argument("--seed", type=non_negative_int, default=0,
                   help="seed of --drop-random and of --samples (default 0)")
    p.add_argument("--samples", type=non_negative_int, default=0, metavar="N",
                   help="also replay N times with durations drawn from a model fitted on the trace and "
                        "report the median and 50/90/95%% intervals (docs/intervals.md)")
    p.add_argument("--ranks-from-files", action="store_true",
                   help="take each file of a directory as its own rank, in file-name order, even when the "
                        "files' rank info is missing or clashes")
    p.add_argument("--joint", action="store_true",
                   help="also replay a multi-rank run as one graph, ranks joined by cross-rank edges "
                        "(collective peers and pipeline send/recv meet at a rendezvous); reported under 'joint'")
    p.add_argument("--durations-from", default=None, metavar="OTHER[:STEP]",
                   help="transfer: replay the graph of --step with the task durations measured in step STEP "
                        "of trace OTHER (OTHER may be PATH itself; STEP defaults to OTHER's default step), "
                        "and compare with that step as measured")
    p.add_argument("--durations", choices=DURATION_KINDS, default="all",
                   help="with --durations-from: which tasks take the other step's durations (default all)")
    p.add_argument("--structure", action="store_true",
                   help="also say what a what-if would work on: the layers, micro-batches and stages found "
                        "and how (layer ranges in the trace, or repetition of the ops; key 'structure')")
    p.set_defaults(func=run)


def add_edge_class_args(p: argparse.ArgumentParser) -> None:
    """The ablation switch; commands that build graphs share it."""
    p.add_argument("--drop", default="", help="edge classes to drop, comma-separated: "
                   + ", ".join(c.label for c in EdgeClass))


def edge_classes_from(args) -> frozenset:
    drop = set()
    for text in filter(None, (args.drop or "").split(",")):
        try:
            drop.add(EdgeClass.parse(text))
        except ValueError as exc:
            raise UserError(str(exc)) from None
    return frozenset(ALL_EDGE_CLASSES - drop)


def _check_variant_args(args, classes: frozenset) -> None:
    if args.samples and args.simulator != "lumos":
        raise UserError("--samples N (N > 0) samples the Lumos replay; not with --simulator dpro")
    if args.joint and (args.simulator != "lumos" or args.drop_random):
        raise UserError("--joint replays the Lumos graph; it does not combine with --simulator dpro or --drop-random")
    if args.simulator == "dpro" and (classes != ALL_EDGE_CLASSES or args.drop_random > 0
                                     or args.gap_threshold_us != DEFAULT_GAP_THRESHOLD_US):
        raise UserError("--drop, --drop-random and --gap-threshold-us change the Lumos graph; "
                        "the dPRO baseline has none of its edges (use --simulator lumos)")


def run(args) -> int:
    if _is_chakra(args.path):
        return run_chakra(args)
    if args.durations_from is not None:
        return run_transfer(args)
    classes = edge_classes_from(args)
    _check_variant_args(args, classes)
    if args.out:
        _check_out(args)
    # --structure and --samples read every rank's trace together: those are held; otherwise the ranks are
    # streamed, one rank's trace in memory at a time (lumos.analysis.run_stream); --joint keeps each
    # rank's graph and communication calls (JointParts) for the run graph
    held = load_run(args.path, ranks_from_files=args.ranks_from_files) if args.structure or args.samples else None
    joint = JointParts(cross_rank=EdgeClass.CROSS_RANK in classes) if args.joint else None
    stream = RankStream(args.path, rank_stages(args, classes, joint), ranks_from_files=args.ranks_from_files,
                        tables=held)
    figures, kept = replay_ranks(stream, Path(args.out) if args.out else None, args.path, keep=bool(args.samples))
    tables = stream.shells   # every rank's table (without its events where streamed), in rank order
    result = RunReplay(figures)
    metrics, per_rank = run_metrics(result)
    doc = attach_metrics(result.as_dict(), metrics, per_rank)
    if args.ranks_from_files:
        doc["ranks_from_files"] = {str(t.rank): Path(t.path).name for t in tables}
    named = [t for t in tables if t.metadata.get("rank_from_file_name")]
    if named:
        doc["ranks_from_file_names"] = {str(t.rank): Path(t.path).name for t in named}
    rank_notes = [t.metadata["rank_note"] for t in tables if t.metadata.get("rank_note")]
    if rank_notes:
        doc["rank_notes"] = rank_notes
    if args.joint:
        doc["joint"] = _joint(args, joint, tables)
    interval_lines = _intervals(args, doc, RunReplay(kept), tables)
    if args.structure:
        from lumos.predict.whatif import structure_report   # only here: the what-if layer is not needed
        doc["structure"] = structure_report(tables, step=args.step)
    if args.format == "json":
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        if args.ranks_from_files:
            print("ranks taken from file-name order (--ranks-from-files): "
                  + ", ".join(f"rank {t.rank} = {Path(t.path).name}" for t in tables))
        if named:
            print("ranks taken from file names (no distributedInfo.rank): "
                  + ", ".join(f"rank {t.rank} = {Path(t.path).name}" for t in named))
        for note in rank_notes:
            print(f"note: {note}")
        print(format_table(result, args.path, metrics))
        for line in interval_lines:
            print(line)
        if args.structure:
            print(format_structure(doc["structure"]))
        if args.joint:
            j = doc["joint"]
            print(f"joint replay of {len(tables)} ranks with {j['rendezvous']} cross-rank rendezvous: "
                  f"measured {j['measured']['iteration_us'] / 1e3:.3f} ms, replayed "
                  f"{j['replayed']['iteration_us'] / 1e3:.3f} ms, error {j['error_pct']:+.3f}%")
            from lumos.graph.run_graph import unmatched_lines   # only here: a joint replay's, not every replay's
            paths = {int(t.rank): t.path for t in tables}
            for line in unmatched_lines({int(r): by for r, by in j["unmatched_comm"].items()}, paths):
                print(f"  not matched: {line}")
    return 0


def _is_chakra(path: str) -> bool:
    from lumos.trace.chakra import et_files   # stdlib only: a Kineto replay pays nothing for it
    from lumos.trace.errors import TraceError

    try:
        return et_files(path) is not None
    except TraceError:
        return True   # .et files that are not one set: the loader says why


def run_chakra(args) -> int:
    """Replay a Chakra trace: each rank's graph as the export (or, for a foreign trace, the loader)
    built it, with the same ablations, output and metrics as a Kineto replay."""
    from lumos.analysis.ablation import replay_built
    from lumos.graph.chakra import load_chakra_run

    refused = [flag for flag, on in (("--simulator dpro", args.simulator != "lumos"),
                                     ("--durations-from", args.durations_from is not None),
                                     ("--joint", args.joint), ("--structure", args.structure),
                                     ("--samples", args.samples), ("--ranks-from-files", args.ranks_from_files),
                                     ("--step", args.step is not None),
                                     ("--gap-threshold-us", args.gap_threshold_us != DEFAULT_GAP_THRESHOLD_US))
               if on]
    if refused:
        raise UserError(f"{args.path} is a Chakra trace: its graph is already built, one step, ranks from "
                        f"the file names; {', '.join(refused)} needs a Kineto trace")
    classes = edge_classes_from(args)
    graphs = load_chakra_run(args.path)
    if len(graphs) == 1 and "chakra_joint" in graphs[0].summary:
        return _run_chakra_joint(args, graphs[0], classes)
    try:
        result, refs = replay_built(graphs, edge_classes=classes, drop_random=args.drop_random, seed=args.seed,
                                    engine=args.engine, iteration=args.iteration)
    except SimulationError as exc:
        raise UserError(f"the graph cannot be replayed: {exc}") from None
    metrics, per_rank = run_metrics(result, refs)
    if args.out:
        write_out(Path(args.out), ((None, r, refs[r.rank]) for r in result.ranks), len(result.ranks), args.path)
    doc = attach_metrics(result.as_dict(), metrics, per_rank)
    if args.format == "json":
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(format_table(result, args.path, metrics))
    return 0


def _run_chakra_joint(args, graph, classes) -> int:
    """A joint export (`lumos predict --export`): its ranks replayed as the one graph the prediction
    replayed (rendezvous joined), read out as the prediction reads it (`run_replay.run_breakdown`).
    Its measured times are the base's, moved by the what-if: no measured column."""
    from lumos.analysis.run_replay import run_breakdown
    from lumos.graph.ablate import drop_classes
    from lumos.sim import simulate

    if args.drop_random or args.out or args.iteration != "step":
        flag = "--drop-random" if args.drop_random else "--out" if args.out else "--iteration"
        raise UserError(f"{args.path} is a predicted graph (lumos predict --export): {flag} is not for it")
    drop = set(EdgeClass) - frozenset(classes)
    variant = drop_classes(graph, drop) if drop else graph
    try:
        sched = simulate(variant, engine=args.engine)
    except SimulationError as exc:
        raise UserError(f"the graph cannot be replayed: {exc}") from None
    bd = run_breakdown(variant, sched.start, sched.end)
    ranks = graph.summary["chakra_joint"]
    doc = {"path": str(args.path), "joint": True, "ranks": ranks, "critical_rank": bd.critical_rank,
           "rendezvous": int(graph.summary.get("rendezvous", 0)), "replayed": bd.as_dict(),
           "per_rank": {str(r): b.as_dict() for r, b in sorted(bd.per_rank.items())}}
    if args.format == "json":
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    print(f"{args.path}: a predicted graph of ranks {', '.join(map(str, ranks))} (lumos predict --export), "
          f"replayed as one graph with its {doc['rendezvous']} rendezvous")
    print(f"  {'rank':<6}" + "".join(f"{k[:-3].replace('_', ' '):>18}" for k in ("iteration_us",) + COMPONENTS))
    for r, b in sorted(bd.per_rank.items()):
        d = b.as_dict()
        print(f"  {r:<6}" + "".join(f"{d[k] / 1e3:>18.3f}" for k in ("iteration_us",) + COMPONENTS)
              + ("  (critical)" if r == bd.critical_rank else ""))
    return 0


def _intervals(args, doc: dict, result: RunReplay, tables) -> list[str]:
    """--samples: the sampled interval of every rank's replay (lumos.analysis.uncertainty)."""
    if not args.samples:
        return []
    from lumos.analysis.uncertainty import attach_intervals
    return attach_intervals(doc, result.ranks, tables, args.samples, args.seed, iteration=args.iteration,
                            engine="reference" if args.engine == "reference" else "compiled")


def _joint(args, parts: JointParts, tables) -> dict:
    """The run as one graph (lumos.analysis.run_replay), joined from the ranks' graphs kept as they
    streamed; per-rank entries dropped for brevity."""
    from lumos.analysis.run_replay import replay_joined

    try:
        joint = replay_joined(parts.graph(tables), engine=args.engine)
    except SimulationError as exc:
        raise UserError(f"the joint graph cannot be replayed: {exc}") from None
    joint.pop("ranks", None)
    return joint


def _check_out(args) -> None:
    """Refused before the replay: a .json/.json.gz --out that is a directory, or that lies in the run
    directory (a trace file there would be read as one of its ranks the next time)."""
    from lumos.report.merged_timeline import is_merged_path

    out, run = Path(args.out), Path(args.path)
    if not is_merged_path(out):
        return
    if out.is_dir():
        raise UserError(f"{out}: is a directory; a .json or .json.gz --out names the file to write")
    if run.is_dir() and out.resolve().parent == run.resolve():
        raise UserError(f"{out}: write the timeline outside the run directory {run} "
                        "(a trace file there is read as one of its ranks)")


def format_table(result: RunReplay, path: str, metrics: dict | None = None) -> str:
    lines = []
    for r in result.ranks:
        s = r.summary
        who = "dPRO-style baseline, " if s.get("simulator") == "dpro" else ""
        lines.append(f"{path} rank {r.rank} step {s['step']}: {who}{s['tasks']} tasks "
                     f"({s['cpu_tasks']} CPU, {s['gpu_tasks']} GPU, {s['carry_in_gpu_ops']} carried in), "
                     f"{sum(s['edges'].values())} edges ({s['inferred_edges']} inferred), "
                     f"{s['violations']} timeline violations")
        for note in s.get("notes", ()):
            lines.append(f"  note: {note}")
        if s.get("unlaunched_note"):
            lines.append(f"  unlaunched: {s['unlaunched_note']}")
        if s.get("unmodelled_note"):
            lines.append(f"  not modelled: {s['unmodelled_note']}")
        by_rule = rule_counts_line(s.get("comm_kernels") or {})
        if by_rule:
            lines.append(f"  {by_rule}")
        lines.append(f"  {'':<18}{'measured ms':>14}{'replayed ms':>14}{'diff %':>9}")
        for key in ("iteration_us",) + COMPONENTS:
            m, p = getattr(r.measured, key), getattr(r.replayed, key)
            diff = f"{100 * (p - m) / m:+.2f}" if m else "-"
            lines.append(f"  {key[:-3].replace('_', ' '):<18}{m / 1e3:>14.3f}{p / 1e3:>14.3f}{diff:>9}")
        is_step = r.measured.step_period_us is not None
        beside = "gpu_span_us" if is_step else "step_period_us"
        m, p = getattr(r.measured, beside), getattr(r.replayed, beside)
        if m is not None and p is not None:
            diff = f"{100 * (p - m) / m:+.2f}" if m else "-"
            lines.append(f"  {beside[:-3].replace('_', ' '):<18}{m / 1e3:>14.3f}{p / 1e3:>14.3f}{diff:>9}")
        span = ("the span of the CPU tasks" if not s.get("gpu_tasks") else "the GPU span of the step's work")
        if s.get("step") is None:
            span += " over the whole trace (it marks no step)"
        lines.append("  (iteration = " + ("the step period: step start to next step start on the thread that "
                                          "marks steps)" if is_step else span + ")"))
    if len(result.ranks) > 1:
        d = result.as_dict()
        lines.append(f"run: critical rank {d['critical_rank']}, iteration error {d['error_pct']:+.3f}%, "
                     f"mean |rank error| {d['mean_abs_rank_error_pct']:.3f}%, max {d['max_abs_rank_error_pct']:.3f}%")
    elif result.ranks[0].error_pct is not None:
        lines.append(f"iteration time error: {result.ranks[0].error_pct:+.3f}%")
    if metrics and metrics.get("component_l1_pct") is not None:
        lines.append(f"component L1 error: {metrics['component_l1_us'] / 1e3:.3f} ms "
                     f"({metrics['component_l1_pct']:.3f}% of the measured iteration); critical path: "
                     f"precision {_fmt(metrics['cp_precision'])}, recall {_fmt(metrics['cp_recall'])} "
                     f"({metrics['cp_measured_tasks']} measured tasks)")
    return "\n".join(lines)


def format_structure(st: dict) -> str:
    how = {"annotations": "layers from the layer ranges in the trace",
           "modules": "layers from the profiler's module events (no layer ranges in the trace)",
           "repetition": "layers from repetition of the ops (no layer ranges in the trace)",
           "none": "no transformer layers found",
           "mixed": "layers found on some ranks only"}[st["source"]]
    lines = [f"structure: {how}"]
    if st["source"] == "none":
        lines.append(f"  what-if: {st['what_if']}")
    elif "error" in st:
        lines.append(f"  {st['error']}")
        if "shape" in st:
            lines += _shape_lines(st["shape"], moe="moe" in st)
        if "moe" in st:
            lines += _moe_lines(st["moe"])
    elif "layers" in st:
        blocks = ", ".join(f"{k} {v}" for k, v in sorted(st["blocks"].items()))
        cp = f" x CP {st['cp']}" if st.get("cp", 1) > 1 else ""
        lines.append(f"  {st['layers']} layers, {st['microbatches']} micro-batches, TP {st['tp']}{cp} x PP {st['pp']} "
                     f"x DP {st['dp']}; what-if: {st['what_if']}")
        if st.get("chunks", 1) > 1 or len(set(st.get("stage_layers") or [])) > 1:
            sched = (f"interleaved 1F1B, {st['chunks']} model chunks per stage" if st.get("chunks", 1) > 1
                     else "1F1B")
            lines.append(f"  pipeline: {sched}; layers per stage {'/'.join(map(str, st['stage_layers']))}")
        lines.append(f"  blocks: {blocks}")
        if "shape" in st:
            lines += _shape_lines(st["shape"], moe="moe" in st)
        if "moe" in st:
            lines += _moe_lines(st["moe"])
    lines += [f"  {n}" for n in st["ranks"]]
    if "data_parallel" in st:
        dp = st["data_parallel"]
        lines.append(f"data parallel: {dp['label']}")
        lines.append(f"  why: {dp['reason']}")
        if dp.get("collectives"):
            lines.append(f"  issue order (rank {dp['ranks'][0]}): {_issue_order(dp)}")
    return "\n".join(lines)


def _shape_lines(sh: dict, moe: bool = False) -> list[str]:
    """The model shape and what each number was read from (an MoE layer's FFN is its experts')."""
    mlp = "SwiGLU" if sh["mlp"] == "swiglu" else "GELU MLP"
    ffn = f"MoE experts' FFN {sh['ffn']} (SwiGLU)" if moe else f"FFN {sh['ffn']} ({mlp})"
    line = (f"  shape: hidden {sh['hidden']}, {ffn}, {sh['heads']} query heads, {sh['kv_heads']} KV "
            f"heads of {sh['head_dim']}, norm {sh['norm']}, vocabulary {sh['vocab']}, sequence {sh['seq']}, "
            f"micro-batch {sh['micro_batch']}, TP {sh['tp']}")
    return [line] + [f"    {k}: {v}" for k, v in sh["evidence"].items()]


def _moe_lines(m: dict) -> list[str]:
    """An MoE run's experts, top-k, EP and tokens per expert, with their evidence; one line where its
    readings disagree."""
    if "experts" not in m:
        return [f"  MoE: the evidence disagrees: {m['error']}"]
    shared = f", a shared expert of FFN {m['shared_expert_ffn']}" if m["shared_expert_ffn"] else ""
    lines = [f"  MoE layers: {m['experts']} experts ({m['experts_per_rank']} per rank), top-{m['top_k']}, "
             f"EP {m['ep']}, expert FFN {m['expert_ffn']}{shared}; {m['tokens']} tokens per rank and micro-batch"]
    lines += [f"    {k}: {v}" for k, v in m["evidence"].items()]
    if "disagreement" in m:
        lines.append(f"    {m['disagreement']}")
    for row in m["tokens_per_expert"]:
        lines.append(f"    tokens per expert, layer {row['layer']} micro-batch {row['microbatch']}: "
                     f"{' '.join(map(str, row['tokens']))} (sum {sum(row['tokens'])})")
    return lines


ISSUE_ORDER_SHOWN = 60


def _issue_order(dp: dict) -> str:
    """The sharded DP's collectives in issue order: its all-gathers and reduce-scatters, and the
    all-reduces over a group of their size (a TP group's all-reduces are left out), the first
    ISSUE_ORDER_SHOWN of them (`--format json` has all)."""
    held = dp.get("unit_layers", {})
    groups = {c["group"] for c in dp["collectives"] if c["kind"] != "all_reduce" and c["group"] > 0}
    shown = [c for c in dp["collectives"] if c["kind"] != "all_reduce" or not groups or c["group"] in groups]
    out = " ".join(f"{c['kind'].replace('_', '-')}({held.get(c['unit'], c['unit']) or '?'}"
                   f"{', prefetch' if c['prefetch'] else ''})" for c in shown[:ISSUE_ORDER_SHOWN])
    return out + (f" ... ({len(shown) - ISSUE_ORDER_SHOWN} more)" if len(shown) > ISSUE_ORDER_SHOWN else "")


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


# -- transfer: step k's graph with another iteration's durations ----------------------------
def split_path_step(text: str) -> tuple[str, int | None]:
    """'PATH:STEP' -> (PATH, STEP); a PATH without a numeric ':STEP' suffix -> (PATH, None)."""
    head, sep, tail = text.rpartition(":")
    if sep and head and tail.lstrip("-").isdigit():
        return head, int(tail)
    return text, None


def load_one_rank(path: str, flag: str):
    """The one rank of a trace file (or of a directory holding a single rank)."""
    tables = load_run(path)
    if len(tables) != 1:
        raise UserError(f"{flag} {path} holds {len(tables)} ranks; pass one rank's trace file "
                        f"({', '.join(Path(t.path).name for t in tables[:3])}, ...)")
    return tables[0]


def run_transfer(args) -> int:
    from lumos.analysis.transfer import NotSameJobError, transfer_pair
    if (args.simulator != "lumos" or args.drop or args.drop_random or args.joint or args.out
            or args.ranks_from_files):
        raise UserError("--durations-from replays the Lumos graph of one rank (the dPRO-style transfer is "
                        "reported beside it); it does not combine with --simulator, --drop, --drop-random, "
                        "--joint, --out or --ranks-from-files")
    other_path, other_step = split_path_step(args.durations_from)
    table = load_one_rank(args.path, "TRACE")
    other = load_one_rank(other_path, "--durations-from")
    try:
        r = transfer_pair(table, args.step, other, other_step, durations=args.durations, engine=args.engine,
                          gap_threshold_us=args.gap_threshold_us, iteration=args.iteration)
    except NotSameJobError as exc:
        raise UserError(str(exc)) from None
    except SimulationError as exc:
        raise UserError(f"the graph with the other step's durations cannot be replayed: {exc}") from None
    doc = {"trace": table.path, "durations_from": other.path, **r.as_dict()}
    for b in doc.get("baselines", {}).values():
        if b["iteration_us"] != b["iteration_us"]:   # NaN: the kernel-time ratio of a step with no GPU time
            b.update(iteration_us=None, error_pct=None, note="no GPU kernels")
    emit(doc, args.format, format_transfer)
    return 0


def format_transfer(doc: dict) -> str:
    same = doc["durations_from"] == doc["trace"]
    src = f"step {doc['durations_from_step']}" + ("" if same else f" of {doc['durations_from']}")
    m = doc["matched"]
    lines = [f"{doc['trace']} step {doc['step']} replayed with the {doc['durations']} durations of {src}",
             f"  matched {100 * doc['matched_share']:.2f}% of step {doc['step']}'s tasks "
             f"(CPU {m['cpu']}, GPU {m['gpu']}); unmatched tasks keep their own durations",
             f"  {'':<30}{'iteration ms':>14}{'error %':>10}",
             f"  {'measured, step ' + str(doc['step']):<30}{doc['measured']['iteration_us'] / 1e3:>14.3f}",
             f"  {'predicted (Lumos transfer)':<30}{doc['predicted']['iteration_us'] / 1e3:>14.3f}"
             f"{_pct(doc['error_pct']):>10}",
             f"  {'actual, step ' + str(doc['durations_from_step']):<30}{doc['actual']['iteration_us'] / 1e3:>14.3f}"]
    labels = {"same_as_k": "same as step " + str(doc["step"]), "kernel_ratio": "kernel-time ratio",
              "dpro": "dPRO-style transfer"}
    for key, b in doc.get("baselines", {}).items():
        label = "baseline: " + labels.get(key, key)
        if b["iteration_us"] is None:
            lines.append(f"  {label:<30}{b.get('note', '-'):>14}")
            continue
        lines.append(f"  {label:<30}{b['iteration_us'] / 1e3:>14.3f}{_pct(b['error_pct']):>10}")
    return "\n".join(lines)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.2f}"
