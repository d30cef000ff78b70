"""Find training iterations in a trace and pick one.

Iterations are `ProfilerStep#N` annotations. Traces recorded without the
profiler schedule have none; there an iteration is delimited by the repeated
data-loader annotation (`enumerate(DataLoader)#...`), numbered from 0.

The default is a steady-state step: the second one, or the only one. A step
that holds no work is never the default while another one does, nor is a last
step cut short when the profiler stopped (shorter than `STUB_FRACTION` of the
others' median): an MI250 trace ends in a 49 us `ProfilerStep#2` that holds
nothing, after a 9.3 ms `ProfilerStep#1` that holds the training step. The step
taken then says why (`Step.note`).

    ProfilerStep#1 [=================================]   holds the work: default
    ProfilerStep#2                                      [=]  stub: skipped
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from lumos.lean_numpy import median

from . import schema
from .errors import TraceError
from .table import TraceTable

LOADER_PREFIX = "enumerate(DataLoader)"
STUB_FRACTION = 0.1  # a last step shorter than this share of the others' median is cut short


@dataclass(frozen=True)
class Step:
    number: int
    start: float
    end: float
    pid: int
    tid: int
    source: str  # 'ProfilerStep' or 'DataLoader'
    note: str = field(default="", compare=False)  # why the default took this step, when not the usual one

    @property
    def label(self) -> str:
        return f"ProfilerStep#{self.number}" if self.source == "ProfilerStep" else f"DataLoader iteration {self.number}"


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


def work_events(table: TraceTable, step: Step) -> int:
    """CPU ops, runtime calls and annotations (other than steps) that start inside `step`, on any process."""
    inside = (table.ts >= step.start) & (table.ts < step.end)
    rows = np.flatnonzero(inside & np.isin(table.cat, schema.CPU_CATEGORIES))
    ann = rows[table.cat[rows] == schema.ANNOTATION]   # few: each asked whether it is a step
    return len(rows) - len(ann) + sum(1 for i in ann if schema.profiler_step_number(table.name[i]) is None)


def _stub_reason(table: TraceTable, steps: list[Step], k: int) -> str | None:
    """Why steps[k] is no iteration to default to, or None if it is one."""
    s = steps[k]
    if work_events(table, s) == 0:
        return f"{s.label} ({(s.end - s.start) / 1e3:.3f} ms) holds no CPU op, runtime call or annotation"
    others = [o.end - o.start for j, o in enumerate(steps) if j != k]
    if k == len(steps) - 1 and others and s.end - s.start < STUB_FRACTION * median(others):
        return (f"{s.label} ({(s.end - s.start) / 1e3:.3f} ms) is the last step and shorter than "
                f"{STUB_FRACTION:.0%} of the others' median ({median(others) / 1e3:.3f} ms): cut short")
    return None


def default_step(table: TraceTable, steps: list[Step]) -> Step:
    """The second step (steady state), or the only one; a stub only if every step is one."""
    preferred = [1, 0] + list(range(2, len(steps))) if len(steps) >= 2 else [0]
    skipped = []
    for k in preferred:
        why = _stub_reason(table, steps, k)
        if why is None:
            if not skipped:
                return steps[k]
            return replace(steps[k], note=f"default step {steps[k].label} taken: " + "; ".join(skipped))
        skipped.append(why)
    return steps[preferred[0]]


def select_step(table: TraceTable, number: int | None = None) -> Step:
    """The step numbered `number`, or by default a steady-state one (`default_step`)."""
    steps = find_steps(table)
    if not steps:
        raise TraceError(table.path, "no iteration found: no ProfilerStep#N annotation and no "
                                     "repeated DataLoader annotation")
    if number is None:
        return default_step(table, steps)
    for s in steps:
        if s.number == number:
            return s
    have = ", ".join(str(s.number) for s in steps)
    raise TraceError(table.path, f"step {number} is not in the trace (steps present: {have})")
