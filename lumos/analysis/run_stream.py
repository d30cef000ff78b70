"""A run of many ranks replayed rank by rank, one rank's trace and graph in memory at a time.

`lumos replay RUN_DIR` replays each rank on its own graph (no edge joins two ranks): a rank's
figures need nothing of another rank's trace. So the ranks are streamed: each file is read, the
caller's stages run on it (build the graph, replay it, score it), what the report needs of it is
kept (`RankFigures`: the graph's summary, two breakdowns, the metrics; a few KB) and the trace,
the graph and the schedule are dropped before the next file is read. What is held across ranks is
those figures and each file's table without its events (`shell`: path, rank, and of its metadata
only where the rank came from), so the peak memory is about one rank's whatever the number of
ranks. `--joint`, which does join the ranks, keeps each rank's graph and communication calls
(`lumos.analysis.run_replay.JointParts`) but not its trace (docs/performance.md, "Replay of many
ranks").

Files are read in the order of the ranks their names say (`lumos.trace.run.stream_order`), so
that ranks usually come in rank order; a consumer that must write them in rank order (the merged
timeline) checks, and the caller sorts the figures by rank at the end.

Errors are those reading the whole run first would raise, and the same one where there are
several: any file that cannot be read (the first in file-name order), then a directory whose files
are not the ranks of one run (`lumos.trace.run.settle_ranks`, checked once every file is read),
then the first stage that fails, lowest rank first within a stage. An error stops the stream
from yielding, but files are still read (and their stages run where they could fail with an error
that takes precedence) until the one to raise is known; `close()` raises it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from lumos.errors import UserError
from lumos.trace import TraceError, TraceTable, load_trace
from lumos.trace.run import rank_as_loaded, run_files, settle_ranks, stream_order

from .breakdown import Breakdown, relative_error_pct

__all__ = ["RankFigures", "RankStream", "shell"]

# Errors a stream holds back until it knows which one reading the whole run first would raise;
# anything else (a defect) is raised at once.
DEFERRED = (TraceError, UserError)

Stage = Callable[[TraceTable, Any], Any]


@dataclass
class RankFigures:
    """What `lumos replay` reports of one rank once its trace, graph and schedule are dropped:
    the same fields and JSON as `RankReplay` (`graph` there is `summary` here), and the rank's
    metrics against its measured timeline."""
    rank: int
    summary: dict
    measured: Breakdown
    replayed: Breakdown
    metrics: dict

    @property
    def error_pct(self) -> float | None:
        return relative_error_pct(self.replayed.iteration_us, self.measured.iteration_us)

    def as_dict(self) -> dict:
        err = self.error_pct
        return {"rank": self.rank, "measured": self.measured.as_dict(), "replayed": self.replayed.as_dict(),
                "error_pct": None if err is None else round(err, 4), "graph": self.summary}


def shell(table: TraceTable) -> TraceTable:
    """`table` without its events, and of its metadata only what the run's rank check and the report
    read (distributedInfo's rank and world size, the notes on where the rank came from): a
    distributedInfo's process groups list the ranks of the world, so keeping them all would grow
    with the square of the ranks."""
    out = table.take(np.zeros(0, dtype=np.int64))
    meta = {k: v for k, v in table.metadata.items() if k in RANK_NOTES}
    dist = table.metadata.get("distributedInfo")
    if isinstance(dist, dict):
        meta["distributedInfo"] = {k: dist[k] for k in ("rank", "world_size") if k in dist}
    out.metadata = meta
    return out


RANK_NOTES = ("rank_from_file_order", "rank_from_file_name", "rank_note")   # lumos.trace.run's, in metadata


LOAD, RUN, STAGE = 0, 1, 2   # error precedence: a file that cannot be read, the run's ranks, the stages


class RankStream:
    """Iterate (table, state) over the ranks of `path`, one file read at a time.

    `stages` run in order on each table, each given the table and the previous stage's result
    (None for the first); the last result is the state yielded. `tables`: ranks already read
    (`load_run`, for a replay that also needs them all together); they are streamed through the
    stages the same way, in their order. After the loop, `close()` raises the run's error if there
    is one; `shells` holds every rank's `shell`, sorted by rank once the stream is exhausted.
    `order`: the file indices to read, in that order (default `stream_order`); `rank_order()`, once
    the stream is exhausted, gives the order of the ranks.
    """

    def __init__(self, path: str, stages: Sequence[Stage], ranks_from_files: bool = False,
                 tables: Sequence[TraceTable] | None = None, order: Sequence[int] | None = None):
        self.path = path
        self.stages = list(stages)
        self.ranks_from_files = ranks_from_files
        self.files: list[Path] | None = None if tables is not None else run_files(path)
        self.n_ranks = len(tables) if tables is not None else len(self.files)
        self.shells: list[TraceTable] = []   # filled once the files are all read
        self.order = list(order) if order is not None else None
        self._held: list[tuple[int, TraceTable]] = []   # (file index, shell) of every file read
        self.error_key: tuple[int, int] | None = None
        self.error: Exception | None = None
        self._it = self._run(tables)

    def __iter__(self) -> Iterator[tuple[TraceTable, Any]]:
        return self

    def __next__(self) -> tuple[TraceTable, Any]:
        return next(self._it)

    def failed(self) -> bool:
        return self.error is not None

    def close(self) -> None:
        """Read what is left (without yielding), then raise the run's error if it has one."""
        for _ in self._it:
            pass
        if self.error is not None:
            raise self.error

    def rank_order(self) -> list[int]:
        """The file indices in the order of their ranks (after the stream is exhausted)."""
        return [i for i, t in sorted(self._held, key=lambda x: x[1].rank)]

    def _beats(self, key: tuple[int, int]) -> bool:
        return self.error_key is None or key < self.error_key

    def _fail(self, key: tuple[int, int], exc: Exception) -> None:
        if self._beats(key):
            self.error_key, self.error = key, exc

    def _tables(self, given) -> Iterator[tuple[int, TraceTable, bool]]:
        """(file index, table, whether its rank is known) per file read; a file is not read where its
        error could not be the one raised."""
        if given is not None:
            yield from ((i, t, True) for i, t in enumerate(given))
            return
        n = len(self.files)
        order = self.order if self.order is not None else stream_order(self.files, self.ranks_from_files)
        for i in order:
            if not self._beats((LOAD, i)):
                continue
            try:
                table = load_trace(self.files[i])
            except TraceError as exc:
                self._fail((LOAD, i), exc)
                continue
            known = rank_as_loaded(table, i, n, self.ranks_from_files) if Path(self.path).is_dir() else True
            yield i, table, known
            del table   # before the next file is read

    def _run(self, given) -> Iterator[tuple[TraceTable, Any]]:
        held = self._held
        for i, table, known in self._tables(given):
            held.append((i, table if given is not None else shell(table)))
            state = None
            ok = known
            for j, stage in enumerate(self.stages if known else ()):
                key = (STAGE + j, int(table.rank))
                if not self._beats(key):
                    ok = False
                    break
                try:
                    state = stage(table, state)
                except DEFERRED as exc:
                    self._fail(key, exc)
                    ok = False
                    break
            if ok and self.error is None:
                yield table, state
            del table, state
        self.shells = [t for _, t in sorted(held, key=lambda x: x[0])]   # file-name order, as read together
        if given is None and self._beats((RUN, 0)):
            try:
                self.shells = settle_ranks(self.path, self.shells, self.ranks_from_files)
            except TraceError as exc:
                self._fail((RUN, 0), exc)
        self.shells.sort(key=lambda t: t.rank)
