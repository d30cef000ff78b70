"""GPU -> GPU across streams: cudaEventRecord on one stream, cudaStreamWaitEvent on another.

With `enable_cuda_sync_events` the trace carries, per wait, the waiting
stream, the recording stream and the record call's correlation id: the edge
runs from the op the event captured to the first op launched on the waiting
stream after the wait. Newer CUPTI (seen with torch 2.11 / CUDA 13 on an H200)
writes -1 for both and names only the event (`wait_on_cuda_event_id`); there the
record is the waiting thread's last cudaEventRecord before the wait, on the
stream that thread launched to last before recording (torch records on the
current stream), which is how torch and DDP pair them. Older traces lack the
sync events altogether; there the edge is inferred from
the timeline: an op that started later than its launch and its stream
predecessor allow, right after an op on another stream of the same device
ended, and whose launching thread called cudaStreamWaitEvent just before
launching it, waited for that op. Which op: never one launched after the wait
call; first the op that thread launched last before the wait (torch records on
the current stream just before waiting), then one still last on its stream at
the wait, then the one that ended last (`_waited_for`).

A CUDA graph's own dependencies never appear in the trace: one
cudaGraphLaunch puts every op of the graph on its streams (they share the
call's correlation id), and where the graph forks onto a second stream and
joins back, no record or wait call says so. There the edge is inferred the
same way, inside one launch: an op that started later than its launch and
its stream predecessor allow, right after an op of the same launch on
another stream ended, waited for that op (`HOW_GRAPH`). Without it the
join's wait would sit as a lag on the stream edge, and the branch it waited
for would be off the critical path.

    stream 7   |-- A --|-- C --|              |-- D --|
    stream 20          |-------- B ---------|
                                            ^ B -> D (same graph launch)
"""

from __future__ import annotations

import numpy as np

from lumos.lean_numpy import unique
from lumos.trace import schema

from ..context import BuildContext, EdgeList
from .sync import recorded_op

HOW = "timeline: delayed op after cudaStreamWaitEvent"
HOW_GRAPH = "CUDA graph: delayed op after an op of its graph launch on another stream"
TOLERANCE_US = 2.0   # a start this much later than its constraints is a delay
WINDOW_US = 50.0     # the op waited for ended at most this long before the start


class _ThreadHistory:
    """Per CPU thread: its event-record calls and its launches, in time order."""

    def __init__(self, ctx: BuildContext):
        rec = np.flatnonzero(~ctx.is_gpu & np.isin(ctx.name, list(schema.EVENT_RECORD_CALLS)))
        self.records = self._by_thread(ctx, rec, rec)
        gpu = np.flatnonzero(ctx.is_gpu & (ctx.launcher >= 0))
        self.launches = self._by_thread(ctx, ctx.launcher[gpu], gpu)
        self.ctx = ctx

    @staticmethod
    def _by_thread(ctx, calls, payload) -> dict:
        out: dict[int, tuple] = {}
        keys = ctx.thread_key[calls]
        for k in unique(keys):
            sel = keys == k
            order = np.argsort(ctx.ts[calls[sel]], kind="stable")
            out[int(k)] = (ctx.ts[calls[sel]][order], payload[sel][order])
        return out

    def _last_before(self, table: dict, thread: int, t: float) -> int:
        ts, ids = table.get(thread, (np.zeros(0), np.zeros(0, np.int64)))
        i = np.searchsorted(ts, t, side="left") - 1
        return int(ids[i]) if i >= 0 else -1

    def last_launch(self, thread: int, t: float) -> int:
        """The GPU op whose launch call `thread` started last before t (-1: none)."""
        return self._last_before(self.launches, thread, t)

    def record_and_stream(self, wait_call: int) -> tuple[int, int]:
        """The record call a wait pairs with and the stream processor it recorded on (-1, -1: none)."""
        ctx = self.ctx
        thread = int(ctx.thread_key[wait_call])
        rec = self._last_before(self.records, thread, ctx.ts[wait_call])
        if rec < 0:
            return -1, -1
        op = self._last_before(self.launches, thread, ctx.ts[rec])
        return rec, (int(ctx.proc[op]) if op >= 0 else -1)


def _is_stream_wait(sync_kind, name) -> bool:
    """A sync event that is a stream's wait on an event (not a stream, context or event sync)."""
    if sync_kind not in (None, "Stream Wait Event") and "Wait" not in str(name):
        return False
    return str(sync_kind or name) not in ("Stream Sync", "Context Sync", "Event Sync")


def _explicit(ctx: BuildContext, out: EdgeList) -> int:
    t = ctx.table
    rows = np.flatnonzero((t.cat == schema.SYNC) & (t.stream >= 0))
    if not len(rows):
        return 0
    kinds = list(zip(t.sync_kind[rows].tolist(), t.name[rows].tolist()))
    verdict = {k: _is_stream_wait(*k) for k in dict.fromkeys(kinds)}   # once per distinct kind and name
    rows = rows[np.fromiter(map(verdict.__getitem__, kinds), dtype=bool, count=len(kinds))]
    wait_call = ctx.runtime_of(t.corr[rows])
    rows, wait_call = rows[wait_call >= 0], wait_call[wait_call >= 0]
    dev = t.device[rows].astype(np.int64)
    src = np.full(len(rows), -1, dtype=np.int64)
    # the wait names its record call: the op that call captured on the recording stream
    named = t.wait_corr[rows] >= 0
    record_call = ctx.runtime_of(t.wait_corr[rows[named]])
    ok = record_call >= 0
    procs = ctx.procs_of_streams(dev[named][ok], t.wait_stream[rows[named]][ok])
    src_named = np.full(int(named.sum()), -1, dtype=np.int64)
    src_named[ok] = ctx.last_on_streams(procs, "launch", ctx.ts[record_call[ok]])
    src[named] = src_named
    # it names only the event: the record is the waiting thread's last one before the wait
    history = _ThreadHistory(ctx) if (~named).any() else None
    for i in np.flatnonzero(~named):
        r = rows[i]
        rec, stream_proc = history.record_and_stream(int(wait_call[i]))
        if t.wait_stream[r] >= 0:
            stream_proc = ctx.proc_of_stream(int(dev[i]), int(t.wait_stream[r]))
        src[i] = recorded_op(ctx, rec, stream_proc) if rec >= 0 else -1
    waiting = ctx.procs_of_streams(dev, t.stream[rows])
    dst = ctx.first_launched_after_many(waiting, ctx.ts[wait_call])
    keep = (src >= 0) & (waiting >= 0) & (dst >= 0)
    out.extend(src[keep], dst[keep])
    return int(keep.sum())


def _prev_on_stream(ctx: BuildContext) -> np.ndarray:
    prev = np.full(ctx.n, -1, dtype=np.int64)
    for p, tasks in enumerate(ctx.proc_tasks):
        if len(tasks) and ctx.proc_kind[p] == 1:
            prev[tasks[1:]] = tasks[:-1]
    return prev


def _delay(ctx: BuildContext, g: int, prev: int) -> float:
    """How much later op g started than its launch and its stream predecessor allow."""
    launcher = ctx.launcher[g]
    bound = ctx.end[launcher] if ctx.ts[g] >= ctx.end[launcher] else ctx.ts[launcher]
    if prev >= 0:
        bound = max(bound, ctx.end[prev])
    return float(ctx.ts[g] - bound)


def _ended_just_before(ends: np.ndarray, t: float) -> range:
    """Positions in sorted `ends` of the ops that ended in the `WINDOW_US` before t (up to 1 us
    after it: clocks), latest first: the candidates for what an op starting at t waited for."""
    hi = np.searchsorted(ends, t + 1.0, side="right")
    lo = np.searchsorted(ends, t - WINDOW_US, side="left")
    return range(hi - 1, lo - 1, -1)


def _graph_branches(ctx: BuildContext, out: EdgeList) -> None:
    """Op -> op of one CUDA graph launch across streams, from the timeline (HOW_GRAPH)."""
    graph_calls = np.flatnonzero(~ctx.is_gpu & np.isin(ctx.name, list(schema.GRAPH_LAUNCH_CALLS)))
    if not len(graph_calls):
        return
    ops = np.flatnonzero(ctx.is_gpu & np.isin(ctx.launcher, graph_calls))
    prev_on_stream = _prev_on_stream(ctx)
    by_launch: dict[int, np.ndarray] = {}
    for call in unique(ctx.launcher[ops]):
        mine = ops[ctx.launcher[ops] == call]
        by_launch[int(call)] = mine[np.argsort(ctx.end[mine], kind="stable")]
    for g in ops:
        if _delay(ctx, g, prev_on_stream[g]) <= TOLERANCE_US:
            continue
        mine = by_launch[int(ctx.launcher[g])]
        for j in _ended_just_before(ctx.end[mine], ctx.ts[g]):
            u = mine[j]
            if ctx.proc[u] != ctx.proc[g]:
                out.add(u, g, inferred=True, how=HOW_GRAPH)
                break


def _inferred(ctx: BuildContext, out: EdgeList) -> None:
    waits = np.flatnonzero(~ctx.is_gpu & np.isin(ctx.name, list(schema.STREAM_WAIT_CALLS)))
    if not len(waits):
        return
    gpu = np.flatnonzero(ctx.is_gpu)
    by_end = gpu[np.argsort(ctx.end[gpu], kind="stable")]
    ends = ctx.end[by_end]
    prev_on_stream = _prev_on_stream(ctx)
    waits_by_thread: dict[int, np.ndarray] = {}
    for w in waits:
        waits_by_thread.setdefault(int(ctx.thread_key[w]), []).append(ctx.ts[w])
    waits_by_thread = {k: np.sort(np.array(v)) for k, v in waits_by_thread.items()}
    history = _ThreadHistory(ctx)
    for g in gpu:
        launcher = ctx.launcher[g]
        if launcher < 0:
            continue
        p = prev_on_stream[g]
        if _delay(ctx, g, p) <= TOLERANCE_US:
            continue
        # did the launching thread call cudaStreamWaitEvent since its previous launch to this stream?
        wts = waits_by_thread.get(int(ctx.thread_key[launcher]))
        if wts is None:
            continue
        prev_launch_ts = ctx.ts[ctx.launcher[p]] if p >= 0 and ctx.launcher[p] >= 0 else -np.inf
        k = np.searchsorted(wts, ctx.ts[launcher], side="right") - 1
        if k < 0 or wts[k] < prev_launch_ts:
            continue
        u = _waited_for(ctx, g, by_end, ends, float(wts[k]), history.last_launch)
        if u >= 0:
            out.add(u, g, inferred=True, how=HOW)


def _waited_for(ctx: BuildContext, g: int, by_end: np.ndarray, ends: np.ndarray, wait_ts: float,
                last_launch) -> int:
    """The op on another stream of g's device that g waited for (-1: none).

    Candidates ended in the `WINDOW_US` before g started and were launched before the wait
    call (an event captures only work enqueued before it is recorded, and it is recorded
    before it is waited on). The trace names no record call, so the likeliest is the one
    torch makes: on the waiting thread's current stream, the stream it launched to last,
    just before the wait. So, in this order: the op the waiting thread launched last before
    the wait; an op that was still the last launched on its stream then; the one that
    ended last. A stream running a backlog always has an op ending just before any moment,
    and an op with later work launched behind it before the wait ended there by chance:

        wait ─┐                       ┌ g (stream B, launched after the wait)
        A:    |  ..][a4][a5][a6][a7]..    a6 ends 1 us before g: a7 was launched before the wait
        C:   [ c1 (launched last, then waited for) ]   c1 ends 15 us before g: g waited for c1
    """
    mine = last_launch(int(ctx.thread_key[ctx.launcher[g]]), wait_ts)
    launched = ctx.launch_time()
    best, best_rank = -1, -1
    for j in _ended_just_before(ends, ctx.ts[g]):   # latest end first: ties keep the later-ending op
        u = int(by_end[j])
        if ctx.proc[u] == ctx.proc[g] or ctx.device[u] != ctx.device[g] or launched[u] > wait_ts:
            continue
        rank = 2 if u == mine else 1 if ctx.last_on_stream(int(ctx.proc[u]), "launch", wait_ts) == u else 0
        if rank > best_rank:
            best, best_rank = u, rank
    return best


def inter_stream_edges(ctx: BuildContext) -> EdgeList:
    out = EdgeList()
    if _explicit(ctx, out) == 0:
        _inferred(ctx, out)
    _graph_branches(ctx, out)
    return out
