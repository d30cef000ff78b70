"""Find training iterations in a trace and pick one.

Iterations are `ProfilerStep#N` annotations. Traces recorded without the
profiler schedule have none; there an iteration is delimited by the repeated
data-loader annotation (`enumerate(DataLoader)#...`), numbered from 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import schema
from .errors import TraceError
from .table import TraceTable

LOADER_PREFIX = "enumerate(DataLoader)"


@dataclass(frozen=True)
class Step:
    number: int
    start: float
    end: float
    pid: int
    tid: int
    source: str  # 'ProfilerStep' or 'DataLoader'


def find_steps(table: TraceTable) -> list[Step]:
    ann = np.flatnonzero(table.cat == schema.ANNOTATION)
    steps = []
    for i in ann:
        n = schema.profiler_step_number(table.name[i])
        if n is not None:
            steps.append(Step(n, float(table.ts[i]), float(table.ts[i] + table.dur[i]),
                              int(table.pid[i]), int(table.tid[i]), "ProfilerStep"))
    if steps:
        return sorted(steps, key=lambda s: s.start)
    loader = [i for i in ann if table.name[i].startswith(LOADER_PREFIX)]
    loader.sort(key=lambda i: table.ts[i])
    if len(loader) >= 2:
        # Iteration k runs from the k-th loader call to the next one.
        cpu_end = float(np.max(table.end[np.isin(table.cat, schema.CPU_CATEGORIES)]))
        for k, i in enumerate(loader):
            end = float(table.ts[loader[k + 1]]) if k + 1 < len(loader) else cpu_end
            steps.append(Step(k, float(table.ts[i]), end, int(table.pid[i]), int(table.tid[i]), "DataLoader"))
    return steps


def select_step(table: TraceTable, number: int | None = None) -> Step:
    """The step numbered `number`, or by default a steady-state one (the second, if any)."""
    steps = find_steps(table)
    if not steps:
        raise TraceError(table.path, "no iteration found: no ProfilerStep#N annotation and no "
                                     "repeated DataLoader annotation")
    if number is None:
        return steps[1] if len(steps) >= 2 else steps[0]
    for s in steps:
        if s.number == number:
            return s
    have = ", ".join(str(s.number) for s in steps)
    raise TraceError(table.path, f"step {number} is not in the trace (steps present: {have})")
