"""GPU -> CPU: time a call spent waiting for the GPU, tied to the work it waited for.

A measured call duration that holds a wait for the GPU carries that wait with
it when durations change (from another iteration, or a what-if). Two waits
are recognised from the trace's own timing, and each becomes an edge from
the GPU op waited for, the call's replay duration keeping only the part that
was not waiting:

- A blocking copy: cudaMemcpy/cudaMemset (and their HIP twins) always, and a
  cudaMemcpyAsync whose copy ran inside the call (from or to pageable host
  memory the runtime stages the data and returns when the copy is done). The
  call launches the copy and then waits for it, so the wait cannot sit on the
  call itself (the copy depends on the call): the call keeps the part before
  the copy could start, and an edge from the copy to the thread's next task
  holds the rest (lag = call end - copy end, plus the gap to that task).
  Names that say the host side is pinned ("Pinned -> Device") or that the
  copy stays on the device never block.
- A stalled call: any other runtime call far longer than usual for its name
  (a launch finding the launch queue full, an allocation that synchronizes)
  that returned just after a GPU op it could have been waiting for ended: an
  op already queued when the call began. The call waits for that op, like an
  event sync; its replay duration is the part after the op ended.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from lumos.lean_numpy import median_by_key
from lumos.trace import schema

from ..context import BuildContext, EdgeList

# A pageable copy's call returns a little before its DMA is reported done (the
# last chunk is handed over; clocks differ): allow this much, at most a quarter of the copy.
COPY_END_SLACK_US = 50.0
# A call is stalled when it took this many times its name's median, and this much longer.
STALL_FACTOR = 4.0
STALL_MIN_EXCESS_US = 20.0
# The op it waited for ended at most this long before the call returned.
STALL_RETURN_US = 25.0
CLOCK_TOL_US = 1.0


@dataclass
class WaitResult:
    edges: EdgeList
    lag: list = field(default_factory=list)     # base lag per edge
    holds: list = field(default_factory=list)   # True: the wait is inside the edge's destination call
    call_dur: dict = field(default_factory=dict)  # blocking-copy call -> replay duration (the part before its copy)
    blocking_copies: int = 0
    stalled_calls: int = 0
    stalled_us: float = 0.0

    def add(self, src: int, dst: int, lag: float, holds: bool, how: str | None = None) -> None:
        self.edges.add(src, dst, inferred=how is not None, how=how)
        self.lag.append(float(lag))
        self.holds.append(bool(holds))


def may_block(name: str) -> bool:
    """A copy whose host side is pinned, or that stays on the device, never blocks its call."""
    if "->" not in name:
        return True  # older schemas do not say: timing decides
    return "Pageable" in name


def _next_on_thread(ctx: BuildContext, v: int) -> int:
    thread = ctx.proc_tasks[ctx.proc[v]]
    pos = int(np.searchsorted(ctx.ts[thread], ctx.ts[v], side="right"))
    while pos < len(thread) and thread[pos] == v:
        pos += 1
    return int(thread[pos]) if pos < len(thread) else -1


def _stream_prev_end(ctx: BuildContext, g: int) -> float:
    ops = ctx.proc_tasks[ctx.proc[g]]
    k = int(ctx.stream_pos[g])
    return float(ctx.end[ops[k - 1]]) if k > 0 else -np.inf


def blocking_copies(ctx: BuildContext, out: WaitResult) -> set[int]:
    """Edges copy -> next task for every call that waited for its own copy; returns those calls."""
    gpu = np.flatnonzero(ctx.is_gpu & (ctx.launcher >= 0) & np.isin(ctx.cat, (schema.MEMCPY, schema.MEMSET)))
    by_call: dict[int, int] = {}
    for g in gpu:
        c = int(ctx.launcher[g])
        if c not in by_call or ctx.end[g] > ctx.end[by_call[c]]:
            by_call[c] = int(g)
    calls = set()
    for c, g in by_call.items():
        always = ctx.name[c] in schema.BLOCKING_COPY_CALLS
        inside = (ctx.ts[g] >= ctx.ts[c] - CLOCK_TOL_US
                  and ctx.end[g] <= ctx.end[c] + min(COPY_END_SLACK_US, 0.25 * ctx.dur[g]) + CLOCK_TOL_US)
        if not (always or (inside and may_block(str(ctx.name[g])))):
            continue
        n = _next_on_thread(ctx, c)
        if n < 0 or ctx.end[g] > ctx.ts[n] + COPY_END_SLACK_US + CLOCK_TOL_US:
            continue  # nothing on the thread after it, or the thread went on before the copy ended
        # The call's own work: up to the copy's start, less any time the copy queued behind the stream.
        start_from = max(float(ctx.ts[c]), _stream_prev_end(ctx, g))
        pre = float(np.clip(ctx.ts[g] - start_from, 0.0, ctx.dur[c]))
        out.call_dur[c] = pre
        out.add(g, n, lag=min(float(ctx.end[c]), float(ctx.ts[n])) - float(ctx.end[g]), holds=False)
        calls.add(c)
    out.blocking_copies = len(calls)
    return calls


def stalled_calls(ctx: BuildContext, out: WaitResult, skip: set[int], enq: np.ndarray) -> None:
    """Edges op -> call for runtime calls that sat waiting for an already queued GPU op to end."""
    runtime = np.flatnonzero(~ctx.is_gpu & (ctx.cat == schema.RUNTIME))
    if not len(runtime):
        return
    names = ctx.name[runtime]
    gpu = np.flatnonzero(ctx.is_gpu)
    order = gpu[np.argsort(ctx.end[gpu], kind="stable")]
    ends = ctx.end[order]
    exempt = schema.STREAM_SYNC_CALLS | schema.DEVICE_SYNC_CALLS | schema.EVENT_SYNC_CALLS | schema.POLLING_CALLS
    d_of = ctx.dur[runtime].astype(np.float64)
    m_of = median_by_key(names.astype(str), d_of)
    long = ~(d_of < STALL_FACTOR * m_of) & ~(d_of - m_of < STALL_MIN_EXCESS_US)
    long &= ~np.isin(names, list(exempt)) & ~np.isin(runtime, np.fromiter(skip, dtype=np.int64, count=len(skip)))
    for c in runtime[long]:   # the calls that took far longer than their name's median
        k = int(np.searchsorted(ends, ctx.end[c] + CLOCK_TOL_US, side="right")) - 1
        while k >= 0 and ends[k] >= ctx.end[c] - STALL_RETURN_US:
            w = int(order[k])
            if enq[w] <= ctx.ts[c] and ends[k] > ctx.ts[c] and ctx.launcher[w] != c:
                out.add(w, int(c), lag=0.0, holds=True, how="call returned when a queued GPU op ended (stall)")
                out.stalled_calls += 1
                out.stalled_us += float(min(ends[k], ctx.end[c]) - ctx.ts[c])
                break
            k -= 1


def wait_edges(ctx: BuildContext) -> WaitResult:
    out = WaitResult(EdgeList())
    calls = blocking_copies(ctx, out)
    stalled_calls(ctx, out, calls, ctx.enqueue_time())
    return out
