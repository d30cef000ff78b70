"""Algorithm 1 of the Lumos paper in plain Python: the reference the compiled core must match.

A task starts when its processor is free and every predecessor has ended (plus
the edge's lag). Run-time dependencies: a stream sync, when its thread reaches
it, looks up whatever was last enqueued on its stream at that moment (an op is
enqueued when its launch call ends, or from the start if launched before the
window) and waits for it; a device sync does so for every stream of its rank.
Tasks are picked in order of their earliest possible start, so simulated time
only moves forward and "enqueued at that moment" is well defined.
"""

from __future__ import annotations

import heapq

import numpy as np

from .arrays import SimArrays

NONE, STREAM, DEVICE = 0, 1, 2


def _last_visible(a: SimArrays, enq: np.ndarray, stream_proc: int, t: float) -> int:
    lo, hi = a.stream_ptr[stream_proc], a.stream_ptr[stream_proc + 1]
    for k in range(hi - 1, lo - 1, -1):
        op = a.stream_ops[k]
        if enq[op] <= t:
            return int(op)
    return -1


def simulate_reference(a: SimArrays) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Returns (start, end, done); done is False for tasks that never ran."""
    n = a.n
    start = np.full(n, np.nan)
    end = np.full(n, np.nan)
    done = np.zeros(n, dtype=bool)
    earliest = np.where(np.isfinite(a.release), a.release, -np.inf)
    indeg = a.indeg.copy()
    avail = np.full(a.n_procs, -np.inf)
    enq = np.where(a.is_gpu, np.inf, np.nan)
    enq[a.is_gpu & (a.indeg == 0)] = -np.inf  # no launcher in the window: queued from the start
    has_launch_in = np.zeros(n, dtype=bool)
    launch_targets = a.out_dst[a.out_launch]
    has_launch_in[launch_targets] = True
    enq[a.is_gpu & ~has_launch_in] = -np.inf
    resolved = np.zeros(n, dtype=bool)
    pending = np.zeros(n, dtype=np.int64)  # run-time targets not yet finished
    waiters: dict[int, list[int]] = {}

    heap: list[tuple[float, float, int]] = []
    for v in np.flatnonzero(indeg == 0):
        heapq.heappush(heap, (max(earliest[v], avail[a.proc[v]]), a.tiebreak[v], int(v)))

    while heap:
        key, _, v = heapq.heappop(heap)
        if done[v]:
            continue
        s = max(earliest[v], avail[a.proc[v]])
        if s > key:
            heapq.heappush(heap, (s, a.tiebreak[v], v))
            continue
        if a.wait_kind[v] != NONE and not resolved[v]:
            resolved[v] = True
            if a.wait_kind[v] == STREAM:
                procs = [int(a.wait_target[v])]
            else:
                r = a.rank_index[a.wait_target[v]] if a.wait_target[v] < len(a.rank_index) else -1
                procs = [] if r < 0 else list(a.rank_streams[a.rank_streams_ptr[r]:a.rank_streams_ptr[r + 1]])
            for p in procs:
                t = _last_visible(a, enq, p, s)
                if t < 0:
                    continue
                if done[t]:
                    earliest[v] = max(earliest[v], end[t])
                else:
                    pending[v] += 1
                    waiters.setdefault(t, []).append(v)
            if pending[v]:
                continue
            if earliest[v] > s:
                heapq.heappush(heap, (earliest[v], a.tiebreak[v], v))
                continue
        p = a.proc[v]
        start[v] = s
        f = s + a.dur[v]
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
                heapq.heappush(heap, (max(earliest[c], avail[a.proc[c]]), a.tiebreak[c], int(c)))
        for w in waiters.pop(v, ()):
            if f > earliest[w]:
                earliest[w] = f
            pending[w] -= 1
            if pending[w] == 0:
                heapq.heappush(heap, (max(earliest[w], avail[a.proc[w]]), a.tiebreak[w], w))
    return start, end, done
