"""Flatten a Graph into the plain arrays the replay cores read (CSR adjacency).

Both the pure-Python reference and the compiled core take exactly these
arrays, which is what lets the tests hold their schedules equal.
"""

from __future__ import annotations

from dataclasses import dataclass

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
