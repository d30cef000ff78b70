"""Put back, in a replay, the slowdown compute kernels take from the communication beside them.

A plan whose base showed the slowdown (`lumos.durations.contention`) carries its compute
kernels' time alone. Each one's share under a communication kernel of its rank is read from a
replay and the kernel slowed by it; since the slowed kernels move the rest, this settles with the
NIC sharing in one fixed point (`fixed_point.py`).
"""

from __future__ import annotations

import numpy as np

from lumos.graph.model import TaskKind
from lumos.intervals import share_under
from lumos.transform.plan import Plan
from lumos.transform.speed import compute_kernels

from .fixed_point import Effect

__all__ = ["replay_shares", "contention_effect"]


def rank_groups(graph, tasks: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per rank of `tasks`: (positions in `tasks`, that rank's communication kernels)."""
    comm = np.flatnonzero(graph.comm.astype(bool) & (graph.kind == TaskKind.GPU))
    return [(np.flatnonzero(graph.rank[tasks] == r), comm[graph.rank[comm] == r])
            for r in np.unique(graph.rank[tasks]).tolist()]


def replay_shares(graph, start: np.ndarray, end: np.ndarray, tasks: np.ndarray, groups=None) -> np.ndarray:
    """Share of each of `tasks`' replayed span under a replayed communication kernel of its rank
    (`groups`: `rank_groups(graph, tasks)`, made once where the shares are read every round)."""
    share = np.zeros(len(tasks))
    for mine, c in groups if groups is not None else rank_groups(graph, tasks):
        t = tasks[mine]
        share[mine] = share_under(start[t], end[t], start[c], end[c])
    return share


def contention_effect(plan: Plan, graph):
    """The plan's compute kernels slowed by their share under communication, as a schedule-dependent
    effect (`fixed_point.Effect`); None where the base showed no slowdown."""
    c = plan.contention
    if not c.active:
        return None
    if "compute_kernels" not in plan.memo:
        plan.memo["compute_kernels"] = np.flatnonzero(compute_kernels(plan))
    tasks = plan.memo["compute_kernels"]
    alone = graph.dur[tasks]
    groups = rank_groups(graph, tasks)

    def durations(sched) -> np.ndarray:
        return c.beside(alone, replay_shares(graph, sched.start, sched.end, tasks, groups))

    def summary(now: np.ndarray) -> dict:
        return {**c.as_dict(), "added_ms": round(float(np.sum(now - alone)) / 1e3, 3)}

    return Effect("contention", tasks, alone, durations, summary)
