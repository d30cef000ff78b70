"""FSDP2's hook ranges of one step: where its collective work sits on the host.

FSDP2 wraps its per-unit host work in `record_function` ranges (torch
`distributed/fsdp/_fully_shard/_fsdp_param_group.py`, `_fsdp_state.py`): `FSDP::pre_forward (FQN)`,
`FSDP::pre_backward (FQN)`, `FSDP::backward_prefetch for FQN`, `FSDP::post_backward_reduce (FQN)`
and others; the root unit has no FQN. These ranges are there at any group size, also at one rank
where FSDP2 issues no collective. What a larger group adds happens inside them: the all-gather
(its own `FSDP::all_gather` range, the issuing c10d op, the wait for the peers), the copy-out, the
reduce-scatter. So a hook's time at DP N minus its time at DP 1 is what N ranks cost there.

A hook's self time leaves out the hooks nested in it (a `pre_backward` holds the prefetch of the
next unit), so each unit's work is counted once, under its own hook. The collective ranges
(`FSDP::all_gather`, `FSDP::all_gather_copy_out`) are not hooks: they exist at DP > 1 only, and
their time is their hook's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lumos import intervals
from lumos.trace import TraceTable, schema
from lumos.trace.steps import Step

from .dp_flavour import ROOT, fsdp_range_unit

__all__ = ["HookRange", "hook_ranges", "outside_hooks_us", "role_label"]

COLLECTIVE_RANGES = ("FSDP::all_gather",)   # also matches `FSDP::all_gather_copy_out`


@dataclass(frozen=True)
class HookRange:
    """One FSDP2 hook range of a step, on the thread that runs FSDP2's hooks."""
    name: str           # as the trace has it: `FSDP::pre_forward (blocks.0)`
    what: str           # `pre_forward`, `backward_prefetch`, ...
    unit: str           # the unit's FQN; `root` for the root
    occurrence: int     # how many hooks of this name came before it in the step
    start: float        # us
    end: float
    self_us: float      # its duration less the hook ranges directly nested in it
    row: int            # trace row

    @property
    def key(self) -> tuple[str, int]:
        """What pairs it with the same hook of the same program at another DP degree."""
        return self.name, self.occurrence

    @property
    def role(self) -> tuple[str, bool]:
        """What its cost depends on besides the unit's size: the hook, and whether the unit is the root."""
        return self.what, self.unit == ROOT


def hook_ranges(table: TraceTable, step: Step) -> list[HookRange]:
    """The FSDP2 hook ranges that start inside `step`, in program order; [] when there are none.
    All must be on one thread (FSDP2 runs its hooks on the thread that calls forward and backward);
    a trace whose hooks span threads gets a clear error."""
    rows = np.flatnonzero((table.ts >= step.start) & (table.ts < step.end) & (table.tid >= 0)
                          & ((table.cat == schema.ANNOTATION) | (table.cat == schema.CPU_OP)))
    rows = np.array([r for r in rows.tolist() if str(table.name[r]).startswith("FSDP::")
                     and not str(table.name[r]).startswith(COLLECTIVE_RANGES)
                     and fsdp_range_unit(str(table.name[r])) is not None], dtype=np.int64)
    if not len(rows):
        return []
    tids = sorted({int(t) for t in table.tid[rows]})
    if len(tids) > 1:
        raise ValueError(f"{table.path}: FSDP2 hook ranges of step {step.number} on threads {tids}; "
                         "their host work is read on one thread")
    rows = rows[np.lexsort((-table.dur[rows], table.ts[rows]))]
    start, end = table.ts[rows].astype(float), (table.ts[rows] + table.dur[rows]).astype(float)
    nested = np.zeros(len(rows))
    stack: list[int] = []
    for i in range(len(rows)):
        while stack and end[stack[-1]] <= start[i]:
            stack.pop()
        if stack:
            nested[stack[-1]] += end[i] - start[i]
        stack.append(i)
    seen: dict[str, int] = {}
    out = []
    for i, r in enumerate(rows.tolist()):
        name = str(table.name[r])
        what, unit, _ = fsdp_range_unit(name)
        out.append(HookRange(name, what, unit, seen.get(name, 0), float(start[i]), float(end[i]),
                             float(end[i] - start[i] - nested[i]), int(r)))
        seen[name] = seen.get(name, 0) + 1
    return out


def outside_hooks_us(hooks: list[HookRange], step: Step) -> float:
    """The step's time outside every hook range: the model's own work and the Python around it."""
    covered = intervals.length(np.array([h.start for h in hooks]), np.array([h.end for h in hooks]))
    return float(step.end - step.start) - covered


def role_label(role: tuple[str, bool]) -> str:
    """`pre_forward`, `pre_forward (root)`: how a hook role is named in notes and the prediction JSON."""
    return f"{role[0]}{' (root)' if role[1] else ''}"
