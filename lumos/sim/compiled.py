"""Algorithm 1 compiled with numba: the same schedule as `reference.py`, bit for bit.

Why a second implementation: a 175B iteration is 10^5-10^6 tasks per rank and
a sweep replays thousands of graphs, so the replay core must run at array
speed. It takes the same `SimArrays` and makes the same picks as the reference:

- The reference picks, among the processors' heads, the smallest (key,
  measured start, task): a processor's head is its ripe task (ready by the
  time the processor is free) with the smallest (measured start, task), keyed
  by the processor's available time, or else its unripe task with the
  smallest (earliest start, measured start, task). Put differently, each pick
  is the queued task with the smallest (max(earliest, available), measured
  start, task).
- Here that pick comes from one lazy heap. An unripe task sits in it as itself,
  keyed by its earliest start; each processor with ripe tasks has a token
  (available time, measured start and id of its best ripe task), the ripe
  tasks themselves waiting in a per-processor heap (a slice of one array).
  Stored keys never exceed true ones (available times only grow; a task's
  earliest start does not change while it is queued), so the smallest entry,
  once checked current, is the true pick: a task whose processor became free
  after its earliest start moves to the ripe heap, a token that no longer
  matches is dropped (a current one is always in the heap). At most one heap
  push and pop per task, as in the plain Algorithm 1 (often none: the row just
  made ready is held out of the heap while it is the smallest, and it is
  usually the next pick), and no re-scan when a processor has many ready
  tasks. The heap arrays are only ever replaced (grown) between runs of the
  inner loop: an array variable reassigned inside the hot loop costs reference
  counting on every step.
- Stream visibility is the FIFO-enqueued prefix of each stream (a pointer that
  only moves forward); an unfinished sync target parks the task on a list of
  waiters kept in registration order; when nothing can run but syncs are
  parked, the earliest-issued one is let go and counted, as in the reference.

Memory: the per-task arrays every step touches are views into one numpy
allocation (huge pages: their first touch is several times cheaper than that
of arrays allocated inside compiled code, or of many separate small ones);
arrays only syncs touch are separate np.zeros (the OS fills pages on first
use), and the ripe heaps and ready list, touched at a few places, are allocated
inside the compiled code (small pages: untouched ones cost nothing).

Compile time: the first call in a fresh environment compiles for about 5-10 s;
`cache=True` keeps the machine code in `__pycache__`, after which the first
call of a process costs well under a second.

`longest_path_bound` is the benchmark's yardstick: one compiled pass in
topological order (Kahn) computing each task's longest-path finish over the
same arrays, with no processors and no run-time dependencies.
"""

from __future__ import annotations

import numpy as np

from lumos.jit import njit

from .arrays import SimArrays

NONE, STREAM, DEVICE = 0, 1, 2


@njit(cache=True)
def _pymax(a, b):
    """Python's max(a, b) for floats: keeps `a` unless b > a (so max(0.0, -0.0) is 0.0)."""
    return b if b > a else a


@njit(cache=True)
def _wrap(i, n):
    """Python's negative indexing: a[-1] is a[n - 1]."""
    return i + n if i < 0 else i


# --- a processor's ripe tasks: a heap by (measured start, task) in th[off[p]:off[p + 1]] ---

@njit(cache=True, inline="always")
def _ripe_before(a, b, tiebreak):
    if tiebreak[a] != tiebreak[b]:
        return tiebreak[a] < tiebreak[b]
    return a < b


@njit(cache=True)
def _ripe_push(th, base, size, v, tiebreak):
    pos = size
    while pos > 0:
        parent = (pos - 1) >> 1
        if not _ripe_before(v, th[base + parent], tiebreak):
            break
        th[base + pos] = th[base + parent]
        pos = parent
    th[base + pos] = v


@njit(cache=True)
def _ripe_pop(th, base, size, tiebreak):
    """Remove the top of a heap of `size` > 1 entries."""
    size -= 1
    v = th[base + size]
    pos = 0
    while True:
        child = 2 * pos + 1
        if child >= size:
            break
        if child + 1 < size and _ripe_before(th[base + child + 1], th[base + child], tiebreak):
            child += 1
        if not _ripe_before(th[base + child], v, tiebreak):
            break
        th[base + pos] = th[base + child]
        pos = child
    th[base + pos] = v


# --- the pick heap: rows (key, measured start, task, processor or -1), smallest first ---
# Rows are compared by (key, measured start, task): a task has at most one current row.

@njit(cache=True, inline="always")
def _row_less(hk, ht, hv, i, j):
    if hk[i] != hk[j]:
        return hk[i] < hk[j]
    if ht[i] != ht[j]:
        return ht[i] < ht[j]
    return hv[i] < hv[j]


@njit(cache=True, inline="always")
def _heap_push(hk, ht, hv, hp, size, key, tb, v, p):
    """Push a row into a heap of `size` rows (the arrays have room for it)."""
    pos = size
    while pos > 0:
        parent = (pos - 1) >> 1
        if not (key < hk[parent] or (key == hk[parent] and (tb < ht[parent] or (tb == ht[parent]
                                                                                 and v < hv[parent])))):
            break
        hk[pos], ht[pos], hv[pos], hp[pos] = hk[parent], ht[parent], hv[parent], hp[parent]
        pos = parent
    hk[pos], ht[pos], hv[pos], hp[pos] = key, tb, v, p


@njit(cache=True, inline="always")
def _heap_pop(hk, ht, hv, hp, size):
    """Remove row 0 of a heap of `size` > 0 rows."""
    size -= 1
    key, tb, v, p = hk[size], ht[size], hv[size], hp[size]
    pos = 0
    while True:
        child = 2 * pos + 1
        if child >= size:
            break
        if child + 1 < size and _row_less(hk, ht, hv, child + 1, child):
            child += 1
        if not (hk[child] < key or (hk[child] == key and (ht[child] < tb or (ht[child] == tb and hv[child] < v)))):
            break
        hk[pos], ht[pos], hv[pos], hp[pos] = hk[child], ht[child], hv[child], hp[child]
        pos = child
    hk[pos], ht[pos], hv[pos], hp[pos] = key, tb, v, p


@njit(cache=True, inline="always")
def _offer(hk, ht, hv, hp, size, slot, key, tb, v, p):
    """Add a row, keeping the smaller of it and the held row (`slot`: key, tiebreak, task,
    processor; task -1 when empty) out of the heap: the row just made ready is often the next
    pick, and then it never enters the heap. Returns (heap size, held row)."""
    if slot[2] < 0:
        return size, (key, tb, v, p)
    sk, stb, sv, sp = slot
    if key < sk or (key == sk and (tb < stb or (tb == stb and v < sv))):
        _heap_push(hk, ht, hv, hp, size, sk, stb, sv, sp)
        return size + 1, (key, tb, v, p)
    _heap_push(hk, ht, hv, hp, size, key, tb, v, p)
    return size + 1, slot


@njit(cache=True)
def _grown(a):
    out = np.empty(2 * len(a), dtype=a.dtype)
    out[:len(a)] = a
    return out


@njit(cache=True)
def _core(n, proc, dur, release, tiebreak, out_ptr, out_dst, out_lag, out_launch, indeg0,
          wait_kind, wait_target, is_gpu, stream_ptr, stream_ops, rank_streams_ptr, rank_streams,
          rank_index, n_procs, floor, start, end, done, earliest, indeg, enq, has_launch_in, resolved, pending,
          first, last):
    inf = np.inf
    n_ri = len(rank_index)
    # touched at a few places only: allocated here (no huge pages), where untouched pages are free
    th = np.empty(n, dtype=np.int64)  # the ripe heaps
    ready = np.empty(n + 1, dtype=np.int64)  # tasks made ready, to queue
    for k in range(len(out_dst)):
        if out_launch[k]:
            has_launch_in[out_dst[k]] = True
    off = np.zeros(n_procs + 1, dtype=np.int64)
    cap = 0  # waiter records: a waiting task registers at most once per stream it resolves
    n_ready = 0
    for v in range(n):
        r = release[v]
        earliest[v] = r if np.isfinite(r) else -inf
        indeg[v] = indeg0[v]
        enq[v] = -inf if is_gpu[v] and not has_launch_in[v] else inf  # no launcher: queued from the start
        off[proc[v] + 1] += 1
        wk = wait_kind[v]
        if wk == STREAM:
            cap += 1
        elif wk == DEVICE:
            wt = wait_target[v]
            if wt < n_ri:
                ri = rank_index[_wrap(wt, n_ri)]
                if ri >= 0:
                    cap += rank_streams_ptr[ri + 1] - rank_streams_ptr[ri]
        if indeg0[v] == 0:
            ready[n_ready] = v
            n_ready += 1
    off = np.cumsum(off)  # processor p's ripe heap: th[off[p]:off[p + 1]]
    rn = np.zeros(n_procs, dtype=np.int64)  # ripe tasks per processor
    avail = np.full(n_procs, -inf)
    tok_task = np.full(n_procs, -1, dtype=np.int64)  # the last token pushed per processor
    tok_key = np.full(n_procs, np.nan)
    marked = np.zeros(n_procs, dtype=np.bool_)  # processors whose token may be out of date
    touched = np.empty(n_procs, dtype=np.int64)
    n_touched = 0
    hcap = max(64, n_procs + n // 8)
    hk, ht = np.empty(hcap), np.empty(hcap)
    hv, hp = np.empty(hcap, dtype=np.int64), np.empty(hcap, dtype=np.int64)
    hsize = 0
    slot = (0.0, 0.0, -1, -1)  # a row held out of the heap (task -1: none)
    prefix = stream_ptr[:-1].copy()  # per stream: first op not yet seen enqueued
    rec_next = np.empty(cap, dtype=np.int64)
    rec_task = np.empty(cap, dtype=np.int64)
    rec_live = np.zeros(cap, dtype=np.bool_)
    n_rec = 0
    n_live = 0
    abandoned = 0
    streams = np.empty(max(1, len(rank_streams)), dtype=np.int64)

    finished = False
    while not finished:
        if hsize + n_ready + n_procs > len(hk):
            hk, ht, hv, hp = _grown(hk), _grown(ht), _grown(hv), _grown(hp)
        while True:
            if hsize + n_ready + n_procs > len(hk):
                break  # this step might not fit: grow the heap first (outside this loop)
            # make_ready: ripe tasks to their processor's heap, unripe ones into the pick heap
            for i in range(n_ready):
                v = ready[i]
                q = proc[v]
                if earliest[v] <= avail[q]:
                    if rn[q] == 0:
                        th[off[q]] = v
                    else:
                        _ripe_push(th, off[q], rn[q], v, tiebreak)
                    rn[q] += 1
                    if not marked[q]:
                        marked[q] = True
                        touched[n_touched] = q
                        n_touched += 1
                else:
                    hsize, slot = _offer(hk, ht, hv, hp, hsize, slot, earliest[v], tiebreak[v], v, -1)
            n_ready = 0
            # tokens: a processor whose best ripe task or available time changed gets a current one
            for i in range(n_touched):
                q = touched[i]
                marked[q] = False
                if rn[q] > 0:
                    h = th[off[q]]
                    if tok_task[q] != h or tok_key[q] != avail[q]:
                        tok_task[q], tok_key[q] = h, avail[q]
                        hsize, slot = _offer(hk, ht, hv, hp, hsize, slot, avail[q], tiebreak[h], h, q)
            n_touched = 0

            if hsize == 0 and slot[2] < 0:
                # everything left waits on a parked sync: let the earliest-issued one go
                w = -1
                if n_live > 0:
                    for k in range(n_rec):
                        if rec_live[k] and pending[rec_task[k]] > 0:
                            u = rec_task[k]
                            if w < 0 or tiebreak[u] < tiebreak[w] or (tiebreak[u] == tiebreak[w] and u < w):
                                w = u
                if w < 0:
                    finished = True
                    break
                for k in range(n_rec):
                    if rec_live[k] and rec_task[k] == w:
                        rec_live[k] = False
                        n_live -= 1
                pending[w] = 0
                abandoned += 1
                ready[0] = w
                n_ready = 1
                continue

            sk, stb, sv, sp = slot
            if sv >= 0 and (hsize == 0 or sk < hk[0] or (sk == hk[0] and (stb < ht[0] or (stb == ht[0]
                                                                                      and sv < hv[0])))):
                s, v, tp = sk, sv, sp
                slot = (0.0, 0.0, -1, -1)
            else:
                s, v, tp = hk[0], hv[0], hp[0]
                _heap_pop(hk, ht, hv, hp, hsize)
                hsize -= 1
            if tp < 0:  # a task's own row
                p = proc[v]
                if earliest[v] < avail[p]:  # its processor came free after its earliest start: ripe now
                    ready[0] = v
                    n_ready = 1
                    continue
            else:  # a processor's token
                p = tp
                if rn[p] == 0 or th[off[p]] != v or avail[p] != s:
                    continue  # out of date; a current token is in the heap
                tok_task[p] = -1
                if rn[p] > 1:
                    _ripe_pop(th, off[p], rn[p], tiebreak)
                rn[p] -= 1
                marked[p] = True
                touched[n_touched] = p
                n_touched += 1
            wk = wait_kind[v]
            if wk != NONE and not resolved[v]:
                resolved[v] = True
                n_s = 0
                if wk == STREAM:
                    streams[0] = wait_target[v]
                    n_s = 1
                else:
                    wt = wait_target[v]
                    ri = rank_index[_wrap(wt, n_ri)] if wt < n_ri else -1
                    if ri >= 0:
                        for k in range(rank_streams_ptr[ri], rank_streams_ptr[ri + 1]):
                            streams[n_s] = rank_streams[k]
                            n_s += 1
                for i in range(n_s):
                    sp = streams[i]
                    if sp < 0:  # the reference's index -1 finds nothing and moves nothing
                        continue
                    lo, hi = stream_ptr[sp], stream_ptr[sp + 1]
                    k = prefix[sp]
                    while k < hi and enq[stream_ops[k]] <= s:
                        k += 1
                    prefix[sp] = k
                    if k <= lo:
                        continue
                    t = stream_ops[k - 1]
                    if done[t]:
                        earliest[v] = _pymax(earliest[v], end[t])
                    else:
                        pending[v] += 1
                        rec_task[n_rec] = v
                        rec_next[n_rec] = -1
                        rec_live[n_rec] = True
                        if last[t] > 0:
                            rec_next[last[t] - 1] = n_rec
                        else:
                            first[t] = n_rec + 1
                        last[t] = n_rec + 1
                        n_rec += 1
                        n_live += 1
                if pending[v] > 0 or earliest[v] > s:
                    if pending[v] == 0:
                        ready[n_ready] = v
                        n_ready += 1
                    continue
            start[v] = s
            f = s + dur[v]
            if floor[v] > f:
                f = floor[v]
            end[v] = f
            done[v] = True
            avail[p] = f
            if rn[p] > 0 and not marked[p]:
                marked[p] = True
                touched[n_touched] = p
                n_touched += 1
            for k in range(out_ptr[v], out_ptr[v + 1]):
                c = out_dst[k]
                t = f + out_lag[k]
                if t > earliest[c]:
                    earliest[c] = t
                if out_launch[k] and f < enq[c]:
                    enq[c] = f
                indeg[c] -= 1
                if indeg[c] == 0:
                    ready[n_ready] = c
                    n_ready += 1
            if n_live > 0:
                rec = first[v] - 1
                first[v] = 0
                while rec >= 0:
                    if rec_live[rec]:
                        rec_live[rec] = False
                        n_live -= 1
                        w = rec_task[rec]
                        if f > earliest[w]:
                            earliest[w] = f
                        pending[w] -= 1
                        if pending[w] == 0:
                            ready[n_ready] = w
                            n_ready += 1
                    rec = rec_next[rec]
    for v in range(n):
        if not done[v]:
            start[v] = np.nan
            end[v] = np.nan
    return start, end, done, abandoned


def _args(a: SimArrays) -> tuple:
    """The SimArrays fields as contiguous arrays of the dtypes the core is compiled for."""
    i64, f64 = np.int64, np.float64
    c = np.ascontiguousarray
    return (int(a.n), c(a.proc, i64), c(a.dur, f64), c(a.release, f64), c(a.tiebreak, f64),
            c(a.out_ptr, i64), c(a.out_dst, i64), c(a.out_lag, f64), c(a.out_launch, np.bool_),
            c(a.indeg, i64), c(a.wait_kind, i64), c(a.wait_target, i64), c(a.is_gpu, np.bool_),
            c(a.stream_ptr, i64), c(a.stream_ops, i64), c(a.rank_streams_ptr, i64),
            c(a.rank_streams, i64), c(a.rank_index, i64), int(a.n_procs),
            np.full(int(a.n), -np.inf) if a.floor is None else c(a.floor, f64))


def _carve(n_items: list[tuple[int, type]], zeroed: bool) -> list[np.ndarray]:
    """Arrays of the given (length, dtype) as views into one numpy allocation: one large
    block gets huge pages however the allocator's state happens to be (many separate
    sub-2 MB arrays would each take a 4 KB page fault per page on first touch)."""
    sizes = [(-(-length * np.dtype(dt).itemsize // 8)) * 8 for length, dt in n_items]  # 8-byte aligned
    block = (np.zeros if zeroed else np.empty)(max(1, sum(sizes)), dtype=np.uint8)
    out, at = [], 0
    for (length, dt), size in zip(n_items, sizes):
        out.append(block[at:at + length * np.dtype(dt).itemsize].view(dt))
        at += size
    return out


def _workspace(n: int) -> tuple:
    """Per-task arrays, allocated by numpy. Touched by every step, as views into two blocks:
    start, end, done (the results); earliest start, unmet in-degree, enqueue time, has a
    launch edge in. Touched by syncs only, as separate np.zeros (pages zero-filled by the OS
    on first use): resolved, unfinished targets of a parked sync, 1 + first / last waiter
    record of a target task (0: none)."""
    f64, i32, i64, b = np.float64, np.int32, np.int64, np.bool_
    start, end, earliest, enq, indeg = _carve([(n, f64), (n, f64), (n, f64), (n, f64), (n, i32)], zeroed=False)
    done, has_launch_in = _carve([(n, b), (n, b)], zeroed=True)
    z = np.zeros
    return (start, end, done, earliest, indeg, enq, has_launch_in, z(n, dtype=b), z(n, dtype=i64),
            z(n, dtype=i64), z(n, dtype=i64))


def simulate_compiled(a: SimArrays) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Returns (start, end, done, abandoned) exactly as `simulate_reference` does."""
    start, end, done, abandoned = _core(*_args(a), *_workspace(int(a.n)))
    return start, end, done, int(abandoned)


@njit(cache=True)
def _longest_path(n, dur, release, floor, out_ptr, out_dst, out_lag, indeg0, finish, earliest, indeg, queue):
    for v in range(n):
        r = release[v]
        earliest[v] = r if np.isfinite(r) else -np.inf
        indeg[v] = indeg0[v]
        finish[v] = np.nan
    tail = 0
    for v in range(n):
        if indeg[v] == 0:
            queue[tail] = v
            tail += 1
    head = 0
    while head < tail:
        v = queue[head]
        head += 1
        f = max(earliest[v] + dur[v], floor[v])
        finish[v] = f
        for k in range(out_ptr[v], out_ptr[v + 1]):
            c = out_dst[k]
            t = f + out_lag[k]
            if t > earliest[c]:
                earliest[c] = t
            indeg[c] -= 1
            if indeg[c] == 0:
                queue[tail] = c
                tail += 1
    return finish


def longest_path_bound(a: SimArrays) -> np.ndarray:
    """Longest-path finish of every task (NaN on a cycle): one topological pass, no processors.
    Its work arrays are allocated as the replay's are."""
    c = np.ascontiguousarray
    n = int(a.n)
    work = _carve([(n, np.float64), (n, np.float64), (n, np.int32), (n, np.int64)], zeroed=False)
    floor = np.full(n, -np.inf) if a.floor is None else c(a.floor, np.float64)
    return _longest_path(n, c(a.dur, np.float64), c(a.release, np.float64), floor, c(a.out_ptr, np.int64),
                         c(a.out_dst, np.int64), c(a.out_lag, np.float64), c(a.indeg, np.int64), *work)
