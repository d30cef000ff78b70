"""The critical path of a timeline: the chain of tasks that set the iteration's end.

Definition (the same for a measured and a replayed timeline, so they compare):
start at the in-step GPU op that ends last; from a task v, step back to the
predecessor u whose constraint ready(u) is latest among those that bind v,
and stop when none binds. The candidates u are
- every in-edge u -> v of the graph, ready(u) = end(u) + lag;
- v's processor predecessor on the timeline (the task before it on the same
  thread or stream, by start), ready(u) = end(u);
- for a stream or device sync, the GPU op on each stream it waits on that
  ended last at or before v's start, ready(u) = end(u).
A candidate binds v when |ready(u) - start(v)| <= tolerance: 1 us on a
measured timeline (clock granularity, and the 1-2 us cross-clock overlaps of
real traces), 0 on a replayed one, where the binding constraint is exactly
the start the simulator computed. Ties go to the later-ending candidate,
then to the higher task id, so the path is deterministic.

Measured paths are walked on the full graph (every edge class, the default
gap threshold): its lags are fitted on the measured timeline, so each task's
binding in-edge is exact there. Paths are compared as sets of trace rows
(`Graph.event`), so a baseline whose tasks are a subset (dPRO keeps GPU ops
only) is scored against the same measured path.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lumos import jit
from lumos.graph.model import Graph, TaskKind, WaitKind

MEASURED_TOLERANCE_US = 1.0
REPLAYED_TOLERANCE_US = 0.0


def _last_op(graph: Graph, end: np.ndarray) -> int:
    """The in-step GPU op that ends last (ties: the highest task id)."""
    cand = np.flatnonzero(graph.in_step & (graph.kind == TaskKind.GPU))
    if not len(cand):
        return -1
    best = cand[end[cand] == end[cand].max()]
    return int(best[-1])


def critical_path(graph: Graph, start: np.ndarray, end: np.ndarray,
                  tolerance_us: float = REPLAYED_TOLERANCE_US) -> np.ndarray:
    """Task ids on the critical path of the timeline (start, end), earliest first.

    The walk is compiled (`critical_walk.walk`) where the kernels are built (`lumos.jit`), else
    `critical_path_reference`: the same rule in plain Python, the definition the tests hold the
    compiled one to.
    """
    if not jit.compiled():
        return critical_path_reference(graph, start, end, tolerance_us)
    from .critical_walk import walk
    v = _last_op(graph, end)
    if v < 0:
        return np.zeros(0, dtype=np.int64)
    in_ptr, in_src, in_lag, prev_on_proc = _candidates(graph, start, end)
    s_ptr, s_ops, s_end = _stream_csr(graph, end)
    # the streams a device wait of rank r waits on: GPU processors of r
    gpu_procs = np.flatnonzero(graph.proc_kind == TaskKind.GPU)
    ranks = graph.proc_rank[gpu_procs].astype(np.int64)
    order = np.argsort(ranks, kind="stable")
    n_rank = int(max(graph.proc_rank.max(initial=0), graph.wait_target.max(initial=0))) + 1
    r_ptr = np.searchsorted(ranks[order], np.arange(n_rank + 1)).astype(np.int64)
    r_procs = gpu_procs[order].astype(np.int64)
    path = walk(int(v), np.asarray(start, np.float64), np.asarray(end, np.float64), in_ptr, in_src, in_lag,
                prev_on_proc, graph.wait_kind.astype(np.int64), graph.wait_target.astype(np.int64),
                s_ptr, s_ops, s_end, r_ptr, r_procs, float(tolerance_us))
    return path[::-1].copy()


def _candidates(graph: Graph, start: np.ndarray, end: np.ndarray):
    """In-edges of each task (CSR by destination) and each task's predecessor on its processor."""
    n = graph.n_tasks
    order = np.argsort(graph.dst, kind="stable")
    in_src = graph.src[order].astype(np.int64)
    in_lag = graph.lag[order].astype(np.float64)
    in_ptr = np.searchsorted(graph.dst[order], np.arange(n + 1)).astype(np.int64)
    by_proc = np.lexsort((np.arange(n), end, start, graph.proc))
    prev_on_proc = np.full(n, -1, dtype=np.int64)
    same = graph.proc[by_proc[1:]] == graph.proc[by_proc[:-1]]
    prev_on_proc[by_proc[1:][same]] = by_proc[:-1][same]
    return in_ptr, in_src, in_lag, prev_on_proc


def _stream_csr(graph: Graph, end: np.ndarray):
    """GPU ops of every processor sorted by end, as (pointer per processor, ops, their ends); empty
    when no task waits at run time."""
    n_proc = graph.n_procs
    if not np.any(graph.wait_kind != WaitKind.NONE):
        return np.zeros(n_proc + 1, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float64)
    gpu = np.flatnonzero(graph.kind == TaskKind.GPU)
    ops = gpu[np.lexsort((end[gpu], graph.proc[gpu]))].astype(np.int64)
    ptr = np.searchsorted(graph.proc[ops], np.arange(n_proc + 1)).astype(np.int64)
    return ptr, ops, np.asarray(end, np.float64)[ops]


def critical_path_reference(graph: Graph, start: np.ndarray, end: np.ndarray,
                            tolerance_us: float = REPLAYED_TOLERANCE_US) -> np.ndarray:
    """`critical_path` in plain Python, one task at a time (the definition; slow on big graphs)."""
    v = _last_op(graph, end)
    if v < 0:
        return np.zeros(0, dtype=np.int64)
    in_ptr, in_src, in_lag, prev_on_proc = _candidates(graph, start, end)
    streams = _stream_ops_by_end(graph, end)

    path = [v]
    seen = {v}
    while True:
        s = start[v]
        best, best_ready, best_end = -1, -np.inf, -np.inf

        def consider(u: int, ready: float) -> None:
            nonlocal best, best_ready, best_end
            if abs(ready - s) > tolerance_us:
                return
            key = (ready, end[u], u)
            if key > (best_ready, best_end, best):
                best, best_ready, best_end = u, ready, end[u]

        for k in range(in_ptr[v], in_ptr[v + 1]):
            u = int(in_src[k])
            consider(u, float(end[u] + in_lag[k]))
        p = int(prev_on_proc[v])
        if p >= 0:
            consider(p, float(end[p]))
        for u in _wait_candidates(graph, v, s, end, streams, tolerance_us):
            consider(u, float(end[u]))
        if best < 0 or best in seen:
            break
        v = best
        path.append(v)
        seen.add(v)
    return np.array(path[::-1], dtype=np.int64)


def _stream_ops_by_end(graph: Graph, end: np.ndarray) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """GPU ops of each stream processor sorted by end: the targets a run-time wait can bind to."""
    if not np.any(graph.wait_kind != WaitKind.NONE):
        return {}
    out = {}
    gpu = np.flatnonzero(graph.kind == TaskKind.GPU)
    for p in np.unique(graph.proc[gpu]):
        ops = gpu[graph.proc[gpu] == p]
        ops = ops[np.argsort(end[ops], kind="stable")]
        out[int(p)] = (ops, end[ops])
    return out


def _wait_candidates(graph: Graph, v: int, s: float, end: np.ndarray, streams, tol: float) -> list[int]:
    kind = graph.wait_kind[v]
    if kind == WaitKind.NONE:
        return []
    if kind == WaitKind.STREAM:
        procs = [int(graph.wait_target[v])]
    else:
        procs = [int(p) for p in np.flatnonzero((graph.proc_kind == TaskKind.GPU)
                                                 & (graph.proc_rank == graph.wait_target[v]))]
    out = []
    for p in procs:
        if p not in streams:
            continue
        ops, ends = streams[p]
        k = int(np.searchsorted(ends, s + tol, side="right")) - 1
        if k >= 0:
            out.append(int(ops[k]))
    return out


def measured_critical_path(graph: Graph) -> np.ndarray:
    """Critical path of the measured timeline (walk `graph` with its measured starts and ends)."""
    return critical_path(graph, graph.ts, graph.end, MEASURED_TOLERANCE_US)


@dataclass(frozen=True)
class PathAgreement:
    precision: float        # share of the predicted path's tasks that are on the measured path
    recall: float           # share of the measured path's tasks that are on the predicted path
    gpu_precision: float    # the same, counting GPU ops only
    gpu_recall: float
    predicted_len: int
    measured_len: int

    def as_dict(self) -> dict:
        return {"cp_precision": _r(self.precision), "cp_recall": _r(self.recall),
                "cp_gpu_precision": _r(self.gpu_precision), "cp_gpu_recall": _r(self.gpu_recall),
                "cp_predicted_tasks": self.predicted_len, "cp_measured_tasks": self.measured_len}


def _r(x: float) -> float | None:
    """Rounded for output; None (JSON null) when there is nothing to compare."""
    return None if np.isnan(x) else round(float(x), 4)


def _share(a: set, b: set) -> float:
    return float("nan") if not a else len(a & b) / len(a)


def path_agreement(predicted_events: np.ndarray, measured_events: np.ndarray,
                   predicted_gpu: np.ndarray, measured_gpu: np.ndarray) -> PathAgreement:
    """Precision and recall of a predicted critical path against the measured one.

    Paths are given as trace rows (`Graph.event[path]`) with a GPU flag per row.
    """
    p, m = set(predicted_events.tolist()), set(measured_events.tolist())
    pg = set(predicted_events[predicted_gpu].tolist())
    mg = set(measured_events[measured_gpu].tolist())
    return PathAgreement(precision=_share(p, m), recall=_share(m, p), gpu_precision=_share(pg, mg),
                         gpu_recall=_share(mg, pg), predicted_len=len(p), measured_len=len(m))


def compare_paths(reference: Graph, ref_path: np.ndarray, graph: Graph, path: np.ndarray) -> PathAgreement:
    """Agreement of `path` (tasks of `graph`) with `ref_path` (tasks of `reference`), by trace row."""
    return path_agreement(graph.event[path], reference.event[ref_path],
                          graph.kind[path] == TaskKind.GPU, reference.kind[ref_path] == TaskKind.GPU)
