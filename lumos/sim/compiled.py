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
of many separate small ones); the arrays that must start zeroed (launch flags,
and those only syncs touch) are allocated inside the C code with calloc (the OS
fills pages on first use), as are the ripe heaps, the pick heap and the ready
list, touched at a few places.

The C code was written from this module's numba version (in the history before
the start-up work against HTA moved it to C), line by line; `tests/sim/test_compiled.py` holds it to the
reference.

Malformed arrays (a hand-built SimArrays, or a direct call of `lumos._kernels.simulate`) are an
error naming the argument, never a wild read or write: `arrays.core_args` checks the types and
`n` before anything is allocated, and the C code checks every length and value before the core
runs (ids within their tables, pointer arrays non-decreasing, in-degrees within [0, edges], wait
kinds and targets, outputs sharing no memory); its counts are 64-bit. `arrays.validate` makes the
same checks in numpy for the reference, so both refuse the same arrays
(tests/sim/test_hostile_kernels.py; fuzz/README.md).

`longest_path_bound` is the benchmark's yardstick: one compiled pass in
topological order (Kahn) computing each task's longest-path finish over the
same arrays, with no processors and no run-time dependencies (`walks.c`).
"""

from __future__ import annotations

import numpy as np

from lumos import jit

from .arrays import SimArrays, core_args


def _args(a: SimArrays) -> tuple:
    """The SimArrays fields as contiguous arrays of the dtypes the core is compiled for, after the
    checks of `arrays.core_args` (types, `n`: a TypeError or ValueError naming the field, and nothing
    allocated for a bad `n`); the C code checks every length and value before it runs (simulate.c)."""
    args = core_args(a)
    return args if args[-1] is not None else (*args[:-1], np.full(args[0], -np.inf))


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
    """Per-task arrays touched by every step, allocated by numpy as views into one block: start,
    end, done (the results); earliest start, unmet in-degree, enqueue time. The C code sets each
    item before it reads it (done included), so their contents do not matter; the arrays that
    must start zeroed (has a launch edge in, and those only syncs touch) it allocates itself."""
    f64, i64, b = np.float64, np.int64, np.bool_
    start, end, earliest, enq, indeg, done = _carve([(n, f64), (n, f64), (n, f64), (n, f64), (n, i64), (n, b)],
                                                    zeroed=False)
    return start, end, done, earliest, indeg, enq


def simulate_compiled(a: SimArrays) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Returns (start, end, done, abandoned) exactly as `simulate_reference` does; a malformed `a` is a
    TypeError or ValueError naming the field (`arrays.core_args` here, the rest in simulate.c)."""
    args = _args(a)
    work = _workspace(args[0])
    abandoned = jit.kernels().simulate(*args, *work)
    start, end, done = work[:3]
    return start, end, done, int(abandoned)


def longest_path_bound(a: SimArrays) -> np.ndarray:
    """Longest-path finish of every task (NaN on a cycle): one topological pass, no processors.
    Its work arrays are allocated as the replay's are."""
    n, _, dur, release, _, out_ptr, out_dst, out_lag, _, indeg, *_, floor = core_args(a)
    work = _carve([(n, np.float64), (n, np.float64), (n, np.int64), (n, np.int64)], zeroed=False)
    floor = np.full(n, -np.inf) if floor is None else floor
    jit.kernels().longest_path(n, dur, release, floor, out_ptr, out_dst, out_lag, indeg, *work)
    return work[0]
