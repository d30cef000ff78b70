"""Algorithm 1 of the Lumos paper in plain Python: the reference the compiled core must match.

A task starts when its processor is free and every predecessor has ended (plus
the edge's lag). Among the tasks that could run, the one with the earliest
possible start goes first (ties: measured start, then task index), so
simulated time only moves forward.

Run-time dependencies: an op is enqueued on its stream when its launch call
ends (ops with no launcher in the window: from the start). A stream sync, when
its thread reaches it, waits for the last op of the stream's enqueued prefix
(streams are FIFO: an op queued behind one not yet launched cannot complete
first); a device sync does so for every stream of its rank.

Ready tasks wait in per-processor queues, so a processor with many ready tasks
(an ablated graph without program order) costs O(log n) per task, not a
re-scan: `ripe` holds tasks that could start as soon as the processor is free
(ordered by measured start), `unripe` those whose dependencies end later
(ordered by that time); only each processor's head sits in the global heap.
"""

from __future__ import annotations

import heapq

import numpy as np

from .arrays import SimArrays, validate

NONE, STREAM, DEVICE = 0, 1, 2


def simulate_reference(a: SimArrays) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Returns (start, end, done, abandoned): done is False for tasks that never ran;
    abandoned counts syncs let go because what they waited for could only run after them.
    A malformed `a` is a TypeError or ValueError naming the field (`arrays.validate`: the checks the
    compiled core makes)."""
    a = validate(a)
    n = a.n
    start = np.full(n, np.nan)
    end = np.full(n, np.nan)
    done = np.zeros(n, dtype=bool)
    earliest = np.where(np.isfinite(a.release), a.release, -np.inf)
    indeg = a.indeg.copy()
    avail = np.full(a.n_procs, -np.inf)
    enq = np.full(n, np.inf)
    has_launch_in = np.zeros(n, dtype=bool)
    has_launch_in[a.out_dst[a.out_launch]] = True
    enq[a.is_gpu & ~has_launch_in] = -np.inf  # no launcher in the window: queued from the start
    prefix = a.stream_ptr[:-1].copy()  # per stream: first op not yet seen enqueued
    resolved = np.zeros(n, dtype=bool)
    pending = np.zeros(n, dtype=np.int64)
    waiters: dict[int, list[int]] = {}
    abandoned = [0]

    ripe: list[list] = [[] for _ in range(a.n_procs)]
    unripe: list[list] = [[] for _ in range(a.n_procs)]
    head_task = np.full(a.n_procs, -1, dtype=np.int64)
    head_key = np.full(a.n_procs, np.nan)
    heap: list[tuple[float, float, int, int]] = []

    def refresh(p: int) -> None:
        u = unripe[p]
        while u and u[0][0] <= avail[p]:
            _, tb, v = heapq.heappop(u)
            heapq.heappush(ripe[p], (tb, v))
        if ripe[p]:
            tb, v = ripe[p][0]
            key = avail[p]
        elif u:
            key, tb, v = u[0]
        else:
            head_task[p] = -1
            return
        if head_task[p] != v or head_key[p] != key:
            head_task[p], head_key[p] = v, key
            heapq.heappush(heap, (key, tb, v, p))

    def make_ready(v: int) -> None:
        p = a.proc[v]
        if earliest[v] <= avail[p]:
            heapq.heappush(ripe[p], (a.tiebreak[v], v))
        else:
            heapq.heappush(unripe[p], (earliest[v], a.tiebreak[v], v))
        refresh(p)

    def last_enqueued(sp: int, t: float) -> int:
        lo, hi = a.stream_ptr[sp], a.stream_ptr[sp + 1]
        k = prefix[sp]
        while k < hi and enq[a.stream_ops[k]] <= t:
            k += 1
        prefix[sp] = k
        return int(a.stream_ops[k - 1]) if k > lo else -1

    for v in np.flatnonzero(indeg == 0):
        make_ready(int(v))

    while True:
        if not heap:
            # Everything left waits, directly or not, on a sync parked on work that can
            # only run after it: possible once an ablation removed program order. As with
            # a CUDA wait on work that cannot come first, the sync stops waiting; the
            # earliest-issued such sync is let go, one at a time.
            parked = [(a.tiebreak[w], w) for ws in waiters.values() for w in ws if pending[w] > 0]
            if not parked:
                break
            _, w = min(parked)
            for t in list(waiters):
                if w in waiters[t]:
                    waiters[t].remove(w)
            pending[w] = 0
            abandoned[0] += 1
            make_ready(w)
            continue
        key, _, v, p = heapq.heappop(heap)
        if head_task[p] != v or head_key[p] != key:
            continue  # stale: the processor's head changed since this entry was pushed
        # take v out of its processor's queue (it is the head)
        if ripe[p] and ripe[p][0][1] == v:
            heapq.heappop(ripe[p])
        else:
            heapq.heappop(unripe[p])
        head_task[p] = -1
        s = key
        if a.wait_kind[v] != NONE and not resolved[v]:
            resolved[v] = True
            if a.wait_kind[v] == STREAM:
                streams = [int(a.wait_target[v])]
            else:
                wt = a.wait_target[v]   # a rank; -1 or one past rank_index: none
                r = a.rank_index[wt] if 0 <= wt < len(a.rank_index) else -1
                streams = [] if r < 0 else list(a.rank_streams[a.rank_streams_ptr[r]:a.rank_streams_ptr[r + 1]])
            for sp in streams:
                if sp < 0:  # -1: no stream
                    continue
                t = last_enqueued(sp, s)
                if t < 0:
                    continue
                if done[t]:
                    earliest[v] = max(earliest[v], end[t])
                else:
                    pending[v] += 1
                    waiters.setdefault(t, []).append(v)
            if pending[v] or earliest[v] > s:
                if not pending[v]:
                    make_ready(v)
                refresh(p)
                continue
        start[v] = s
        f = s + a.dur[v]
        if a.floor is not None and a.floor[v] > f:
            f = a.floor[v]  # ends when its absent peers let it
        end[v] = f
        done[v] = True
        avail[p] = f
        for k in range(a.out_ptr[v], a.out_ptr[v + 1]):
            c = a.out_dst[k]
            t = f + a.out_lag[k]
            if t > earliest[c]:
                earliest[c] = t
            if a.out_launch[k] and f < enq[c]:
                enq[c] = f
            indeg[c] -= 1
            if indeg[c] == 0:
                make_ready(int(c))
        for w in waiters.pop(v, ()):
            if f > earliest[w]:
                earliest[w] = f
            pending[w] -= 1
            if pending[w] == 0:
                make_ready(w)
        refresh(p)
    return start, end, done, abandoned[0]
