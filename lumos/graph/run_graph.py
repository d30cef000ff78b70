"""One execution graph over several ranks (one per pipeline stage), joined by cross-rank edges.

Per-rank graphs are built with `build_graph` exactly as for single-rank
replay, renumbered into one graph (tasks, processors), then collective peers
and pipeline send/receive pairs are matched and tied by rendezvous tasks
(`edges/cross_rank.py`). Replaying it reproduces the measured run as well as
single-rank replay does, and lets a what-if change on one stage move the others.
Reading a replay of it back out (the run-level breakdown) is analysis
(`lumos.analysis.run_replay`); this module only builds the graph.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from lumos.trace import TraceTable

from .build import DEFAULT_GAP_THRESHOLD_US, build_graph
from .edges.cross_rank import CommOp, add_rendezvous, match_ops, parse_ranks
from .host_steps import host_steps, with_host_medians
from .model import ALL_EDGE_CLASSES, EdgeClass, Graph


def concat_graphs(graphs: Sequence[Graph]) -> tuple[Graph, np.ndarray]:
    """One graph holding all of `graphs` (task and processor ids renumbered); task offsets."""
    offsets = np.cumsum([0] + [g.n_tasks for g in graphs])
    poff = np.cumsum([0] + [g.n_procs for g in graphs])
    kw = {}
    for f in Graph.TASK_FIELDS + Graph.PROC_FIELDS + Graph.EDGE_FIELDS:
        kw[f] = np.concatenate([getattr(g, f) for g in graphs])
    kw["proc"] = np.concatenate([g.proc + poff[i] for i, g in enumerate(graphs)]).astype(np.int32)
    kw["src"] = np.concatenate([g.src + offsets[i] for i, g in enumerate(graphs)]).astype(np.int64)
    kw["dst"] = np.concatenate([g.dst + offsets[i] for i, g in enumerate(graphs)]).astype(np.int64)
    wt = []
    for i, g in enumerate(graphs):
        w = g.wait_target.astype(np.int64).copy()
        stream = g.wait_kind == 1
        w[stream] += poff[i]
        wt.append(w)
    kw["wait_target"] = np.concatenate(wt).astype(np.int32)
    out = Graph(**kw)
    out.summary = {"ranks": [g.summary for g in graphs], "tasks": int(out.n_tasks)}
    return out, offsets[:-1]


def comm_ops(graph: Graph, table: TraceTable, offset: int = 0) -> list[CommOp]:
    """Communication ops of one rank's graph that name their process group, in issue order."""
    comm = np.flatnonzero(graph.comm & graph.in_step & (graph.event >= 0))
    # issue order: launch order is the order on the stream; across streams use measured start
    comm = comm[np.argsort(graph.ts[comm], kind="stable")]
    ops = []
    for t in comm:
        ev = int(graph.event[t])
        group = parse_ranks(table.pg_ranks[ev])
        kind = table.coll_name[ev]
        if group is None or kind is None:
            continue
        ops.append(CommOp(task=int(t) + offset, rank=int(table.rank), kind=str(kind), group=group))
    return ops


def build_run_graph(tables: Sequence[TraceTable], step=None, ranks: Iterable[int] | None = None,
                    edge_classes=ALL_EDGE_CLASSES,
                    gap_threshold_us: float = DEFAULT_GAP_THRESHOLD_US, host_medians: bool = False) -> Graph:
    """Per-rank graphs of `tables` (or of `ranks` among them), concatenated and joined by rendezvous.
    `host_medians`: each rank's host work the median over its profiled steps (`host_steps`); the
    pairing is kept in `summary["host_steps"]` (rank -> `HostSteps`) for the interval's step draw."""
    if ranks is not None:
        want = set(int(r) for r in ranks)
        tables = [t for t in tables if t.rank in want]
    build = {"edge_classes": edge_classes, "gap_threshold_us": gap_threshold_us}
    graphs = [build_graph(t, step=step, **build) for t in tables]
    host = {t.rank: host_steps(g, t, **build) for g, t in zip(graphs, tables)} if host_medians else {}
    if host:
        graphs = [with_host_medians(g, host[t.rank]) for g, t in zip(graphs, tables)]
    run, offsets = concat_graphs(graphs)
    if host:
        run.summary["host_steps"] = {r: h for r, h in host.items() if h.n_steps >= 2}
    if EdgeClass.CROSS_RANK not in frozenset(EdgeClass(c) for c in edge_classes):
        return run
    ops = []
    for g, t, off in zip(graphs, tables, offsets):
        ops.extend(comm_ops(g, t, int(off)))
    groups = match_ops(ops, [t.rank for t in tables])
    out = add_rendezvous(run, groups)
    out.summary = {**out.summary, **{k: run.summary[k] for k in ("ranks", "host_steps") if k in run.summary}}
    return out


def rendezvous_links(graph: Graph) -> tuple[np.ndarray, np.ndarray]:
    """(rendezvous task, member task) pairs: the CROSS_RANK edges out of rendezvous tasks."""
    e = np.flatnonzero(graph.cls == EdgeClass.CROSS_RANK)
    virtual = graph.event[graph.src[e]] < 0
    virtual &= graph.name[graph.src[e]].astype(str) != ""
    e = e[virtual & np.char.startswith(graph.name[graph.src[e]].astype(str), "rendezvous")]
    return graph.src[e], graph.dst[e]
