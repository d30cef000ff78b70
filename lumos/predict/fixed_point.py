"""Durations that depend on the schedule they make, replayed together until none moves.

Two effects time a task by what runs beside it in the replay: a transfer that newly crosses hosts
shares its GPU's NIC with the others in flight (`nic_sharing.py`), and a compute kernel runs slower
under a communication kernel (`contention.py`). Each moves the schedule the other reads, so they
settle together: every round reads both from the last replay, and the graph is replayed until no
duration moves by more than half a microsecond.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

__all__ = ["Effect", "replay_to_fixed_point", "TOLERANCE_US", "MAX_ROUNDS"]

TOLERANCE_US = 0.5
MAX_ROUNDS = 30


@dataclass
class Effect:
    name: str                                   # its key in graph.summary
    tasks: np.ndarray                           # the tasks it times
    base: np.ndarray                            # their durations before it
    durations: Callable[..., np.ndarray]        # schedule -> their durations under it
    summary: Callable[[np.ndarray], dict]       # settled durations -> what it says of them


def replay_to_fixed_point(graph, sched, effects: Sequence[Effect | None], replay: Callable) -> tuple:
    """(graph, schedule) with every effect's durations read from the replay, replayed to the joint
    fixed point; the inputs themselves where no effect moved a duration. Each effect that did adds
    `graph.summary[name]` (its summary, the replays, whether they settled)."""
    effects = [e for e in effects if e is not None]
    now = [e.base for e in effects]
    graph_now, moved, rounds = graph, np.inf, 0
    for rounds in range(1, MAX_ROUNDS + 1):
        new = [e.durations(sched) for e in effects]
        step = [float(np.max(np.abs(n - c))) if len(n) else 0.0 for n, c in zip(new, now)]
        moved = max(step, default=0.0)
        if rounds == 1 and moved <= TOLERANCE_US:
            return graph, sched         # nothing ran beside anything: the replay stands
        now = new
        dur = graph.dur.copy()
        for e, n in zip(effects, now):
            dur[e.tasks] = n
        graph_now = dataclasses.replace(graph, dur=dur)
        sched = replay(graph_now)
        if moved <= TOLERANCE_US:
            break
    summary = dict(graph.summary)
    for e, n in zip(effects, now):
        if len(n) and float(np.max(np.abs(n - e.base))) > TOLERANCE_US:
            summary[e.name] = {**e.summary(n), "replays": rounds, "settled": moved <= TOLERANCE_US}
    graph_now.summary = summary
    return graph_now, sched
