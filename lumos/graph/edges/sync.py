"""GPU -> CPU: calls that block a thread until GPU work is done.

- cudaStreamSynchronize waits for whatever is last on its stream when it
  starts: a run-time dependency (WaitKind.STREAM), resolved by the simulator.
- cudaDeviceSynchronize does the same for every stream of the device
  (WaitKind.DEVICE).
- cudaEventSynchronize waits for the op its event recorded: a static edge.

Calls that wait for their own copy, and calls stalled on queued work, are in
`waits`. HIP twins (hipStreamSynchronize, hipDeviceSynchronize,
hipEventSynchronize) are the same calls under ROCm names; `schema` maps
them, so the rules above never test a vendor's name.

The stream of a stream sync comes from the CUPTI `cuda_sync` record when the
trace has one (`stream` arg). Otherwise it is inferred: the stream of the GPU
op that finished last while the call was blocked, else of the op the thread
launched last.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lumos.lean_numpy import unique
from lumos.trace import schema

from ..context import BuildContext, EdgeList
from ..model import WaitKind


@dataclass
class SyncResult:
    edges: EdgeList
    wait_kind: np.ndarray
    wait_target: np.ndarray  # processor id (STREAM) or device (DEVICE)
    inferred_waits: int
    explicit_waits: int


def _sync_records(ctx: BuildContext) -> dict[int, int]:
    t = ctx.table
    rows = np.flatnonzero(t.cat == schema.SYNC)
    return {int(t.corr[r]): int(r) for r in rows if t.corr[r] >= 0}


def recorded_op(ctx: BuildContext, record_task: int, stream_proc: int) -> int:
    """The op an event captured: the last op on `stream_proc` launched before the record call."""
    if stream_proc < 0:
        return -1
    return ctx.last_on_stream(stream_proc, "launch", ctx.ts[record_task])


def _finished_during(ctx: BuildContext, v: int, enq: np.ndarray, gpu: np.ndarray) -> int:
    """The GPU op, launched before `v` started, that ended last while `v` was blocked."""
    ok = gpu[(enq[gpu] <= ctx.ts[v]) & (ctx.end[gpu] > ctx.ts[v]) & (ctx.end[gpu] <= ctx.end[v] + 1.0)]
    if not len(ok):
        return -1
    return int(ok[np.argmax(ctx.end[ok])])


def _infer_stream(ctx: BuildContext, v: int, enq: np.ndarray) -> int:
    """The stream a stream sync most likely waited on, consistent with the timeline.

    A stream qualifies only if the last op visible on it when the call began
    ended before the call returned. Among those, the one whose op ended last
    inside the call is the one the call waited for; if none ended inside it,
    the call did not block, and the stream the thread launched to last is taken.
    """
    best, best_end, consistent = -1, -np.inf, []
    for p, ops in enumerate(ctx.proc_tasks):
        if not len(ops) or ctx.proc_kind[p] != 1:
            continue
        last = ctx.last_enqueued(p, ctx.ts[v])
        if last < 0:
            continue
        e = ctx.end[last]
        if e > ctx.end[v] + 1.0:
            continue
        consistent.append(p)
        if e > ctx.ts[v] and e > best_end:
            best, best_end = p, e
    if best >= 0 or not consistent:
        return best
    gpu = np.flatnonzero(ctx.is_gpu & (ctx.launcher >= 0))
    mine = gpu[(enq[gpu] <= ctx.ts[v]) & (ctx.thread_key[ctx.launcher[gpu]] == ctx.thread_key[v])]
    mine = mine[np.isin(ctx.proc[mine], consistent)]
    return int(ctx.proc[mine[np.argmax(enq[mine])]]) if len(mine) else int(consistent[0])


def sync_edges(ctx: BuildContext) -> SyncResult:
    out = EdgeList()
    wait_kind = np.zeros(ctx.n, dtype=np.int8)
    wait_target = np.full(ctx.n, -1, dtype=np.int32)
    records = _sync_records(ctx)
    enq = ctx.enqueue_time()
    gpu = np.flatnonzero(ctx.is_gpu)
    n_inferred = n_explicit = 0
    calls = schema.STREAM_SYNC_CALLS | schema.DEVICE_SYNC_CALLS | schema.EVENT_SYNC_CALLS
    for v in np.flatnonzero(~ctx.is_gpu & (ctx.cat == schema.RUNTIME) & np.isin(ctx.name, list(calls))):
        name = ctx.name[v]
        rec = records.get(int(ctx.corr[v]))
        if name in schema.STREAM_SYNC_CALLS:
            proc = -1
            if rec is not None and ctx.table.stream[rec] >= 0:
                dev = ctx.table.device[rec]
                proc = ctx.proc_of_stream(int(dev), int(ctx.table.stream[rec]))
                n_explicit += proc >= 0
            if proc < 0:
                proc = _infer_stream(ctx, v, enq)
                n_inferred += proc >= 0
            if proc >= 0:
                wait_kind[v] = WaitKind.STREAM
                wait_target[v] = proc
        elif name in schema.DEVICE_SYNC_CALLS:
            devices = unique(ctx.device[gpu])
            if len(devices):
                wait_kind[v] = WaitKind.DEVICE
                wait_target[v] = int(devices[0])
                n_explicit += 1
        elif name in schema.EVENT_SYNC_CALLS:
            g = -1
            if rec is not None and ctx.table.wait_corr[rec] >= 0:
                record_task = int(ctx.runtime_of([ctx.table.wait_corr[rec]])[0])
                dev = ctx.table.device[rec]
                proc = ctx.proc_of_stream(int(dev), int(ctx.table.wait_stream[rec]))
                if record_task >= 0:
                    g = recorded_op(ctx, record_task, proc)
                if g >= 0:
                    out.add(g, v)
                    continue
            g = _finished_during(ctx, v, enq, gpu)
            if g >= 0:
                out.add(g, v, inferred=True, how="event sync: op that ended during the call")
    return SyncResult(out, wait_kind, wait_target, n_inferred, n_explicit)
