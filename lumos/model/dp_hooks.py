"""The hook ranges of one step of a DP run on host collectives: where its collective work sits on the host.

FSDP2 (`hook_ranges`) and DDP (`ddp_ranges`); `dp_ranges` takes whichever the step holds.

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

DDP's reducer (torch `csrc/distributed/c10d/reducer.cpp`) works from autograd hooks: when a bucket's
last gradient is in, it issues the bucket's all-reduce (`c10d::allreduce_`, asynchronous: on gloo a
worker thread runs it); after the backward, `finalize_backward` waits for each bucket in turn and
copies its averaged gradients back (`torch.distributed.ddp.reducer::copy_bucket_to_grad` per
parameter). DDP has no path of its own for a group of one, so a one-rank capture issues the same
all-reduces over a group of one: the same ranges, with nothing to wait for. Its hook range is then
the finalize (`ddp_ranges`: from the end of the step's last issuing op to the end of its last copy
back), unit `buckets`, holding every bucket's all-reduce (`HookRange.parts`) and all their elements:
what a larger group adds to the step beyond the backward shows up there, as the wait for the buckets.
The issuing ops themselves are not hooks: they only enqueue, at one rank as at N, and what they take
beyond that is the core going to the worker thread they wake (from under 0.1 ms to several ms on a
loaded host, at any group size): the shared-core slowdown, not the group's work.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lumos import intervals
from lumos.trace import TraceTable, schema
from lumos.trace.steps import Step

from .dp_flavour import ROOT, find_dp_flavour, fsdp_range_unit, input_elements

__all__ = ["DPRanges", "HookRange", "ddp_ranges", "dp_ranges", "hook_ranges", "outside_hooks_us", "role_label"]

COLLECTIVE_RANGES = ("FSDP::all_gather",)   # also matches `FSDP::all_gather_copy_out`


@dataclass(frozen=True)
class HookRange:
    """One hook range of a step (FSDP2's, or DDP's), on the thread that runs the hooks."""
    name: str           # as the trace has it: `FSDP::pre_forward (blocks.0)`
    what: str           # `pre_forward`, `backward_prefetch`, ...
    unit: str           # the unit's FQN; `root` for the root
    occurrence: int     # how many hooks of this name came before it in the step
    start: float        # us
    end: float
    self_us: float      # its duration less the hook ranges directly nested in it
    row: int            # trace row; -1 for DDP's finalize (no one op spans it)
    tid: int = -1       # the thread it is on
    parts: int = 1      # the units whose collectives it holds (DDP's finalize: its buckets)

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
                             float(end[i] - start[i] - nested[i]), int(r), int(table.tid[r])))
        seen[name] = seen.get(name, 0) + 1
    return out


def outside_hooks_us(hooks: list[HookRange], step: Step) -> float:
    """The step's time outside every hook range: the model's own work and the Python around it."""
    covered = intervals.length(np.array([h.start for h in hooks]), np.array([h.end for h in hooks]))
    return float(step.end - step.start) - covered


def role_label(role: tuple[str, bool]) -> str:
    """`pre_forward`, `pre_forward (root)`: how a hook role is named in notes and the prediction JSON."""
    return f"{role[0]}{' (root)' if role[1] else ''}"


DDP_ISSUE = "c10d::allreduce_"
DDP_COPY_BACK = "torch.distributed.ddp.reducer::copy_bucket_to_grad"
DDP_FINALIZE = "DDP finalize_backward"     # the name this module gives the finalize (no op is called so)


def ddp_ranges(table: TraceTable, step: Step) -> tuple[list[HookRange], dict[str, int]]:
    """DDP's hook range of `step` (the finalize, one part per bucket) and the elements of each bucket
    (`bucket_K`, K in issue order) and of all (`buckets`); ([], {}) where the step has no DDP copy back.
    The issuing ops must be on one thread."""
    rows = np.flatnonzero((table.ts >= step.start) & (table.ts < step.end) & (table.tid >= 0)
                          & (table.cat == schema.CPU_OP))
    rows = rows[np.argsort(table.ts[rows], kind="stable")]
    names = [str(table.name[r]) for r in rows.tolist()]
    copies = [r for r, n in zip(rows.tolist(), names) if n == DDP_COPY_BACK]
    issue = [r for r, n in zip(rows.tolist(), names) if n == DDP_ISSUE]
    if not copies:
        return [], {}
    if not issue:
        raise ValueError(f"{table.path}: DDP copies buckets back in step {step.number} but issues no "
                         f"{DDP_ISSUE}: gradient sync off for every micro-batch?")
    tids = sorted({int(table.tid[r]) for r in issue})
    if len(tids) > 1:
        raise ValueError(f"{table.path}: DDP's {DDP_ISSUE} of step {step.number} on threads {tids}; its "
                         "host work is read on one thread")
    elements = {}
    for k, r in enumerate(issue):
        sizes = input_elements(table.input_dims[r], lists=True)
        if not sizes:
            raise ValueError(f"{table.path}: {DDP_ISSUE} at {table.ts[r]:.0f} us has no tensor in its Input "
                             "Dims (record the trace with record_shapes=True): the bucket's size is unknown")
        elements[f"bucket_{k}"] = sizes[0]
    lo = float(table.ts[issue[-1]] + table.dur[issue[-1]])
    hi = max(float(table.ts[r] + table.dur[r]) for r in copies)
    if hi <= lo:
        raise ValueError(f"{table.path}: DDP's last {DDP_COPY_BACK} of step {step.number} ends before its last "
                         f"{DDP_ISSUE}: not one backward's buckets")
    elements["buckets"] = sum(elements.values())
    return [HookRange(DDP_FINALIZE, "finalize_backward", "buckets", 0, lo, hi, hi - lo, -1, tids[0], len(issue))], elements


@dataclass(frozen=True)
class DPRanges:
    """The hook ranges of one step and the parameter count of each one's unit."""
    kind: str           # fsdp2 | ddp
    hooks: list
    elements: dict      # unit -> parameters (FSDP2: the unit's; DDP: the bucket's, `buckets`: all)


def dp_ranges(table: TraceTable, step: Step) -> DPRanges | None:
    """FSDP2's hooks (`hook_ranges`), else DDP's (`ddp_ranges`) of `step`; None where it has neither."""
    hooks = hook_ranges(table, step)
    if hooks:
        return DPRanges("fsdp2", hooks, find_dp_flavour(table, step.number).unit_elements)
    hooks, elements = ddp_ranges(table, step)
    return DPRanges("ddp", hooks, elements) if hooks else None
