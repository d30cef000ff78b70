"""One Perfetto timeline of a multi-rank run: every rank as measured and as replayed, side by side.

A per-rank file shows one timeline; the questions about a run (which rank sets the step, where
the replay leaves the measurement, what the critical path crosses) need them all in one view.
`lumos replay RUN --out merged.json.gz` writes this file; ui.perfetto.dev opens it.

Each rank gives two processes, sorted rank by rank: "rank R measured" (pid 2R+1: the step's tasks
as the trace recorded them) and "rank R replayed" (pid 2R+2: the same tasks where the replay put
them). Inside each, one track per CPU thread and GPU stream, named as the graph names them, and
on top a "critical path" track holding a copy of each task on that timeline's critical path
(the part of it the path waits on):

    rank 3 replayed
      critical path             [launch][ gemm ][ all-reduce ][ gemm ]
      thread 10003 (pid 10003)  [launch]
      stream 7 (GPU 0)                  [ gemm ]--.            [ gemm ]
      stream 20 (GPU 0)                           '->[ all-reduce ]-^     flow arrows, in path order

The tasks on the path also carry `args.critical = true` and `args.critical_step` (their place on
the path, from 0), and a flow event links each to the next, so Perfetto draws the path across
threads and streams. The paths are `lumos.analysis.critical_path`'s: the measured one walked on the measured
timeline, the replayed one on the schedule (what `lumos replay` scores as precision and recall).

Perfetto's legacy JSON importer (google/perfetto,
src/trace_processor/importers/json/json_trace_parser_impl.cc) sets the conventions followed here:
- a `thread_name` metadata event names a thread by its tid alone, so tids are unique across the
  file, not only within a process: process pid's tracks are tids pid * TIDS_PER_PROCESS + k;
- overlapping slices on one track are not drawn (only perfect nesting is), so the critical-path
  track shows of each task the part after the previous one (its full duration is `args.dur_us`);
- a flow is a pair of `s` / `f` events (`"bp": "e"`: bind to the enclosing slice) with an id of
  its own (matched with its category and name), each inside the slice it links; Perfetto reads
  events in time order, so the `f` must not come before the `s`. (The v2 form, `bind_id` on the slices, chains in order of slice
  starts; a measured path is not always in that order: a sync starts before the op it waits for.)
- `process_sort_index` / `thread_sort_index` order the tracks in chrome://tracing; Perfetto orders
  by pid, which is chosen in the same order.
Timestamps are microseconds on each rank's trace clock, as in the rank's own trace.

The file is written rank by rank (`lumos.trace.writer.write_trace_chunks`): only one rank's events
are in memory at a time, however many ranks the run has.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from lumos.analysis.critical_path import critical_path
from lumos.analysis.replay import RankReplay
from lumos.graph import Graph
from lumos.trace import TraceTable
from lumos.trace.writer import write_trace_chunks

from .timeline import timeline_events

__all__ = ["SIDES", "Side", "is_merged_path", "measured_side", "replayed_side", "side_events",
           "write_merged_timeline"]

SIDES = ("measured", "replayed")
TIDS_PER_PROCESS = 10_000      # process pid's tracks are tids pid * TIDS_PER_PROCESS + k, k < this
MAX_TID = 2**32 - 1            # Perfetto reads pids and tids as unsigned 32-bit integers
CRITICAL_TRACK = "critical path"
FLOW_CATEGORY = "critical_path"


def is_merged_path(path: str | os.PathLike) -> bool:
    """A file name the merged timeline is written to (a multi-rank run's other --out is a directory)."""
    return os.fspath(path).endswith((".json", ".json.gz"))


@dataclass(frozen=True)
class Side:
    """One timeline of one rank: `graph`'s task i from start[i] to end[i]; `path` the task ids on
    its critical path, earliest first."""
    rank: int
    label: str
    graph: Graph
    start: np.ndarray
    end: np.ndarray
    path: np.ndarray
    table: TraceTable | None


def measured_side(rank: int, graph: Graph, path: np.ndarray, table: TraceTable | None) -> Side:
    """The rank's tasks as the trace recorded them: each at its event's `ts` and `dur`, so a sync
    call keeps the wait the replay models apart (`graph.dur` holds only its own cost); a task with
    no event (synthetic) at the graph's measured times. `path`: `measured_critical_path(graph)`."""
    row = graph.event
    real = row >= 0 if table is not None else np.zeros(graph.n_tasks, bool)
    safe = np.where(real, row, 0)
    start = np.where(real, table.ts[safe], graph.ts) if table is not None else graph.ts.copy()
    dur = np.where(real, table.dur[safe], graph.dur) if table is not None else graph.dur.copy()
    return Side(rank, "measured", graph, start, start + dur, np.asarray(path), table)


def replayed_side(replay: RankReplay, table: TraceTable | None) -> Side:
    """The rank's tasks where the replay put them, with the replayed critical path."""
    s = replay.schedule
    return Side(replay.rank, "replayed", replay.graph, s.start, s.end,
                critical_path(replay.graph, s.start, s.end), table)


def process_id(rank: int, label: str) -> int:
    """pid 2R+1 for rank R measured, 2R+2 replayed: unique, non-zero, in display order."""
    return 2 * rank + 1 + SIDES.index(label)


def side_events(side: Side) -> list[dict]:
    """The Chrome-trace events of one side: metadata, its tasks, the critical-path copies."""
    g = side.graph
    pid = process_id(side.rank, side.label)
    base = pid * TIDS_PER_PROCESS
    if g.n_procs + 1 >= TIDS_PER_PROCESS or base + TIDS_PER_PROCESS > MAX_TID:
        raise ValueError(f"rank {side.rank}: {g.n_procs} threads and streams at pid {pid} do not fit "
                         f"Perfetto's 32-bit thread ids ({TIDS_PER_PROCESS} tracks per process)")
    events = timeline_events(g, side.start, side.end, side.table, side.label)
    track = _track_of_kineto_thread(g)
    for e in events:   # task i is events[i]; the step annotation that follows sits on a task's thread
        e["tid"] = base + 1 + track[(e["pid"], e["tid"])]
        e["pid"] = pid
    critical = _mark_critical(events, side.path, pid, tid=base)
    t0 = min((e["ts"] for e in events), default=0.0)
    used = np.unique(g.proc) if g.n_tasks else np.zeros(0, np.int64)
    meta = [_meta("process_name", pid, base, t0, name=f"rank {side.rank} {side.label}"),
            _meta("process_sort_index", pid, base, t0, sort_index=pid),
            _meta("thread_name", pid, base, t0, name=CRITICAL_TRACK),
            _meta("thread_sort_index", pid, base, t0, sort_index=0)]
    for p in used:
        tid = base + 1 + int(p)
        meta += [_meta("thread_name", pid, tid, t0, name=str(g.proc_name[p])),
                 _meta("thread_sort_index", pid, tid, t0, sort_index=1 + int(p))]
    return meta + events + critical


def _track_of_kineto_thread(g: Graph) -> dict[tuple[int, int], int]:
    """(pid, tid) as `timeline_events` writes a processor -> the processor's index (a tid of 2**31
    or more is written signed on tasks, unsigned on the step annotation: both are looked up)."""
    out = {}
    for p, key in enumerate(g.proc_key):
        key = int(key)
        hi, lo = key >> 32, key & 0xFFFFFFFF
        out[(hi, lo)] = out[(hi, lo - (1 << 32) if lo >= 1 << 31 else lo)] = p
    return out


def _mark_critical(events: list[dict], path: np.ndarray, pid: int, tid: int) -> list[dict]:
    """Mark the path's tasks and return the critical-path track and the flow events linking them.

    The track tiles the path: each task's copy runs from the later of its start and the previous
    copies' end to its own end, the part of the task the path waits on (a sync that began before the
    op it waits for shows only its tail). A task that ended before that (a copy the launch call it
    follows still covered, within the measured path's 1 us tolerance) gets a zero-length copy at its
    end, nested in the previous copy: copies never partially overlap."""
    copies, flows = [], []
    tiled = -np.inf
    for k, i in enumerate(int(i) for i in path):
        e = events[i]
        e["args"]["critical"] = True
        e["args"]["critical_step"] = k
        end = e["ts"] + e["dur"]
        ts = min(max(e["ts"], tiled), end)
        tiled = max(tiled, end)
        copies.append({"ph": "X", "cat": e["cat"], "name": e["name"], "pid": pid, "tid": tid, "ts": ts,
                       "dur": round(end - ts, 3), "args": {"critical_step": k, "dur_us": e["dur"],
                                                          "track_tid": e["tid"]}})
    for k, (u, v) in enumerate(itertools.pairwise(path)):
        flow = {"cat": FLOW_CATEGORY, "name": CRITICAL_TRACK, "id": (pid << 32) + k, "pid": pid}
        out_ts, in_ts = _flow_times(events[int(u)], events[int(v)])
        flows.append({"ph": "s", **flow, "tid": events[int(u)]["tid"], "ts": out_ts})
        flows.append({"ph": "f", "bp": "e", **flow, "tid": events[int(v)]["tid"], "ts": in_ts})
    return copies + flows


def _flow_times(u: dict, v: dict) -> tuple[float, float]:
    """Where the flow u -> v leaves u and enters v: inside each slice (a flow binds to the slice that
    encloses it), the leaving no later than the entering (Perfetto reads events in time order and
    drops an end it reads before its start). Apart slices: their middles; overlapping ones: the
    first and second third of the overlap.

        u [-----]                 u [--------]
        v          [-----]        v      [--------]
             s        f                   s  f
    """
    u0, u1, v0, v1 = u["ts"], u["ts"] + u["dur"], v["ts"], v["ts"] + v["dur"]
    lo, hi = max(u0, v0), min(u1, v1)
    if hi > lo:
        return round(lo + (hi - lo) / 3, 3), round(lo + 2 * (hi - lo) / 3, 3)
    return round((u0 + u1) / 2, 3), round((v0 + v1) / 2, 3)


def _meta(what: str, pid: int, tid: int, ts: float, **args) -> dict:
    return {"ph": "M", "name": what, "pid": pid, "tid": tid, "ts": ts, "args": args}


def write_merged_timeline(path: str | os.PathLike, ranks: Iterable[tuple[Side, Side]],
                          source: str | None = None, compresslevel: int = 6) -> int:
    """Write every rank's (measured, replayed) sides to one trace, rank by rank; the event count.

    `ranks` may be a generator: each pair is turned into events, written and dropped before the
    next is asked for.

    Example
    -------
    >>> from lumos.analysis.ablation import reference_for, replay_variant    # doctest: +SKIP
    >>> run = replay_variant(tables)                                         # doctest: +SKIP
    >>> pairs = ((measured_side(r.rank, ref.graph, ref.path, t), replayed_side(r, t))
    ...          for r, t in zip(run.ranks, tables) for ref in [reference_for(t, None, r.graph)])
    >>> write_merged_timeline("merged.json.gz", pairs)                       # doctest: +SKIP
    """
    meta = {"traceName": "lumos merged timeline: every rank measured and replayed",
            "lumos": {"timeline": "merged", "source": source, "sides": list(SIDES)}}
    return write_trace_chunks(path, _chunks(ranks), meta, compresslevel)


def _chunks(ranks: Iterable[tuple[Side, Side]]) -> Iterator[list[dict]]:
    for measured, replayed in ranks:
        yield side_events(measured) + side_events(replayed)
        del measured, replayed   # before the next pair is asked for: a loop variable would hold them
