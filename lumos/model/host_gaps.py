"""Which op a CPU capture's gap between two leaf ops belongs to.

A CPU trace's tasks are its innermost ops; an op's own work (the BLAS call of `aten::mm`, after its
`aten::resolve_conj` children; SDPA's kernel between its `aten::empty_like` and its return) lies in the
gaps between its children, which the graph holds as program-order lags. To re-time a CPU capture for a
new shape, each gap is given to the innermost op that encloses it: its name and Input Dims.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lumos.graph.model import EdgeClass, Graph, TaskKind
from lumos.trace import schema

from .nesting import innermost

__all__ = ["HostGaps", "host_gaps"]


@dataclass
class HostGaps:
    """Per program-order edge between CPU tasks that an op encloses: the edge, the op, its dims."""
    edge: np.ndarray       # edge indices into the graph
    op_name: np.ndarray    # object
    op_dims: np.ndarray    # object: the op's Input Dims (tuples)


def host_gaps(graph: Graph, tables) -> HostGaps:
    cpu = graph.kind == TaskKind.CPU
    cand = np.flatnonzero((graph.cls == EdgeClass.INTRA_THREAD) & cpu[graph.src] & cpu[graph.dst]
                          & (graph.lag > 0) & (graph.event[graph.src] >= 0))
    edges, names, dims = [], [], []
    by_rank = {t.rank: t for t in tables}
    for r, table in by_rank.items():
        mine = cand[graph.rank[graph.src[cand]] == r]
        if not len(mine):
            continue
        ev = graph.event[graph.src[mine]]
        nxt = graph.event[graph.dst[mine]]
        mid = (table.ts[ev] + table.dur[ev] + table.ts[nxt]) / 2.0     # the gap's middle, on the trace's clock
        ops = np.flatnonzero(table.cat == schema.CPU_OP)
        inner = innermost(table, ops, table.pid[ev], table.tid[ev], mid)
        hit = inner >= 0
        for e, o in zip(mine[hit].tolist(), inner[hit].tolist()):
            d = table.input_dims[o]
            if d is None:
                continue
            edges.append(e)
            names.append(str(table.name[o]))
            dims.append(tuple(tuple(x) if isinstance(x, list) else x for x in d))
    name_a = np.empty(len(names), dtype=object)
    name_a[:] = names
    dims_a = np.empty(len(dims), dtype=object)
    dims_a[:] = dims
    return HostGaps(edge=np.array(edges, np.int64), op_name=name_a, op_dims=dims_a)
