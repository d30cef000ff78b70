"""Which events of a trace become tasks of one iteration's graph.

CPU side: per thread, the leaves of the call tree (runtime calls always, CPU
ops that contain no other op), so a thread is a chain of non-overlapping tasks
and a parent op's self time becomes the gap between its children. Driver calls
nested inside a runtime call are folded into it.

A trace with no GPU op at all (a CPU-only rank, e.g. a gloo job profiled with
CPU activities only) keeps its user annotations in the call tree too: there
the childless ones are the work (`gloo:all_reduce` on the gloo threads, a step
whose ops were not recorded), and the iteration is the span of these tasks.

The CPU tasks come from the process the step annotation is on. A trace whose
step annotation sits in a process with no CPU op or runtime call inside it
(the Triton example: the step on one pid, the work on another) takes them
from the processes that have some, and says so (`TaskSelection.notes`).

GPU side: every kernel, memcpy and memset launched from inside the iteration,
plus the "carry-in" ops still queued or running when the iteration began
(launched in an earlier step, or before the profiler started, so without a
launcher in the window). Carry-in ops are kept as tasks anchored at their
measured start: they occupy their streams exactly as measured.

A GPU op is tied to its launch by correlation id only (`context.BuildContext`);
the `External id` is not read for that, so an offset or missing one changes
nothing. An op whose launch is not in the trace at all is unlaunched
(`UNLAUNCHED_REASONS`): its correlation id is below every runtime call's (CUPTI
numbers them in order: launched before the profiler started, a carry-in), or it
has none (roctracer writes 0 for some kernels), or no runtime call carries its
id (the record was lost). The last two cannot be placed in any step by their
launch: one that starts inside the window is taken as the step's own work.
Each is kept on its stream at its measured start, not tied to the host, and
counted by reason, so a replay says how many the graph holds that way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lumos import jit
from lumos.lean_numpy import unique
from lumos.trace import schema
from lumos.trace.steps import Step
from lumos.trace.table import TraceTable

# Timestamps are microseconds printed with nanosecond digits; sums of them differ in
# the last float bit. Back-to-back events closer than this do not nest.
CLOCK_EPS_US = 1e-3

# Why a GPU op of the graph has no launch call in the trace, in the order a replay names them:
# its correlation id is below every runtime call's; it has none; no runtime call carries it.
UNLAUNCHED_REASONS = {
    "before_profiler": "launched before the profiler started",
    "no_correlation": "without a correlation id",
    "launch_not_in_trace": "whose launch record is missing",
}


REASON_KEYS = tuple(UNLAUNCHED_REASONS)   # code k (1, 2, 3) is REASON_KEYS[k - 1]; 0: launched


def unlaunched_reasons(table: TraceTable, rows: np.ndarray) -> np.ndarray:
    """Per GPU row: 0 when a runtime call in the trace carries its correlation id, else the
    code of the reason there is none (REASON_KEYS). Correlation ids are positive: CUPTI
    numbers from 1, and 0 is what roctracer writes for a kernel it could not correlate."""
    runtime_ids = unique(table.corr[(table.cat == schema.RUNTIME) & (table.corr > 0)])
    corr = table.corr[rows]
    out = np.zeros(len(rows), dtype=np.int8)
    missing = (corr > 0) & ~np.isin(corr, runtime_ids)
    early = missing & (corr < runtime_ids[0]) if len(runtime_ids) else np.zeros(len(rows), bool)
    out[early] = 1
    out[corr <= 0] = 2
    out[missing & ~early] = 3
    return out


@dataclass
class TaskSelection:
    event: np.ndarray     # rows of the table, CPU tasks first then GPU tasks
    is_gpu: np.ndarray
    ts: np.ndarray
    dur: np.ndarray
    in_step: np.ndarray   # GPU ops launched inside the step
    carry_in: np.ndarray  # GPU ops not launched inside the step (anchored)
    window: tuple[float, float]
    notes: tuple[str, ...] = ()  # choices made for the user: CPU-only trace, CPU tasks from another process
    unlaunched: np.ndarray | None = None   # GPU ops with no launch call in the trace (anchored)
    unlaunched_counts: dict | None = None  # their number by reason (UNLAUNCHED_REASONS), zeros left out


def _thread_leaves(table: TraceTable, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Leaf events of one thread (rows sorted by start) and their clipped durations."""
    ts, dur = table.ts[rows], table.dur[rows]
    keep = _leaf_mask(np.ascontiguousarray(ts, dtype=np.float64), np.ascontiguousarray(ts + dur, dtype=np.float64),
                      table.cat[rows] == schema.RUNTIME, CLOCK_EPS_US)
    leaves = rows[keep]
    lts, ldur = ts[keep], dur[keep].copy()
    # Clock granularity can make siblings overlap by a microsecond: clip so the
    # thread stays a chain.
    if len(leaves) > 1:
        nxt = lts[1:]
        over = lts[:-1] + ldur[:-1] > nxt
        ldur[:-1][over] = np.maximum(nxt[over] - lts[:-1][over], 0.0)
    return leaves, ldur


def _leaf_mask(ts, end, is_runtime, eps) -> np.ndarray:
    """`_leaf_walk`, compiled (C, `lumos/kernels/walks.c`) where the kernels are built (`lumos.jit`),
    else in plain Python over lists (the same body)."""
    if jit.compiled():
        return _compiled_leaf_walk(ts, end, is_runtime, eps)
    return _leaf_walk(ts.tolist(), end.tolist(), is_runtime.tolist(), eps)


def _compiled_leaf_walk(ts, end, is_runtime, eps) -> np.ndarray:
    keep = np.empty(len(ts), dtype=np.bool_)
    jit.kernels().leaf_walk(np.ascontiguousarray(ts, dtype=np.float64), np.ascontiguousarray(end, dtype=np.float64),
                            np.ascontiguousarray(is_runtime, dtype=np.bool_), float(eps), keep)
    return keep


def _leaf_walk(ts, end, is_runtime, eps):
    """The call-tree walk of one thread (events by start): a task is a runtime call, or an op
    that no later event starts inside; an event inside a runtime call is folded into it."""
    n = len(ts)
    keep = np.zeros(n, dtype=np.bool_)
    stack_end = np.empty(n, dtype=np.float64)
    stack_idx = np.empty(n, dtype=np.int64)
    top = 0
    inside_runtime = 0.0  # end of the runtime call we are inside, if any
    for k in range(n):
        while top > 0 and ts[k] >= stack_end[top - 1] - eps:
            top -= 1
        if ts[k] < inside_runtime - eps:
            continue  # a driver call inside a runtime call: folded into it
        if top > 0:
            parent = stack_idx[top - 1]
            if not is_runtime[parent]:
                keep[parent] = False  # it has a child: not a leaf
        keep[k] = True
        if is_runtime[k]:
            inside_runtime = end[k]
        stack_end[top] = end[k]
        stack_idx[top] = k
        top += 1
    return keep


def _clip_stream_overlaps(table: TraceTable, rows: np.ndarray) -> np.ndarray:
    """GPU op durations, each cut to end where the next op on its stream starts.

    A stream runs one op at a time, but copy-engine and SM timestamps come from
    different clocks: real traces show a memcpy starting a microsecond or two
    before the kernel ahead of it ends. Cutting the earlier op keeps the stream
    a chain without moving any start.
    """
    dur = table.dur[rows].astype(np.float64).copy()
    if len(rows) < 2:
        return dur
    key = table.device[rows] * (1 << 32) + (table.stream[rows] & 0xFFFFFFFF)
    order = np.lexsort((table.ts[rows], key))
    ts_o, dur_o, key_o = table.ts[rows][order], dur[order], key[order]
    same = key_o[1:] == key_o[:-1]
    over = same & (ts_o[:-1] + dur_o[:-1] > ts_o[1:])
    dur_o[:-1][over] = np.maximum(ts_o[1:][over] - ts_o[:-1][over], 0.0)
    dur[order] = dur_o
    return dur


def select_tasks(table: TraceTable, step: Step | None) -> TaskSelection:
    """Tasks of `step` (or of the whole trace when `step` is None)."""
    cpu_only = not np.any(table.is_gpu())
    cpu_cats = (schema.CPU_OP, schema.RUNTIME, schema.ANNOTATION) if cpu_only else (schema.CPU_OP, schema.RUNTIME)
    cpu_mask = np.isin(table.cat, cpu_cats)
    notes = []
    if cpu_only:
        notes.append("CPU-only trace (no kernel, memcpy or memset): the iteration is the span of the CPU "
                     "tasks, user annotations included")
    if step is None:
        w0, w1 = float(table.ts.min()), float(table.end.max())
        cpu_pids = unique(table.pid[cpu_mask])
        notes.append("no step annotation (ProfilerStep#N): the whole trace is replayed as one iteration, every "
                     "step it holds together")
    else:
        w0, w1 = step.start, step.end
        cpu_pids = np.array([step.pid])
        in_time = cpu_mask & (table.ts >= w0) & (table.ts < w1)
        if not np.any(in_time & (table.pid == step.pid)) and np.any(in_time):
            cpu_pids = unique(table.pid[in_time])
            notes.append(f"{step.label} is annotated on pid {step.pid}, which has no CPU op or runtime call "
                         f"in it; CPU tasks taken from pid {', '.join(map(str, cpu_pids.tolist()))}")
    in_win = cpu_mask & (table.ts >= w0) & (table.ts < w1) & np.isin(table.pid, cpu_pids)
    cpu_rows = np.flatnonzero(in_win)
    order = np.lexsort((-table.dur[cpu_rows], table.ts[cpu_rows], table.tid[cpu_rows], table.pid[cpu_rows]))
    cpu_rows = cpu_rows[order]
    keys = table.pid[cpu_rows] * (1 << 32) + (table.tid[cpu_rows] & 0xFFFFFFFF)
    ev_parts, dur_parts = [], []
    bounds = np.flatnonzero(np.diff(keys)) + 1
    for rows in np.split(cpu_rows, bounds):
        if len(rows):
            leaves, ldur = _thread_leaves(table, rows)
            ev_parts.append(leaves)
            dur_parts.append(ldur)
    cpu_ev = np.concatenate(ev_parts) if ev_parts else np.zeros(0, np.int64)
    cpu_dur = np.concatenate(dur_parts) if dur_parts else np.zeros(0)

    gpu_rows = np.flatnonzero(table.is_gpu())
    why = unlaunched_reasons(table, gpu_rows)
    runtime_in_win = in_win & (table.cat == schema.RUNTIME)
    step_corr = unique(table.corr[runtime_in_win])
    step_corr = step_corr[step_corr > 0]
    launched_here = np.isin(table.corr[gpu_rows], step_corr)
    if step is None:
        launched_here[:] = True
    else:
        # no launch to place it in a step by: it belongs to the step it starts in
        unplaced = why >= 2   # no correlation id, or no runtime call carries it
        launched_here |= unplaced & (table.ts[gpu_rows] >= w0) & (table.ts[gpu_rows] < w1)
    step_ops = gpu_rows[launched_here]
    if len(step_ops):
        last_end = float(table.end[step_ops].max())
        # Launched after the window: the next iteration's work, not ours.
        later_corr = unique(table.corr[(table.cat == schema.RUNTIME) & (table.ts >= w1)])
        other = gpu_rows[~launched_here]
        carry = other[(table.end[other] > w0) & (table.ts[other] < last_end)
                      & ~np.isin(table.corr[other], later_corr)]
    else:
        carry = np.zeros(0, np.int64)
    gpu_ev = np.concatenate([step_ops, carry])
    gpu_why = np.concatenate([why[launched_here], why[np.searchsorted(gpu_rows, carry)]])
    n_cpu = len(cpu_ev)
    event = np.concatenate([cpu_ev, gpu_ev]).astype(np.int64)
    is_gpu = np.zeros(len(event), dtype=bool)
    is_gpu[n_cpu:] = True
    in_step = np.zeros(len(event), dtype=bool)
    in_step[n_cpu:n_cpu + len(step_ops)] = True
    carry_in = np.zeros(len(event), dtype=bool)
    carry_in[n_cpu + len(step_ops):] = True
    unlaunched = np.zeros(len(event), dtype=bool)
    unlaunched[n_cpu:] = gpu_why > 0
    counts = dict(zip(REASON_KEYS, np.bincount(gpu_why, minlength=4)[1:].tolist()))
    gpu_dur = _clip_stream_overlaps(table, gpu_ev)
    dur = np.concatenate([cpu_dur, gpu_dur])
    return TaskSelection(event=event, is_gpu=is_gpu, ts=table.ts[event].astype(np.float64),
                         dur=dur.astype(np.float64), in_step=in_step, carry_in=carry_in, window=(w0, w1),
                         notes=tuple(notes), unlaunched=unlaunched,
                         unlaunched_counts={k: n for k, n in counts.items() if n})
