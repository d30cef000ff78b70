"""Algorithm 1 compiled (C, `lumos/kernels/simulate.c`): the same schedule as `reference.py`, bit for bit.

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
  inner loop.
- Stream visibility is the FIFO-enqueued prefix of each stream (a pointer that
  only moves forward); an unfinished sync target parks the task on a list of
  waiters kept in registration order; when nothing can run but syncs are
  parked, the earliest-issued one is let go and counted, as in the reference.

Memory: the per-task arrays every step touches are views into one numpy
allocation (huge pages: their first touch is several times cheaper than that
of many separate small ones); arrays only syncs touch are separate np.zeros
(the OS fills pages on first use), and the ripe heaps, the pick heap and the
ready list, touched at a few places, are allocated inside the C code.

The C code was written from this module's numba version (in the history before
the start-up work against HTA moved it to C), line by line; `tests/sim/test_compiled.py` holds it to the
reference.

`longest_path_bound` is the benchmark's yardstick: one compiled pass in
topological order (Kahn) computing each task's longest-path finish over the
same arrays, with no processors and no run-time dependencies (`walks.c`).
"""

from __future__ import annotations

import numpy as np

from lumos import jit

from .arrays import SimArrays


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
    work = _workspace(int(a.n))
    abandoned = jit.kernels().simulate(*_args(a), *work)
    start, end, done = work[:3]
    return start, end, done, int(abandoned)


def longest_path_bound(a: SimArrays) -> np.ndarray:
    """Longest-path finish of every task (NaN on a cycle): one topological pass, no processors.
    Its work arrays are allocated as the replay's are."""
    c = np.ascontiguousarray
    n = int(a.n)
    work = _carve([(n, np.float64), (n, np.float64), (n, np.int32), (n, np.int64)], zeroed=False)
    floor = np.full(n, -np.inf) if a.floor is None else c(a.floor, np.float64)
    jit.kernels().longest_path(n, c(a.dur, np.float64), c(a.release, np.float64), floor, c(a.out_ptr, np.int64),
                               c(a.out_dst, np.int64), c(a.out_lag, np.float64), c(a.indeg, np.int64), *work)
    return work[0]
