"""Replay of a multi-rank run graph, and its run-level breakdown.

The graph (`lumos.graph.run_graph`) ties ranks together with rendezvous
tasks; reading a replayed (or measured) timeline back out of it needs the
rendezvous undone: a communication kernel occupies its stream from when its
own dependencies are met, not from when its last peer arrives.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from lumos.graph.model import EdgeClass, Graph, TaskKind
from lumos.graph.run_graph import build_run_graph, comm_calls, join_ranks, rendezvous_links
from lumos.sim import simulate
from lumos.trace import TraceTable

from .breakdown import breakdown, relative_error_pct

__all__ = ["RunBreakdown", "critical_rank", "occupancy", "measured_times", "run_breakdown", "replayed", "replay_run_graph",
           "replay_joined", "JointParts"]


@dataclass
class RunBreakdown:
    """Run-level figures: the rank with the longest GPU span sets the iteration and its breakdown."""
    critical_rank: int
    per_rank: dict          # rank -> Breakdown
    iteration: object       # Breakdown of the critical rank

    def as_dict(self) -> dict:
        return self.iteration.as_dict()


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


# Ranks whose GPU spans are this close to the longest are tied: which of them is longest is noise (a grad
# norm all-reduced over every stage ends them together), so the tie goes to the lowest rank, the first stage.
TIE_SHARE = 0.005


def critical_rank(per: dict) -> int:
    """The rank whose breakdown stands for the run: the longest GPU span, a near-tie to the lowest rank."""
    longest = max(b.iteration_us for b in per.values())
    return min(r for r, b in per.items() if b.iteration_us >= longest * (1.0 - TIE_SHARE))


def run_breakdown(graph: Graph, start: np.ndarray, end: np.ndarray, measured: bool = False) -> RunBreakdown:
    """Run-level breakdown of a simulated (or, with `measured`, the measured) timeline."""
    if measured:
        start, end = measured_times(graph)
    else:
        start = occupancy(graph, start, end)
    gpu = graph.kind == TaskKind.GPU
    per = {}
    # a run without kernels (CPU captures) marks no task in_step: its ranks are those with tasks
    ranks = graph.rank[graph.in_step] if graph.in_step.any() else graph.rank
    for r in np.unique(ranks):
        mine = graph.rank == r
        per[int(r)] = breakdown(start[mine], end[mine], gpu[mine], graph.comm[mine], graph.in_step[mine])
    crit = critical_rank(per)
    return RunBreakdown(critical_rank=crit, per_rank=per, iteration=per[crit])


def replayed(graph: Graph, engine: str = "auto") -> RunBreakdown:
    """`graph` replayed as it is: its run-level breakdown (`.iteration` is the critical rank's)."""
    sched = simulate(graph, engine=engine)
    return run_breakdown(graph, sched.start, sched.end)


def replay_run_graph(tables: Sequence[TraceTable], step=None, engine: str = "auto", **kw) -> dict:
    """Replay a multi-rank run as one graph; measured and replayed run-level breakdowns.

    JSON shape as `lumos replay` for several ranks: the critical rank's figures
    at the top, per-rank figures under "ranks".
    """
    return replay_joined(build_run_graph(tables, step=step, **kw), engine=engine)


def replay_joined(graph: Graph, engine: str = "auto") -> dict:
    """`replay_run_graph` of a run graph already built (`build_run_graph`, or `join_ranks` over ranks
    streamed one at a time)."""
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
            "rendezvous": int(graph.summary.get("rendezvous", 0)),
            "comm_ops": {str(r): n for r, n in graph.summary.get("comm_ops", {}).items()},
            "unmatched_comm": {str(r): by for r, by in graph.summary.get("unmatched_comm", {}).items()},
            "ranks": ranks}


class JointParts:
    """What a joint replay keeps of each rank while the ranks are streamed (`lumos.analysis.run_stream`):
    its graph (arrays) and its communication calls, not its trace. `graph(tables)` joins them as
    `build_run_graph` does, in rank order, with the world sizes of the run's settled `tables`."""

    def __init__(self, cross_rank: bool = True):
        self.cross_rank = cross_rank
        self.parts: list[tuple[int, Graph, list | None]] = []

    def add(self, graph: Graph, table: TraceTable) -> None:
        """`graph`: the rank's graph as `build_run_graph` builds it (the same classes and threshold)."""
        self.parts.append((int(table.rank), graph, comm_calls(graph, table) if self.cross_rank else None))

    def graph(self, tables: Sequence[TraceTable]) -> Graph:
        """The run graph; the parts are handed over (and freed once concatenated)."""
        parts, self.parts = sorted(self.parts, key=lambda p: p[0]), []
        calls = {r: c for r, _, c in parts} if self.cross_rank else None
        ranks, graphs = [r for r, _, _ in parts], [g for _, g, _ in parts]
        del parts
        return join_ranks(graphs, ranks, calls, {int(t.world_size) for t in tables}, consume=True)
