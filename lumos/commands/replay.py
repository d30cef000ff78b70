"""`lumos replay PATH`: rebuild an iteration's graph, replay it, compare with the measurement."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from lumos.analysis import COMPONENTS
from lumos.analysis.replay import RunReplay, replay_tables
from lumos.graph import ALL_EDGE_CLASSES, DEFAULT_GAP_THRESHOLD_US, EdgeClass
from lumos.report.timeline import write_timeline
from lumos.trace import load_run


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("replay", help="replay a measured iteration (one trace file or a directory of ranks)",
                       description=__doc__)
    p.add_argument("path", help="a .json/.json.gz Kineto trace, or a directory with one file per rank")
    p.add_argument("--step", type=int, default=None, help="ProfilerStep number (default: a steady-state step)")
    p.add_argument("--out", default=None, help="write the replayed timeline (a file; a directory for several ranks)")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.add_argument("--gap-threshold-us", type=float, default=DEFAULT_GAP_THRESHOLD_US,
                   help="inter-thread gap rule threshold (us)")
    p.add_argument("--engine", choices=("auto", "reference", "compiled"), default="auto")
    add_edge_class_args(p)
    p.set_defaults(func=run)


def add_edge_class_args(p: argparse.ArgumentParser) -> None:
    """The ablation switch; commands that build graphs share it."""
    p.add_argument("--drop", default="", help="edge classes to drop, comma-separated: "
                   + ", ".join(c.label for c in EdgeClass))


def edge_classes_from(args) -> frozenset:
    from lumos.cli import UserError
    drop = set()
    for text in filter(None, (args.drop or "").split(",")):
        try:
            drop.add(EdgeClass.parse(text))
        except ValueError as exc:
            raise UserError(str(exc)) from None
    return frozenset(ALL_EDGE_CLASSES - drop)


def run(args) -> int:
    tables = load_run(args.path)
    result = replay_tables(tables, step=args.step, edge_classes=edge_classes_from(args),
                           gap_threshold_us=args.gap_threshold_us, engine=args.engine)
    if args.out:
        _write_out(Path(args.out), result, tables)
    doc = result.as_dict()
    if args.format == "json":
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(format_table(result, args.path))
    return 0


def _write_out(out: Path, result: RunReplay, tables) -> None:
    by_rank = {t.rank: t for t in tables}
    if len(result.ranks) == 1:
        r = result.ranks[0]
        write_timeline(out, r.graph, r.schedule.start, r.schedule.end, by_rank.get(r.rank))
        return
    for r in result.ranks:
        write_timeline(out / f"rank{r.rank}.json.gz", r.graph, r.schedule.start, r.schedule.end, by_rank.get(r.rank))


def format_table(result: RunReplay, path: str) -> str:
    lines = []
    for r in result.ranks:
        s = r.graph.summary
        lines.append(f"{path} rank {r.rank} step {s['step']}: {s['tasks']} tasks "
                     f"({s['cpu_tasks']} CPU, {s['gpu_tasks']} GPU, {s['carry_in_gpu_ops']} carried in), "
                     f"{sum(s['edges'].values())} edges ({s['inferred_edges']} inferred), "
                     f"{s['violations']} timeline violations")
        lines.append(f"  {'':<18}{'measured ms':>14}{'replayed ms':>14}{'diff %':>9}")
        for key in ("iteration_us",) + COMPONENTS:
            m, p = getattr(r.measured, key), getattr(r.replayed, key)
            diff = f"{100 * (p - m) / m:+.2f}" if m else "-"
            lines.append(f"  {key[:-3].replace('_', ' '):<18}{m / 1e3:>14.3f}{p / 1e3:>14.3f}{diff:>9}")
    if len(result.ranks) > 1:
        d = result.as_dict()
        lines.append(f"run: critical rank {d['critical_rank']}, iteration error {d['error_pct']:+.3f}%, "
                     f"mean |rank error| {d['mean_abs_rank_error_pct']:.3f}%, max {d['max_abs_rank_error_pct']:.3f}%")
    elif result.ranks[0].error_pct is not None:
        lines.append(f"iteration time error: {result.ranks[0].error_pct:+.3f}%")
    return "\n".join(lines)
