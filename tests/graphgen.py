"""Graphs written out by hand for simulator tests: a Graph from plain lists."""

from __future__ import annotations

import numpy as np

from lumos.graph import Graph, TaskKind

CPU, GPU = TaskKind.CPU, TaskKind.GPU


def graph_of(kind, proc, dur, edges, proc_kind, *, release=None, ts=None, wait_kind=None, wait_target=None,
             stream_pos=None, proc_rank=None, rank=None) -> Graph:
    """A Graph from plain lists; edges are (src, dst, EdgeClass[, lag])."""
    n, n_procs = len(kind), len(proc_kind)
    src = np.array([e[0] for e in edges], dtype=np.int64)
    dst = np.array([e[1] for e in edges], dtype=np.int64)
    if stream_pos is None:
        stream_pos = np.full(n, -1, np.int32)
        for p in range(n_procs):
            idx = [i for i in range(n) if proc[i] == p and kind[i] == GPU]
            stream_pos[idx] = np.arange(len(idx))
    if release is None:
        has_in = np.zeros(n, bool)
        has_in[dst] = True
        release = np.where(has_in, -np.inf, 0.0)
    return Graph(
        name=np.array([f"t{i}" for i in range(n)], dtype=object), kind=np.array(kind, np.int8),
        proc=np.array(proc, np.int32), dur=np.array(dur, float), ts=np.zeros(n) if ts is None else np.array(ts, float),
        release=np.array(release, float), comm=np.zeros(n, bool), in_step=np.array(kind) == GPU,
        rank=np.zeros(n, np.int32) if rank is None else np.array(rank, np.int32),
        stream_pos=np.asarray(stream_pos, np.int32),
        wait_kind=np.zeros(n, np.int8) if wait_kind is None else np.array(wait_kind, np.int8),
        wait_target=np.full(n, -1, np.int32) if wait_target is None else np.array(wait_target, np.int32),
        event=np.arange(n), layer=np.full(n, -1, np.int32), phase=np.full(n, -1, np.int8),
        proc_kind=np.array(proc_kind, np.int8),
        proc_rank=np.zeros(n_procs, np.int32) if proc_rank is None else np.array(proc_rank, np.int32),
        proc_key=np.arange(n_procs, dtype=np.int64),
        proc_name=np.array([f"p{i}" for i in range(n_procs)], dtype=object),
        src=src, dst=dst, cls=np.array([e[2] for e in edges], dtype=np.int8),
        lag=np.array([e[3] if len(e) > 3 else 0.0 for e in edges], dtype=np.float64),
        inferred=np.zeros(len(src), bool))
