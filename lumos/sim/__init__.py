"""Replay an execution graph (Algorithm 1) and return every task's start and end."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lumos import jit
from lumos.graph.model import Graph

from .arrays import SimArrays, prepare
from .errors import SimulationError
from .reference import simulate_reference


@dataclass
class Schedule:
    start: np.ndarray
    end: np.ndarray
    abandoned_waits: int = 0  # syncs that could not wait (only after an ablation removed program order)


def simulate(graph: Graph, engine: str = "auto") -> Schedule:
    """Replay `graph`. engine: 'reference' (pure Python), 'compiled' (C) or 'auto': compiled where
    the kernels are built (`lumos.jit`), else the reference; the two give the same schedule bit
    for bit."""
    arrays = prepare(graph)
    run = simulate_reference
    if engine == "compiled" or (engine == "auto" and jit.compiled()):
        from .compiled import simulate_compiled as run
    start, end, done, *rest = run(arrays)
    if not done.all():
        stuck = np.flatnonzero(~done)
        names = [f"#{i} {graph.name[i]}" for i in stuck[:8]]
        raise SimulationError(names, len(stuck), graph.n_tasks)
    return Schedule(start=start, end=end, abandoned_waits=int(rest[0]) if rest else 0)


__all__ = ["simulate", "Schedule", "SimulationError", "prepare", "SimArrays"]
