"""Hostile arguments to the replay core and the walks: a ValueError or TypeError naming the argument,
never a wild read or write (what a fuzz campaign found, and the checks that make the C kernels
defend themselves).

Each reproducer below was a memory error or undefined behaviour on the build before the checks:
items 6 a heap-buffer-overflow WRITE in simulate.c (`rec_task[n_rec] = v`; the -O3 build aborted
with heap corruption at 5,000 streams), 7 a signed int32 overflow in walks.c / simulate.c, 9 a
numpy error (negative dimensions, MemoryError) before any check. fuzz/README.md says how to see
them under AddressSanitizer. The calls go through both the Python wrappers and `lumos._kernels`
directly, whose checks must hold on their own.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from lumos import jit
from lumos.analysis.critical_path import critical_path, critical_path_reference
from lumos.analysis.critical_walk import walk
from lumos.graph import EdgeClass, TaskKind, WaitKind
from lumos.sim import prepare
from lumos.sim.arrays import SimArrays
from lumos.sim.compiled import _args, _workspace, longest_path_bound, simulate_compiled
from lumos.sim.reference import simulate_reference

from ..graphgen import graph_of

CPU, GPU = TaskKind.CPU, TaskKind.GPU
K = jit.kernels()


def _streams_graph(n_streams: int) -> SimArrays:
    """Rank 0 with `n_streams` streams, one kernel on each (released at 10, no launcher), and a
    device sync on thread 0 at 0 that waits for all of them: one waiter record per stream."""
    kind = [GPU] * n_streams + [CPU]
    proc = list(range(1, n_streams + 1)) + [0]
    g = graph_of(kind, proc, [5.0] * n_streams + [1.0], [], [CPU] + [GPU] * n_streams,
                 release=[10.0] * n_streams + [0.0], ts=[1.0] * n_streams + [0.0],
                 wait_kind=[0] * n_streams + [WaitKind.DEVICE], wait_target=[-1] * n_streams + [0])
    return prepare(g)


def _small() -> SimArrays:
    """Thread 0: launch (t0), stream sync (t1), after (t2); stream 1: kernel (t3)."""
    g = graph_of([CPU, CPU, CPU, GPU], [0, 0, 0, 1], [2, 1, 1, 10],
                 [(0, 1, EdgeClass.INTRA_THREAD), (1, 2, EdgeClass.INTRA_THREAD), (0, 3, EdgeClass.LAUNCH, 1.0)],
                 [CPU, GPU], wait_kind=[0, WaitKind.STREAM, 0, 0], wait_target=[-1, 1, -1, -1])
    return prepare(g)


def _both_refuse(a: SimArrays, exc, match: str) -> None:
    """The compiled core (Python checks, then the C checks) and the reference refuse `a` alike."""
    with pytest.raises(exc, match=match):
        simulate_compiled(a)
    with pytest.raises(exc, match=match):
        simulate_reference(a)


def _direct(a: SimArrays, **work_dtypes):
    """lumos._kernels.simulate on `a` with no Python check in between; separate work arrays."""
    args = list(_args(a))
    work = [np.array(w) for w in _workspace(int(a.n))]   # copies: each its own allocation
    for i, dt in work_dtypes.items():
        work[int(i)] = np.zeros(int(a.n), dtype=dt)
    return K.simulate(*args, *work)


# --- item 6: waiter records sized from what the checks let through -----------------------------

def test_the_reproducers_run_when_well_formed():
    a = _streams_graph(5000)
    start, end, done, abandoned = simulate_compiled(a)
    assert done.all() and abandoned == 0 and start[-1] == 15.0 and end[-1] == 16.0  # waited for all 5000 kernels
    ref = simulate_reference(a)
    assert np.array_equal(ref[0], start) and np.array_equal(ref[1], end)


@pytest.mark.parametrize("kind", [3, -1, 7, 2**40])
def test_a_wait_kind_outside_0_1_2_is_refused(kind):
    a = _streams_graph(5000)
    a.wait_kind[-1] = kind
    _both_refuse(a, ValueError, r"wait_kind\[5000\] = %d is not 0, 1 or 2" % kind)
    with pytest.raises(ValueError, match=r"lumos._kernels.simulate: wait_kind\[5000\]"):
        _direct(a)


def test_a_rank_streams_ptr_that_goes_down_is_refused():
    a = _streams_graph(5000)
    # a second device sync, on rank 1, whose row of rank_streams_ptr goes back to 0: the old count of
    # waiter records was 5000 - 5000 = 0 while the first sync registered 5000
    n = a.n + 1
    cat = np.concatenate
    b = dataclasses.replace(
        a, n=n, proc=cat([a.proc, [0]]), dur=cat([a.dur, [1.0]]), release=cat([a.release, [0.0]]),
        tiebreak=cat([a.tiebreak, [0.5]]), out_ptr=np.zeros(n + 1, np.int64), indeg=np.zeros(n, np.int64),
        wait_kind=cat([a.wait_kind, [2]]), wait_target=cat([a.wait_target, [1]]), is_gpu=cat([a.is_gpu, [False]]),
        rank_streams_ptr=np.array([0, 5000, 0], np.int64), rank_index=np.array([0, 1, -1], np.int64))
    _both_refuse(b, ValueError, r"rank_streams_ptr is not non-decreasing")
    with pytest.raises(ValueError, match=r"lumos._kernels.simulate: rank_streams_ptr is not non-decreasing"):
        _direct(b)


@pytest.mark.parametrize("field, value, match", [
    ("out_ptr", np.array([0, 2, 1, 3, 3]), r"out_ptr is not non-decreasing"),
    ("out_ptr", np.array([0, 1, 2, 3, 4]), r"out_ptr\[4\] = 4 outside \[0, 3\]"),
    ("stream_ptr", np.array([1, 0, 1]), r"stream_ptr is not non-decreasing"),
    ("stream_ptr", np.array([0, 0, 2]), r"stream_ptr\[2\] = 2 outside \[0, 1\]"),
    ("rank_streams_ptr", np.array([0, 2]), r"rank_streams_ptr\[1\] = 2 outside \[0, 1\]"),
    ("proc", np.array([0, 0, 2, 1]), r"proc\[2\] = 2 outside \[0, 2\)"),
    ("out_dst", np.array([1, 2, 4]), r"out_dst\[2\] = 4 outside \[0, 4\)"),
    ("stream_ops", np.array([-1]), r"stream_ops\[0\] = -1 outside \[0, 4\)"),
    ("rank_streams", np.array([2]), r"rank_streams\[0\] = 2 outside \[-1, 2\)"),
    ("rank_index", np.array([1, -1]), r"rank_index\[0\] = 1 outside \[-1, 1\)"),
    ("wait_target", np.array([-1, 2, -1, -1]), r"wait_target\[1\] = 2 is not a stream processor"),
    ("wait_target", np.array([-1, -2, -1, -1]), r"wait_target\[1\] = -2 is not a stream processor"),
])
def test_ids_and_pointers_outside_their_tables_are_refused(field, value, match):
    a = _small()
    a = dataclasses.replace(a, **{field: value.astype(np.int64)})
    _both_refuse(a, ValueError, match)
    with pytest.raises(ValueError, match=match):
        _direct(a)


def test_a_device_wait_on_rank_minus_one_waits_for_nothing_and_below_is_refused():
    a = _streams_graph(3)
    a.wait_target[-1] = -1
    ref, comp = simulate_reference(a), simulate_compiled(a)
    assert comp[1][-1] == ref[1][-1] == 1.0   # ran at 0, waited for nothing
    a.wait_target[-1] = -2
    _both_refuse(a, ValueError, r"wait_target\[3\] = -2 is not a rank")


# --- item 7: in-degrees are 64-bit and checked ------------------------------------------------

@pytest.mark.parametrize("value", [-1, -2**31, 2**32, 2**32 + 1, 4])
def test_an_in_degree_outside_0_to_edges_is_refused(value):
    a = _small()   # 3 edges
    a.indeg[2] = value
    _both_refuse(a, ValueError, r"indeg\[2\] = %d outside \[0, 4\)" % value)
    with pytest.raises(ValueError, match=r"indeg\[2\]"):
        longest_path_bound(a)
    with pytest.raises(ValueError, match=r"indeg\[2\]"):
        _direct(a)


def test_the_work_in_degrees_are_int64_and_an_int32_one_is_refused():
    a = _small()
    assert _workspace(4)[4].dtype == np.int64
    with pytest.raises(TypeError, match=r"indeg_work must be a contiguous int64 array \(format i\)"):
        _direct(a, **{"4": np.int32})


def test_longest_path_checks_its_arguments():
    a = _small()
    n = a.n
    args = [n, a.dur, a.release, np.full(n, -np.inf), a.out_ptr, a.out_dst, a.out_lag, a.indeg]

    def work():
        return [np.empty(n), np.empty(n), np.empty(n, np.int64), np.empty(n, np.int64)]

    assert np.array_equal(longest_path_bound(a), [2.0, 3.0, 4.0, 13.0])
    bad = list(args)
    bad[4] = np.array([0, 3, 1, 3, 3], np.int64)
    with pytest.raises(ValueError, match=r"longest_path: out_ptr is not non-decreasing"):
        K.longest_path(*bad, *work())
    with pytest.raises(ValueError, match=r"longest_path: n = -1 is outside"):
        K.longest_path(-1, *args[1:], *work())
    with pytest.raises(ValueError, match=r"longest_path: dur has 4 items, not n = 5"):
        K.longest_path(5, *args[1:], *work())
    w = work()
    w[3] = w[2]   # the queue is the in-degree array
    with pytest.raises(ValueError, match=r"indeg_work shares memory with queue"):
        K.longest_path(*args, *w)
    w = work()
    w[0] = args[1]   # writing into dur
    with pytest.raises(TypeError, match=r"finish must be a contiguous writable float64"):
        K.longest_path(*args, *w[:0], args[1][::-1], *w[1:])


# --- item 9: n and n_procs checked before anything is allocated ---------------------------------

@pytest.mark.parametrize("n, exc, match", [
    (-1, ValueError, r"SimArrays.n = -1 is negative"),
    (2**40, ValueError, r"SimArrays.proc has 4 items, not n = 1099511627776"),
    (5, ValueError, r"SimArrays.proc has 4 items, not n = 5"),
    (2.5, TypeError, r"SimArrays.n must be an integer, not float"),
    ("4", TypeError, r"SimArrays.n must be an integer, not str"),
])
def test_n_is_checked_before_any_allocation(n, exc, match):
    a = dataclasses.replace(_small(), n=n)
    _both_refuse(a, exc, match)
    with pytest.raises(exc, match=match):
        longest_path_bound(a)


@pytest.mark.parametrize("n_procs, exc, match", [
    (-3, ValueError, r"SimArrays.n_procs = -3 is negative"),
    (2**40, ValueError, r"stream_ptr has 3 items, not n_procs \+ 1"),   # the C code's check, or the reference's
    (None, TypeError, r"SimArrays.n_procs must be an integer, not NoneType"),
])
def test_n_procs_is_checked(n_procs, exc, match):
    _both_refuse(dataclasses.replace(_small(), n_procs=n_procs), exc, match)


@pytest.mark.parametrize("at, value, exc, match", [
    (0, -1, ValueError, r"simulate: n = -1 is outside \[0, "),
    (0, 2**40, ValueError, r"simulate: proc has 4 items, not n = 1099511627776"),
    (0, 2**70, ValueError, r"simulate: n is outside \[0, 9223372036854775807\] \(beyond 64 bits\)"),
    (0, "4", TypeError, r"simulate: n must be an integer, not str"),
    (0, 4.0, TypeError, r"simulate: n must be an integer, not float"),
    (18, -1, ValueError, r"simulate: n_procs = -1 is outside \[0, "),
    (18, 2**40, ValueError, r"simulate: stream_ptr has 3 items, not n_procs \+ 1 \(n_procs = 1099511627776\)"),
    (18, None, TypeError, r"simulate: n_procs must be an integer, not NoneType"),
])
def test_the_kernel_checks_its_counts_itself(at, value, exc, match):
    args = list(_args(_small()))
    args[at] = value
    with pytest.raises(exc, match=match):
        K.simulate(*args, *_workspace(4))


# --- types, shapes, lengths and shared memory ---------------------------------------------------

@pytest.mark.parametrize("field, value, exc, match", [
    ("proc", np.array([0.0, 0.5, 0.0, 1.0]), TypeError, r"SimArrays.proc must hold integers \(int64\), not float64"),
    ("proc", np.zeros((2, 2), np.int64), ValueError, r"SimArrays.proc must be one-dimensional, not of shape \(2, 2\)"),
    ("proc", np.array([0, 0, 0, 2**64 - 1], np.uint64), TypeError, r"SimArrays.proc must hold integers"),
    ("dur", np.array(["a", "b", "c", "d"]), TypeError, r"SimArrays.dur must hold numbers"),
    ("dur", None, TypeError, r"SimArrays.dur must hold numbers \(float64\), not object"),
    ("out_launch", np.array([1, 0, 0]), TypeError, r"SimArrays.out_launch must hold booleans"),
    ("out_lag", np.zeros(2), ValueError, r"out_lag has 2 items, not len\(out_dst\) = 3"),
    ("floor", np.zeros(3), ValueError, r"floor has 3 items, not n = 4"),
    ("rank_streams_ptr", np.zeros(0, np.int64), ValueError, r"rank_streams_ptr is empty"),
])
def test_a_field_of_the_wrong_type_or_shape_is_named(field, value, exc, match):
    # (a length is the C code's check on the compiled path, `arrays.validate`'s on the reference's)
    _both_refuse(dataclasses.replace(_small(), **{field: value}), exc, match)


def test_safe_casts_give_the_same_schedule():
    a = _small()
    b = dataclasses.replace(a, proc=a.proc.astype(np.int32), dur=a.dur.astype(np.float32), indeg=list(a.indeg),
                            tiebreak=a.tiebreak[::-1].copy()[::-1])
    for run in (simulate_compiled, simulate_reference):
        r, s = run(a), run(b)
        assert all(np.array_equal(x, y) for x, y in zip(r[:3], s[:3]))


def test_the_kernel_names_a_wrong_array_itself():
    a = _small()
    args = list(_args(a))
    args[2] = args[2].astype(np.float32)
    with pytest.raises(TypeError, match=r"dur must be a contiguous float64 array"):
        K.simulate(*args, *_workspace(4))
    args = list(_args(a))
    args[7] = np.zeros(2)
    with pytest.raises(ValueError, match=r"simulate: out_lag has 2 items, not len\(out_dst\) = 3"):
        K.simulate(*args, *_workspace(4))
    args = list(_args(a))
    args[5] = np.zeros(4, np.int64)
    with pytest.raises(ValueError, match=r"simulate: out_ptr has 4 items, not n \+ 1 = 5"):
        K.simulate(*args, *_workspace(4))
    with pytest.raises(TypeError, match=r"takes exactly 26 arguments"):
        K.simulate(*_args(a))


@pytest.mark.parametrize("out, other", [(20, 21), (21, 23), (23, 25), (25, 20)])
def test_outputs_that_share_memory_are_refused(out, other):
    a = _small()
    args = list(_args(a))
    work = [np.array(w) for w in _workspace(4)]
    work[out - 20] = work[other - 20]
    names = {20: "start", 21: "end", 23: "earliest", 25: "enq"}
    a_, b_ = sorted((out, other))   # named in the order of the arguments
    with pytest.raises(ValueError, match=rf"simulate: {names[a_]} shares memory with {names[b_]}"):
        K.simulate(*args, *work)


def test_an_output_over_an_input_is_refused():
    a = _small()
    args = list(_args(a))
    work = [np.array(w) for w in _workspace(4)]
    work[4] = args[1]   # the in-degrees over proc: the core's writes would move tasks off their processors
    with pytest.raises(ValueError, match=r"simulate: indeg_work shares memory with proc"):
        K.simulate(*args, *work)
    block = np.zeros(8, np.int64)   # overlapping views of one array
    args[1], work[4] = block[:4], block[2:6]
    with pytest.raises(ValueError, match=r"simulate: indeg_work shares memory with proc"):
        K.simulate(*args, *work)


def test_what_the_outputs_held_before_does_not_matter():
    # found by the fuzzer (fuzz/README.md): the waiter lists were work arrays the caller passed, and
    # the core trusted them to start zeroed: `first` holding 2**62 was a READ far out of bounds
    # (SEGV under AddressSanitizer). The core now allocates every array it needs zeroed itself.
    a = _streams_graph(3)
    clean = simulate_compiled(a)
    args = _args(a)
    n = a.n
    work = [np.full(n, np.nan), np.full(n, -1.0), np.ones(n, bool), np.full(n, 1e300),
            np.full(n, 2**62, np.int64), np.full(n, -np.inf)]
    assert K.simulate(*args, *work) == clean[3]
    assert all(np.array_equal(x, y, equal_nan=True) for x, y in zip(clean[:3], work[:3]))


# --- the critical-path walk and the call-tree walk ------------------------------------------------

def _walk_args():
    """walk()'s arguments for the small graph's replayed timeline, as critical_path makes them."""
    from lumos.analysis import critical_path as cp
    from lumos.sim import simulate

    g = graph_of([CPU, CPU, CPU, GPU], [0, 0, 0, 1], [2, 1, 1, 10],
                 [(0, 1, EdgeClass.INTRA_THREAD), (1, 2, EdgeClass.INTRA_THREAD), (0, 3, EdgeClass.LAUNCH, 1.0)],
                 [CPU, GPU], wait_kind=[0, WaitKind.STREAM, 0, 0], wait_target=[-1, 1, -1, -1])
    s = simulate(g)
    in_ptr, in_src, in_lag, prev = cp._candidates(g, s.start, s.end)
    s_ptr, s_ops, s_end = cp._stream_csr(g, s.end)
    r_ptr, r_procs = np.array([0, 1], np.int64), np.array([1], np.int64)
    args = [2, s.start, s.end, in_ptr, in_src, in_lag, prev, g.wait_kind.astype(np.int64),
            g.wait_target.astype(np.int64), s_ptr, s_ops, s_end, r_ptr, r_procs, 0.0]
    assert np.array_equal(critical_path(g, s.start, s.end), critical_path_reference(g, s.start, s.end))
    return args


@pytest.mark.parametrize("at, value, exc, match", [
    (0, -1, ValueError, r"walk: v = -1 is outside"),
    (0, 4, ValueError, r"walk: v = 4 is not a task"),
    (0, "2", TypeError, r"walk: v must be an integer"),
    (14, "x", TypeError, r"walk: tol must be a real number, not str"),
    (7, np.array([0, 5, 0, 0]), ValueError, r"walk: wait_kind\[1\] = 5 is not 0, 1 or 2"),
    (8, np.array([-1, -3, -1, -1]), ValueError, r"walk: wait_target\[1\] = -3"),
    (3, np.array([0, 1, 0, 2, 3]), ValueError, r"walk: in_ptr is not non-decreasing"),
    (3, np.array([0, 0, 1, 2, 9]), ValueError, r"walk: in_ptr\[4\] = 9 outside \[0, 3\]"),
    (9, np.array([0, 1, 0]), ValueError, r"walk: s_ptr is not non-decreasing"),
    (12, np.array([1, 0]), ValueError, r"walk: r_ptr is not non-decreasing"),
    (12, np.array([0, 2]), ValueError, r"walk: r_ptr\[1\] = 2 outside \[0, 1\]"),
    (13, np.array([2]), ValueError, r"r_procs\[0\] = 2 outside \[0, 2\)"),
    (4, np.array([0, 1, 7]), ValueError, r"in_src\[2\] = 7 outside \[0, 4\)"),
    (6, np.array([-1, 0, 1, 9]), ValueError, r"prev_on_proc\[3\] = 9 outside \[-1, 4\)"),
    (2, np.zeros(3), ValueError, r"walk: end has 3 items, not len\(start\) = 4"),
    (4, np.array([0.0, 1.0, 2.0]), TypeError, r"in_src must be a contiguous int64 array"),
])
def test_walk_checks_its_arguments(at, value, exc, match):
    args = _walk_args()
    assert len(walk(*args)) >= 1
    args[at] = value.astype(np.int64) if isinstance(value, np.ndarray) and value.dtype.kind == "i" else value
    with pytest.raises(exc, match=match):
        walk(*args)


def test_walk_refuses_unsorted_stream_ends():
    args = _walk_args()
    args[9], args[10], args[11] = np.array([0, 0, 2], np.int64), np.array([3, 0], np.int64), np.array([13.0, 2.0])
    with pytest.raises(ValueError, match=r"walk: s_end is not sorted \(NaN last\) within stream 1"):
        walk(*args)
    args[11] = np.array([np.nan, 2.0])
    with pytest.raises(ValueError, match=r"s_end is not sorted"):
        walk(*args)
    args[11] = np.array([2.0, np.nan])   # NaN last: as numpy sorts
    walk(*args)


def test_walk_refuses_a_path_buffer_over_an_input():
    args = _walk_args()
    with pytest.raises(ValueError, match=r"walk: path shares memory with in_ptr"):
        K.walk(*args, args[3])


def test_leaf_walk_names_its_arguments():
    ts, end = np.array([0.0, 1.0, 2.0]), np.array([5.0, 2.0, 3.0])
    rt, keep = np.zeros(3, bool), np.zeros(3, bool)
    K.leaf_walk(ts, end, rt, 0.0, keep)
    assert keep.tolist() == [False, True, True]
    with pytest.raises(ValueError, match=r"leaf_walk: arrays differ in length: is_runtime has 2 items, not "
                                         r"len\(ts\) = 3"):
        K.leaf_walk(ts, end, rt[:2], 0.0, keep)
    with pytest.raises(ValueError, match=r"leaf_walk: keep shares memory with is_runtime"):
        K.leaf_walk(ts, end, rt, 0.0, rt)


def test_prepare_refuses_a_negative_rank():
    g = graph_of([CPU, GPU], [0, 1], [1, 1], [], [CPU, GPU], proc_rank=[0, -7])
    with pytest.raises(ValueError, match=r"graph.proc_rank holds rank -7"):
        prepare(g)
