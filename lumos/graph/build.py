"""Build one rank's execution graph from a trace: tasks, then each edge class.

`build_graph(table, step, edge_classes=...)` is also how an ablation drops a
class: lags are fitted on the full graph first, then the dropped classes are
removed (`ablate.drop_classes`), so no other edge silently absorbs what a
dropped edge explained.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from lumos.trace import EmptyStepError, TraceTable, schema
from lumos.trace.comm_kernels import count_by_rule
from lumos.trace.errors import format_counts
from lumos.trace.steps import Step, find_steps, select_step

from .context import BuildContext
from .edges.inter_stream import inter_stream_edges
from .edges.inter_thread import inter_thread_edges
from .edges.launch import launch_edges
from .edges.order import intra_stream_edges, intra_thread_edges
from .edges.sync import sync_edges
from .edges.waits import wait_edges
from .ablate import drop_classes
from .model import ALL_EDGE_CLASSES, EdgeClass, Graph, TaskKind, WaitKind
from .tasks import UNLAUNCHED_REASONS, select_tasks
from .timing import fit_timing

DEFAULT_GAP_THRESHOLD_US = 100.0
# A carried-in op that started at most this long after the op ahead of it on its stream
# ended was queued behind it (the stream's own back-to-back gap is a few microseconds).
BACKLOG_GAP_US = 10.0


def resolve_step(table: TraceTable, step) -> Step | None:
    if isinstance(step, Step):
        return step
    if step is None and not find_steps(table):
        return None  # a trace without iterations (a microbenchmark): use all of it
    return select_step(table, step)


def check_not_empty(table: TraceTable, step: Step | None, sel) -> None:
    """Refuse a step with no CPU task and no GPU op launched in it: its replay would be zeros."""
    if np.any(~sel.is_gpu) or np.any(sel.in_step):
        return
    steps = find_steps(table)
    have = ", ".join(f"#{s.number} ({(s.end - s.start) / 1e3:.3f} ms)" for s in steps) or "none"
    what = "the trace" if step is None else f"step {step.number} ({step.label}, {(step.end - step.start) / 1e3:.3f} ms)"
    unmodelled = (f"; device events of categories not modelled: {format_counts(table.unmodelled)}"
                  if table.unmodelled else "")
    raise EmptyStepError(table.path, f"{what} holds nothing to replay: no CPU op, runtime call or GPU op "
                                     f"launched in it. Steps in the trace: {have}; events by category: "
                                     f"{format_counts(table.category_counts())}{unmodelled}")


def build_graph(table: TraceTable, step=None, edge_classes: Iterable[EdgeClass] = ALL_EDGE_CLASSES,
                gap_threshold_us: float = DEFAULT_GAP_THRESHOLD_US) -> Graph:
    step = resolve_step(table, step)
    sel = select_tasks(table, step)
    check_not_empty(table, step, sel)
    ctx = BuildContext(table, sel)
    keep = frozenset(EdgeClass(c) for c in edge_classes)

    parts = [
        (EdgeClass.INTRA_THREAD, intra_thread_edges(ctx)),
        (EdgeClass.INTER_THREAD, inter_thread_edges(ctx, gap_threshold_us)),
        (EdgeClass.LAUNCH, launch_edges(ctx)),
        (EdgeClass.INTRA_STREAM, intra_stream_edges(ctx)),
        (EdgeClass.INTER_STREAM, inter_stream_edges(ctx)),
    ]
    sync = sync_edges(ctx)
    waits = wait_edges(ctx)
    parts += [(EdgeClass.SYNC, sync.edges), (EdgeClass.SYNC, waits.edges)]
    src = np.concatenate([np.asarray(e.src, dtype=np.int64) for _, e in parts])
    dst = np.concatenate([np.asarray(e.dst, dtype=np.int64) for _, e in parts])
    cls = np.concatenate([np.full(len(e), c, dtype=np.int8) for c, e in parts])
    inferred = np.concatenate([np.asarray(e.inferred, dtype=bool) for _, e in parts])
    how: dict[str, int] = {}
    for _, e in parts:
        for k, n in e.how.items():
            how[k] = how.get(k, 0) + n

    n_before = len(src) - len(waits.edges)
    base_lag = np.concatenate([np.zeros(n_before), np.asarray(waits.lag, dtype=np.float64)])
    # A GPU -> CPU edge is a wait inside its destination call unless it follows a blocking copy.
    holds = (cls == EdgeClass.SYNC) & ~ctx.is_gpu[dst]
    holds[n_before:] = np.asarray(waits.holds, dtype=bool)
    anchored = backlog_anchors(ctx, sel.carry_in | sel.unlaunched)
    timing = fit_timing(ctx, src, dst, cls, sync.wait_kind, sync.wait_target, anchored,
                        base_lag=base_lag, holds=holds, call_dur=waits.call_dur)
    violations_by_class = {c.label: int(np.sum(timing.violations & (cls == c))) for c in EdgeClass}

    rank = np.full(ctx.n, table.rank, dtype=np.int32)
    rules = schema.comm_kernel_rules(ctx.name)
    comm = ctx.is_gpu & np.fromiter((r is not None for r in rules.tolist()), bool, count=ctx.n)
    graph = Graph(
        name=ctx.name.copy(), kind=ctx.is_gpu.astype(np.int8), proc=ctx.proc, dur=timing.dur,
        ts=timing.ts, release=timing.release,
        comm=comm,
        in_step=sel.in_step, rank=rank, stream_pos=ctx.stream_pos, wait_kind=sync.wait_kind,
        wait_target=np.where(sync.wait_kind == WaitKind.DEVICE, table.rank, sync.wait_target).astype(np.int32),
        event=sel.event, layer=np.full(ctx.n, -1, np.int32), phase=np.full(ctx.n, -1, np.int8),
        proc_kind=ctx.proc_kind, proc_rank=np.full(len(ctx.proc_kind), table.rank, np.int32),
        proc_key=ctx.proc_key, proc_name=_proc_names(ctx),
        src=src, dst=dst, cls=cls, lag=timing.lag, inferred=inferred,
    )
    graph.summary = {
        "trace": table.path,
        "rank": table.rank,
        "step": None if step is None else step.number,
        "window_us": list(sel.window),
        "tasks": int(ctx.n),
        "cpu_tasks": int(np.sum(~ctx.is_gpu)),
        "gpu_tasks": int(np.sum(ctx.is_gpu)),
        "carry_in_gpu_ops": int(np.sum(sel.carry_in)),
        "carry_in_anchored": int(np.sum(anchored & sel.carry_in)),
        "edges": graph.edge_counts(),
        "edge_classes": sorted(c.label for c in EdgeClass),
        "inferred_edges": int(np.sum(inferred)),
        "inferred_how": how,
        "sync_waits": {"explicit": sync.explicit_waits, "inferred": sync.inferred_waits},
        "blocking_copies": waits.blocking_copies,
        "stalled_calls": {"count": waits.stalled_calls, "waiting_us": round(waits.stalled_us, 3)},
        # the graph's communication kernels by the rule that classified them (lumos.trace.comm_kernels)
        "comm_kernels": count_by_rule(rules[comm].tolist()),
        "violations": int(np.sum(timing.violations)),
        "violations_by_class": violations_by_class,
        "gap_threshold_us": gap_threshold_us,
        # the iteration is the step period on this thread (lumos.analysis.replay.step_window)
        "step_thread": step_thread(ctx, step, timing),
        # what the reader or the task selection decided for the user, in words
        "notes": ([step.note] if step is not None and step.note else []) + list(sel.notes),
        # GPU ops with no launch call in the trace, by reason (tasks.UNLAUNCHED_REASONS)
        "unlaunched_gpu_ops": dict(sel.unlaunched_counts),
        **({"unlaunched_note": unlaunched_note(ctx, sel.unlaunched_counts)} if sel.unlaunched_counts else {}),
        "unmodelled_device_events": dict(table.unmodelled),
        **({"unmodelled_device_us": {k: round(v, 3) for k, v in table.unmodelled_us.items()},
            "unmodelled_note": table.unmodelled_note()} if table.unmodelled else {}),
    }
    # Ablation: drop classes only now, after the lags were fitted on the full graph.
    return drop_classes(graph, set(EdgeClass) - keep)


def unlaunched_note(ctx: BuildContext, counts: dict[str, int]) -> str:
    """'N GPU ops with no launch call in the trace (n reason, ...; first: NAME on stream S, correlation C,
    at T ms from the window's start): kept on ...', for a replay's output."""
    why = ", ".join(f"{n} {UNLAUNCHED_REASONS[k]}" for k, n in counts.items())
    ops = np.flatnonzero(ctx.sel.unlaunched)
    first = int(ops[np.lexsort((ctx.sel.event[ops], ctx.ts[ops]))[0]])
    name = str(ctx.name[first])
    name = name if len(name) <= 60 else name[:57] + "..."
    at = (ctx.ts[first] - ctx.sel.window[0]) / 1e3
    return (f"{sum(counts.values())} GPU ops with no launch call in the trace ({why}; first: {name!r} on stream "
            f"{ctx.stream[first]}, correlation {ctx.corr[first]}, at {at:+.3f} ms from the window's start): kept "
            f"on their streams from their measured start, not tied to the host")


def step_thread(ctx: BuildContext, step: Step | None, timing) -> dict | None:
    """Where the step period is read (lumos.analysis.replay.step_window): the thread that marks
    steps, its first task, and its untraced time before that task (head) and after its last
    (tail). None without a step or when that thread has no task (the step is then the GPU span)."""
    if step is None:
        return None
    key = (int(step.pid) << 32) | (int(step.tid) & 0xFFFFFFFF)
    procs = np.flatnonzero((ctx.proc_kind == TaskKind.CPU) & (ctx.proc_key == key))
    if not len(procs):
        return None
    tasks = ctx.proc_tasks[int(procs[0])]
    first = int(tasks[np.argmin(timing.ts[tasks])])
    return {"key": key, "start_us": float(step.start), "end_us": float(step.end), "first_task": first,
            "head_us": float(timing.ts[first] - step.start),
            "tail_us": float(step.end - (timing.ts[tasks] + timing.dur[tasks]).max())}


def backlog_anchors(ctx: BuildContext, carry_in: np.ndarray) -> np.ndarray:
    """Carried-in GPU ops (and ops with no launch call in the trace) pinned at their measured
    start: the first on each stream, and any that started after its stream had gone idle (it
    waited for something outside the window).

    The others were queued back to back behind it: they follow the op ahead of them with
    the measured gap, so the backlog drains later or sooner when its durations change.
    """
    anchored = carry_in.copy()
    for ops in ctx.proc_tasks:
        if len(ops) < 2 or not ctx.is_gpu[ops[0]]:
            continue
        prev, cur = ops[:-1], ops[1:]
        queued = carry_in[prev] & carry_in[cur] & (ctx.ts[cur] - ctx.end[prev] <= BACKLOG_GAP_US)
        anchored[cur[queued]] = False
    return anchored


def _proc_names(ctx: BuildContext) -> np.ndarray:
    names = np.empty(len(ctx.proc_kind), dtype=object)
    for p, (kind, key) in enumerate(zip(ctx.proc_kind, ctx.proc_key)):
        hi, lo = int(key) >> 32, int(key) & 0xFFFFFFFF
        if lo >= 1 << 31:
            lo -= 1 << 32
        names[p] = f"stream {lo} (GPU {hi})" if kind == TaskKind.GPU else f"thread {lo} (pid {hi})"
    return names
