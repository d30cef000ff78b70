"""Flatten a Graph into the plain arrays the replay cores read (CSR adjacency).

Both the pure-Python reference and the compiled core take exactly these
arrays, which is what lets the tests hold their schedules equal.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, fields

import numpy as np

from lumos.graph.model import EdgeClass, Graph, TaskKind
from lumos.lean_numpy import unique


@dataclass
class SimArrays:
    n: int
    proc: np.ndarray          # int64
    dur: np.ndarray           # float64
    release: np.ndarray       # float64 (-inf: none)
    tiebreak: np.ndarray      # float64 measured start, orders equal keys
    out_ptr: np.ndarray       # int64, CSR over sources
    out_dst: np.ndarray       # int64
    out_lag: np.ndarray       # float64
    out_launch: np.ndarray    # bool: a launch edge (enqueues its target on a stream)
    indeg: np.ndarray         # int64
    wait_kind: np.ndarray     # int64
    wait_target: np.ndarray   # int64
    is_gpu: np.ndarray        # bool
    stream_ptr: np.ndarray    # int64, CSR over processors: GPU ops by stream position
    stream_ops: np.ndarray    # int64
    rank_streams_ptr: np.ndarray  # int64, CSR over ranks: stream processors of each rank
    rank_streams: np.ndarray      # int64
    rank_index: np.ndarray        # int64: rank id -> row in rank_streams_ptr (-1 if none)
    n_procs: int
    floor: np.ndarray | None = None  # float64 earliest end per task (-inf: none); None: no floors


# --- what a SimArrays must hold: both cores check it before they run -------------------------
#
# The compiled core (lumos/kernels/simulate.c) reads these arrays with no bounds of its own, so a
# malformed SimArrays (a hand-built one, or one from a graph that is not what it claims) must be
# an error naming the field, never a wild read or write. `checked` does the checks of O(1) cost
# (types, dimensions, lengths) for both cores; the checks of values (ids within their tables,
# pointer arrays non-decreasing, in-degrees, wait kinds and targets) are the C code's own for the
# compiled core, at C speed, and `validate`'s, the same in numpy, for the reference. prepare()
# makes arrays that pass them all.

_I64, _F64, _BOOL = np.dtype(np.int64), np.dtype(np.float64), np.dtype(np.bool_)
DTYPES = {"proc": _I64, "dur": _F64, "release": _F64, "tiebreak": _F64, "out_ptr": _I64, "out_dst": _I64,
          "out_lag": _F64, "out_launch": _BOOL, "indeg": _I64, "wait_kind": _I64, "wait_target": _I64,
          "is_gpu": _BOOL, "stream_ptr": _I64, "stream_ops": _I64, "rank_streams_ptr": _I64, "rank_streams": _I64,
          "rank_index": _I64, "floor": _F64}
PER_TASK = ("proc", "dur", "release", "tiebreak", "indeg", "wait_kind", "wait_target", "is_gpu", "floor")
_HOLDS = {_I64: "integers", _F64: "numbers", _BOOL: "booleans"}


def _count(name: str, value) -> int:
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"SimArrays.{name} must be an integer, not {type(value).__name__}") from None
    if v < 0:
        raise ValueError(f"SimArrays.{name} = {v} is negative")
    return v


def _array(name: str, value, dt: np.dtype) -> np.ndarray:
    """`value` as a contiguous one-dimensional array of `dt`, cast only where no value can change."""
    if type(value) is np.ndarray and value.dtype == dt and value.ndim == 1 and value.flags.c_contiguous:
        return value
    try:
        x = np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"SimArrays.{name} must be a one-dimensional array of {_HOLDS[dt]} ({dt}): {exc}") from None
    if x.dtype != dt and (x.size or x.dtype.kind not in "biuf") and not np.can_cast(x.dtype, dt, "safe"):
        raise TypeError(f"SimArrays.{name} must hold {_HOLDS[dt]} ({dt}), not {x.dtype}")
    if x.ndim != 1:
        raise ValueError(f"SimArrays.{name} must be one-dimensional, not of shape {x.shape}")
    return np.ascontiguousarray(x, dt)


def checked(a: SimArrays) -> SimArrays:
    """`a` with every array contiguous and of its dtype (no copy where it already is), after the checks
    of O(1) cost: a TypeError or ValueError naming the field unless the counts are non-negative
    integers, every field a one-dimensional array of (or safely cast to) its dtype, and the lengths
    agree (n per task, n + 1 pointers over tasks, one lag and one launch flag per edge, n_procs + 1
    pointers over processors, at least one over ranks)."""
    if not isinstance(a, SimArrays):
        raise TypeError(f"expected SimArrays, not {type(a).__name__}")
    n, n_procs = _count("n", a.n), _count("n_procs", a.n_procs)
    out = {f.name: getattr(a, f.name) for f in fields(SimArrays)}
    out["n"], out["n_procs"] = n, n_procs
    for name, dt in DTYPES.items():
        if name != "floor" or out[name] is not None:
            out[name] = _array(name, out[name], dt)
    for name in PER_TASK:
        if out[name] is not None and len(out[name]) != n:
            raise ValueError(f"SimArrays.{name} has {len(out[name])} items, not n = {n}")
    n_edges = len(out["out_dst"])
    for name, want, what in (("out_ptr", n + 1, "n + 1"), ("out_lag", n_edges, "len(out_dst)"),
                             ("out_launch", n_edges, "len(out_dst)"), ("stream_ptr", n_procs + 1, "n_procs + 1")):
        if len(out[name]) != want:
            raise ValueError(f"SimArrays.{name} has {len(out[name])} items, not {what} = {want}")
    if not len(out["rank_streams_ptr"]):
        raise ValueError("SimArrays.rank_streams_ptr is empty (it needs a leading 0)")
    return SimArrays(**out)


ARG_FIELDS = ("proc", "dur", "release", "tiebreak", "out_ptr", "out_dst", "out_lag", "out_launch", "indeg",
              "wait_kind", "wait_target", "is_gpu", "stream_ptr", "stream_ops", "rank_streams_ptr", "rank_streams",
              "rank_index")   # the arrays in the order the compiled core takes them
_ARG_DTYPES = tuple(DTYPES[f] for f in ARG_FIELDS)
_get_args = operator.attrgetter(*ARG_FIELDS)


def core_args(a: SimArrays) -> tuple:
    """(n, the ARG_FIELDS arrays, n_procs, floor or None) of `checked(a)`: the compiled core's arguments.
    Where every field already is a contiguous array of its dtype, `n` an int matching len(proc) and
    `n_procs` a non-negative int, the arrays pass as they are (the allocations `n` sizes are then
    bounded by a real array); anything else goes through `checked`. What this lets through
    unchecked (the other lengths, the dimensions, the values) the C code checks before it runs."""
    if type(a) is not SimArrays:
        return _from_checked(checked(a))
    n, floor, c = a.n, a.floor, np.ascontiguousarray
    xs = _get_args(a)
    try:
        out = [c(x, dt) for x, dt in zip(xs, _ARG_DTYPES)]   # the same array where nothing is cast
        if floor is not None:
            floor = c(floor, _F64)
            exact = floor is a.floor
        else:
            exact = True
    except (TypeError, ValueError):
        exact = False
    if exact and type(n) is int and type(a.n_procs) is int and a.n_procs >= 0 and all(map(operator.is_, xs, out)) \
            and n == len(out[0]):
        return (n, *out, a.n_procs, floor)
    return _from_checked(checked(a))


def _from_checked(c: SimArrays) -> tuple:
    return (c.n, *_get_args(c), c.n_procs, c.floor)


def _index(name: str, x: np.ndarray, lo: int, hi: int) -> None:
    bad = np.flatnonzero((x < lo) | (x >= hi))
    if len(bad):
        raise ValueError(f"SimArrays.{name}[{bad[0]}] = {x[bad[0]]} outside [{lo}, {hi})")


def _pointers(name: str, x: np.ndarray, hi: int) -> None:
    bad = np.flatnonzero((x < 0) | (x > hi))
    if len(bad):
        raise ValueError(f"SimArrays.{name}[{bad[0]}] = {x[bad[0]]} outside [0, {hi}]")
    down = np.flatnonzero(x[1:] < x[:-1])
    if len(down):
        k = down[0] + 1
        raise ValueError(f"SimArrays.{name} is not non-decreasing ({name}[{k}] = {x[k]} < {name}[{k - 1}] = "
                         f"{x[k - 1]})")


def validate(a: SimArrays) -> SimArrays:
    """`checked(a)`, then the checks of values the compiled core makes in C (simulate.c), in numpy: a
    ValueError naming the field unless processors, edge targets and stream ops are ids within their
    tables, the pointer arrays (out_ptr, stream_ptr, rank_streams_ptr) are non-decreasing within
    theirs, every in-degree lies in [0, edges], every wait kind is 0 (none), 1 (stream) or 2
    (device) with a target of -1 (nothing) or a stream processor (kind 1) or a rank (kind 2), and
    rank_streams / rank_index name streams / rows or -1."""
    a = checked(a)
    n_edges = len(a.out_dst)
    _index("proc", a.proc, 0, a.n_procs)
    _index("out_dst", a.out_dst, 0, a.n)
    _pointers("out_ptr", a.out_ptr, n_edges)
    _index("indeg", a.indeg, 0, n_edges + 1)
    kind = np.flatnonzero((a.wait_kind != 0) & (a.wait_kind != 1) & (a.wait_kind != 2))
    if len(kind):
        raise ValueError(f"SimArrays.wait_kind[{kind[0]}] = {a.wait_kind[kind[0]]} is not 0, 1 or 2")
    target = np.flatnonzero((a.wait_kind != 0) & ((a.wait_target < -1) | ((a.wait_kind == 1)
                                                                          & (a.wait_target >= a.n_procs))))
    if len(target):
        v = target[0]
        raise ValueError(f"SimArrays.wait_target[{v}] = {a.wait_target[v]} is not a "
                         f"{'stream processor' if a.wait_kind[v] == 1 else 'rank'} (nor -1)")
    _index("stream_ops", a.stream_ops, 0, a.n)
    _pointers("stream_ptr", a.stream_ptr, len(a.stream_ops))
    _pointers("rank_streams_ptr", a.rank_streams_ptr, len(a.rank_streams))
    _index("rank_streams", a.rank_streams, -1, a.n_procs)
    _index("rank_index", a.rank_index, -1, len(a.rank_streams_ptr) - 1)
    return a


def prepare(graph: Graph) -> SimArrays:
    n = graph.n_tasks
    src, dst = graph.src.astype(np.int64), graph.dst.astype(np.int64)
    order = np.argsort(src, kind="stable")
    out_ptr = np.zeros(n + 1, dtype=np.int64)
    np.add.at(out_ptr, src + 1, 1)
    out_ptr = np.cumsum(out_ptr)
    indeg = np.bincount(dst, minlength=n).astype(np.int64)

    proc = graph.proc.astype(np.int64)
    n_procs = graph.n_procs
    gpu = graph.kind == TaskKind.GPU
    # GPU ops per stream, in stream order (stream_pos), for run-time sync resolution
    g = np.flatnonzero(gpu)
    g = g[np.lexsort((graph.stream_pos[g], proc[g]))]
    stream_ptr = np.zeros(n_procs + 1, dtype=np.int64)
    np.add.at(stream_ptr, proc[g] + 1, 1)
    stream_ptr = np.cumsum(stream_ptr)

    stream_procs = np.flatnonzero(graph.proc_kind == TaskKind.GPU)
    ranks = graph.proc_rank[stream_procs].astype(np.int64)
    if min(graph.proc_rank.min(initial=0), graph.rank.min(initial=0)) < 0:   # rank_index is indexed by rank
        field = "proc_rank" if graph.proc_rank.min(initial=0) < 0 else "rank"
        raise ValueError(f"graph.{field} holds rank {int(getattr(graph, field).min())}: ranks are numbered from 0")
    max_rank = int(max(graph.proc_rank.max(initial=0), graph.rank.max(initial=0))) + 1
    rank_index = np.full(max_rank + 1, -1, dtype=np.int64)
    uniq = unique(ranks)
    rank_index[uniq] = np.arange(len(uniq))
    rank_streams_ptr = np.zeros(len(uniq) + 1, dtype=np.int64)
    order_r = np.argsort(ranks, kind="stable")
    np.add.at(rank_streams_ptr, rank_index[ranks] + 1, 1)
    rank_streams_ptr = np.cumsum(rank_streams_ptr)

    return SimArrays(
        n=n, proc=proc, dur=graph.dur.astype(np.float64), release=graph.release.astype(np.float64),
        tiebreak=graph.ts.astype(np.float64), out_ptr=out_ptr, out_dst=dst[order],
        out_lag=graph.lag[order].astype(np.float64), out_launch=(graph.cls[order] == EdgeClass.LAUNCH),
        indeg=indeg, wait_kind=graph.wait_kind.astype(np.int64), wait_target=graph.wait_target.astype(np.int64),
        is_gpu=gpu, stream_ptr=stream_ptr, stream_ops=g, rank_streams_ptr=rank_streams_ptr,
        rank_streams=stream_procs[order_r].astype(np.int64), rank_index=rank_index, n_procs=n_procs,
        floor=None if graph.finish_floor is None else graph.finish_floor.astype(np.float64))
