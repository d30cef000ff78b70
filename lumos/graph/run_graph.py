"""One execution graph over several ranks (one per pipeline stage), joined by cross-rank edges.

Per-rank graphs are built with `build_graph` exactly as for single-rank
replay, renumbered into one graph (tasks, processors), then collective peers
and pipeline send/receive pairs are matched and tied by rendezvous tasks
(`edges/cross_rank.py`). Replaying it reproduces the measured run as well as
single-rank replay does, and lets a what-if change on one stage move the others.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from lumos.trace import TraceTable

from .build import DEFAULT_GAP_THRESHOLD_US, build_graph
from .edges.cross_rank import CommOp, add_rendezvous, match_ops, parse_ranks
from .model import ALL_EDGE_CLASSES, EdgeClass, Graph, TaskKind

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
                    gap_threshold_us: float = DEFAULT_GAP_THRESHOLD_US) -> Graph:
    """Per-rank graphs of `tables` (or of `ranks` among them), concatenated and joined by rendezvous."""
    if ranks is not None:
        want = set(int(r) for r in ranks)
        tables = [t for t in tables if t.rank in want]
    graphs = [build_graph(t, step=step, edge_classes=edge_classes, gap_threshold_us=gap_threshold_us)
              for t in tables]
    run, offsets = concat_graphs(graphs)
    if EdgeClass.CROSS_RANK not in frozenset(EdgeClass(c) for c in edge_classes):
        return run
    ops = []
    for g, t, off in zip(graphs, tables, offsets):
        ops.extend(comm_ops(g, t, int(off)))
    groups = match_ops(ops, [t.rank for t in tables])
    out = add_rendezvous(run, groups)
    out.summary["ranks"] = run.summary["ranks"]
    return out


@dataclass
class RunBreakdown:
    """Run-level figures: the rank with the longest GPU span sets the iteration and its breakdown."""
    critical_rank: int
    per_rank: dict          # rank -> Breakdown
    iteration: object       # Breakdown of the critical rank

    def as_dict(self) -> dict:
        return self.iteration.as_dict()


def rendezvous_links(graph: Graph) -> tuple[np.ndarray, np.ndarray]:
    """(rendezvous task, member task) pairs: the CROSS_RANK edges out of rendezvous tasks."""
    e = np.flatnonzero(graph.cls == EdgeClass.CROSS_RANK)
    virtual = graph.event[graph.src[e]] < 0
    virtual &= graph.name[graph.src[e]].astype(str) != ""
    e = e[virtual & np.char.startswith(graph.name[graph.src[e]].astype(str), "rendezvous")]
    return graph.src[e], graph.dst[e]


def occupancy(graph: Graph, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """When each communication kernel began to occupy its stream.

    A rendezvous member starts (in the graph) when its last peer is ready, but
    on the GPU the kernel is already running, spinning for that peer, once its
    own dependencies are met; a trace shows that whole span, so the breakdown
    must count it too.
    """
    occ = start.copy()
    r, k = rendezvous_links(graph)
    if not len(k):
        return occ
    members = np.unique(k)
    own = np.full(graph.n_tasks, -np.inf)
    e = np.flatnonzero(np.isin(graph.dst, members) & (graph.cls != EdgeClass.CROSS_RANK))
    np.maximum.at(own, graph.dst[e], end[graph.src[e]] + graph.lag[e])
    occ[members] = np.minimum(start[members], np.maximum(own[members], -np.inf))
    occ[members] = np.where(np.isfinite(occ[members]), occ[members], start[members])
    return occ


def measured_times(graph: Graph) -> tuple[np.ndarray, np.ndarray]:
    """Measured (start, end) of every task, undoing the duration change of rendezvous members."""
    start, end = graph.ts.copy(), graph.end.copy()
    r, k = rendezvous_links(graph)
    end[k] = np.maximum(end[k], graph.ts[r] + graph.dur[k])
    return start, end


def run_breakdown(graph: Graph, start: np.ndarray, end: np.ndarray, measured: bool = False) -> RunBreakdown:
    """Run-level breakdown of a simulated (or, with `measured`, the measured) timeline."""
    from lumos.analysis import breakdown

    if measured:
        start, end = measured_times(graph)
    else:
        start = occupancy(graph, start, end)
    gpu = graph.kind == TaskKind.GPU
    per = {}
    for r in np.unique(graph.rank[graph.in_step]):
        mine = graph.rank == r
        per[int(r)] = breakdown(start, end, gpu & mine, graph.comm, graph.in_step & mine)
    crit = max(per, key=lambda r: per[r].iteration_us)
    return RunBreakdown(critical_rank=crit, per_rank=per, iteration=per[crit])


def replay_run_graph(tables: Sequence[TraceTable], step=None, engine: str = "auto", **kw) -> dict:
    """Replay a multi-rank run as one graph; measured and replayed run-level breakdowns.

    JSON shape as `lumos replay` for several ranks: the critical rank's figures
    at the top, per-rank figures under "ranks".
    """
    from lumos.analysis import relative_error_pct
    from lumos.sim import simulate

    graph = build_run_graph(tables, step=step, **kw)
    sched = simulate(graph, engine=engine)
    measured = run_breakdown(graph, graph.ts, graph.end, measured=True)
    replayed = run_breakdown(graph, sched.start, sched.end)
    ranks = []
    for r in sorted(measured.per_rank):
        m, p = measured.per_rank[r], replayed.per_rank[r]
        ranks.append({"rank": r, "measured": m.as_dict(), "replayed": p.as_dict(),
                      "error_pct": round(relative_error_pct(p.iteration_us, m.iteration_us), 4)})
    return {"measured": measured.as_dict(), "replayed": replayed.as_dict(),
            "error_pct": round(relative_error_pct(replayed.iteration.iteration_us,
                                                  measured.iteration.iteration_us), 4),
            "critical_rank": measured.critical_rank, "cross_rank": True,
            "rendezvous": int(graph.summary.get("rendezvous", 0)), "ranks": ranks}
