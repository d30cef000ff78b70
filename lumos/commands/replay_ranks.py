"""`lumos replay`'s work on each rank, and its --out, streamed rank by rank (`lumos.analysis.run_stream`).

Each rank is read, replayed (the Lumos graph or the dPRO-style baseline), refused if it holds
nothing, scored against its measured timeline and written out (--out) before the next rank is
read; what the report keeps of it is its `RankFigures`. The merged timeline is written in rank
order: where the files do not come in rank order (their names do not say their ranks), it is
written in a second pass over the files, in rank order, once the first has read every rank.
A directory of per-rank timelines is written into a hidden folder inside it and moved into
place only once every rank has replayed, so a run that fails leaves nothing half written.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterable, Iterator

from lumos.analysis.ablation import Reference, reference_for, rank_metrics, replay_dpro_tables, replay_variant
from lumos.analysis.replay import RankReplay
from lumos.analysis.run_replay import JointParts
from lumos.analysis.run_stream import RankFigures, RankStream
from lumos.errors import UserError
from lumos.sim import SimulationError
from lumos.trace import TraceTable

__all__ = ["rank_stages", "replay_ranks", "write_out"]


def rank_stages(args, classes: frozenset, joint: JointParts | None = None) -> list:
    """The stages `RankStream` runs on each rank: replay, refuse an empty one, score, and (`joint`)
    keep its graph and communication calls for the joint replay. The state they leave:
    (RankReplay, Reference, RankFigures)."""
    lumos = args.simulator == "lumos"

    def replay(table: TraceTable, _) -> RankReplay:
        try:
            if not lumos:
                return replay_dpro_tables([table], step=args.step).ranks[0]
            return replay_variant([table], step=args.step, edge_classes=classes,
                                  gap_threshold_us=args.gap_threshold_us, drop_random=args.drop_random,
                                  seed=args.seed, engine=args.engine, iteration=args.iteration).ranks[0]
        except SimulationError as exc:
            what = "the ablated graph" if args.drop or args.drop_random else "the graph"
            raise UserError(f"{what} cannot be replayed: {exc}") from None

    def not_empty(table: TraceTable, r: RankReplay) -> RankReplay:
        refuse_empty(r, table)
        return r

    def score(table: TraceTable, r: RankReplay) -> tuple[RankReplay, Reference, RankFigures]:
        ref = reference_for(table, args.step, r.graph if lumos else None)
        return r, ref, RankFigures(r.rank, r.graph.summary, r.measured, r.replayed, rank_metrics(ref, r))

    def keep(table: TraceTable, state):
        joint.add(state[0].graph, table)   # the Lumos graph of the rank: build_run_graph's (no random drop)
        return state

    return [replay, not_empty, score] + ([keep] if joint is not None else [])


def refuse_empty(r: RankReplay, table: TraceTable) -> None:
    """A rank replayed with no task at all is an error, not a row of zeros. The Lumos graph
    refuses an empty step itself (EmptyStepError); this catches what a simulator that
    models less (the dPRO baseline has no CPU threads) finds empty."""
    from lumos.trace.errors import format_counts
    s = r.graph.summary
    if s["tasks"] == 0:
        what = "the dPRO-style baseline (GPU ops only)" if s.get("simulator") == "dpro" else "the graph"
        raise UserError(f"{table.path}: {what} finds no task in step {s['step']}; events by category: "
                        f"{format_counts(table.category_counts())}")


def replay_ranks(stream: RankStream, out: Path | None, source: str,
                 keep: bool = False) -> tuple[list[RankFigures], list[RankReplay]]:
    """Run `stream` (stages `rank_stages`) to its end, writing --out `out` as it goes; raise the run's
    error if it has one. Returns every rank's figures and (`keep`) its replay, in rank order."""
    figures, kept = [], []

    def ranks() -> Iterator[tuple[TraceTable | None, RankReplay, Reference]]:
        for table, (r, ref, fig) in stream:
            figures.append(fig)
            if keep:
                kept.append(r)
            yield table, r, ref
            del table, r, ref, fig

    items = ranks()
    if out is None:
        for item in items:
            del item   # dropped before the next rank is read (a loop variable holds it past that)
        stream.close()
    else:
        write_out(out, items, stream.n_ranks, source, stream)
    order = sorted(range(len(figures)), key=lambda i: figures[i].rank)
    return [figures[i] for i in order], [kept[i] for i in order] if keep else []


class _Abandon(Exception):
    """The merged timeline being written is dropped (a rank came out of order, or the run failed)."""


def write_out(out: Path, ranks: Iterable[tuple[TraceTable | None, RankReplay, Reference]], n_ranks: int,
              source: str, stream: RankStream | None = None) -> None:
    """One rank: its replayed timeline in the file. Several ranks: one merged timeline (every rank
    measured and replayed, critical paths marked) in a .json/.json.gz file, else one replayed
    timeline per rank in the directory. `ranks` may be a generator over `stream`, whose error (if
    any) is raised, with nothing written."""
    from lumos.report.merged_timeline import is_merged_path
    from lumos.report.timeline import write_timeline

    close = stream.close if stream is not None else (lambda: None)
    if n_ranks > 1 and is_merged_path(out):
        _write_merged(out, ranks, source, stream)
        return
    if n_ranks == 1:
        for table, r, _ in ranks:
            write_timeline(out, r.graph, r.schedule.start, r.schedule.end, table)
            del table, r
        close()
        return
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".lumos-replay-", dir=out))
    try:
        names = []
        for table, r, _ in ranks:
            names.append(f"rank{r.rank}.json.gz")
            write_timeline(staging / names[-1], r.graph, r.schedule.start, r.schedule.end, table)
            del table, r
        close()
        for name in names:
            os.replace(staging / name, out / name)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        if created:
            shutil.rmtree(out, ignore_errors=True)
        raise
    shutil.rmtree(staging, ignore_errors=True)


def _write_merged(out: Path, ranks, source: str, stream: RankStream | None) -> None:
    from lumos.report.merged_timeline import measured_side, replayed_side, write_merged_timeline

    def pairs(items, stream):
        last = None
        for table, r, ref in items:
            if last is not None and r.rank < last:
                raise _Abandon
            last = r.rank
            yield measured_side(r.rank, ref.graph, ref.path, table), replayed_side(r, table)
            del table, r, ref
        if stream is not None and stream.failed():
            raise _Abandon

    try:
        write_merged_timeline(out, pairs(ranks, stream), source=str(source))
        return
    except _Abandon:
        for item in ranks:   # the rest of the run, for its figures (and its error)
            del item
        stream.close()
    # the files did not come in rank order: read them again, in rank order, and write
    again = RankStream(stream.path, stream.stages, stream.ranks_from_files, order=stream.rank_order())
    try:
        write_merged_timeline(out, pairs(((t, r, ref) for t, (r, ref, _) in again), again), source=str(source))
    except _Abandon:
        pass
    again.close()
