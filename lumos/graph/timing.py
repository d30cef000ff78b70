"""Edge lags, release times and sync durations, fitted once on the full graph.

Replay must reproduce the measured timeline when nothing changes, and must
keep each measured gap attached to the dependency that explains it when
something does change. For every task the binding constraint in the measured
timeline (the in-edge whose source ended last) carries the task's remaining
slack as its lag: a host gap on the intra-thread edge, launch latency on the
launch edge, a queue wait on the intra-stream edge. A task nothing constrains
is anchored at its measured start. A sync call's host gap (from its binding
constraint to the call's measured start) is that edge's lag too, whether or
not the call then waited. A blocking sync's duration is the part after the
GPU work it waited for ended; a call that waited for its own copy keeps the
part before the copy (`edges.waits`), the edge from the copy holding the
rest as a lag.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .context import BuildContext
from .model import EdgeClass, WaitKind

VIOLATION_TOLERANCE_US = 1.0


@dataclass
class Timing:
    ts: np.ndarray        # effective measured start (after a sync's wait)
    dur: np.ndarray
    lag: np.ndarray
    release: np.ndarray
    violations: np.ndarray  # bool per edge: the measured timeline contradicts it


def resolve_wait_targets(ctx: BuildContext, wait_kind, wait_target) -> np.ndarray:
    """Measured end of the GPU work each run-time wait resolves to (-inf if none)."""
    out = np.full(ctx.n, -np.inf)
    for v in np.flatnonzero(wait_kind != WaitKind.NONE):
        if wait_kind[v] == WaitKind.STREAM:
            procs = [int(wait_target[v])]
        else:
            procs = [p for p in range(len(ctx.proc_kind))
                     if ctx.proc_kind[p] == 1 and (ctx.proc_key[p] >> 32) == wait_target[v]]
        best = -np.inf
        for p in procs:
            last = ctx.last_enqueued(p, ctx.ts[v])
            if last >= 0:
                best = max(best, ctx.end[last])
        out[v] = best
    return out


def fit_timing(ctx: BuildContext, src, dst, cls, wait_kind, wait_target, anchored,
               base_lag=None, holds=None, call_dur=None) -> Timing:
    """`base_lag`: lag each edge starts from (a blocking copy's edge: call end - copy end);
    `holds`: GPU -> CPU edges whose wait is inside their destination call (default: every one);
    `call_dur`: replay durations of calls that waited for their own copy."""
    ts = ctx.ts.copy()
    dur = ctx.dur.copy()
    for c, d in (call_dur or {}).items():
        dur[c] = d
    end = ts + dur
    waited = resolve_wait_targets(ctx, wait_kind, wait_target)
    # A static GPU -> CPU edge (event sync, stalled call) blocks its call the same way.
    static_sync = (cls == EdgeClass.SYNC) & ~ctx.is_gpu[dst] if holds is None else holds
    np.maximum.at(waited, dst[static_sync], end[src[static_sync]])
    blocked = waited > ts
    ts[blocked] = np.minimum(waited[blocked], end[blocked])
    dur[blocked] = end[blocked] - ts[blocked]

    lag = np.zeros(len(src)) if base_lag is None else np.asarray(base_lag, dtype=np.float64).copy()
    # A GPU op may start before its launch call returns: the launch edge then
    # points at the moment of submission, not the call's end.
    launch = cls == EdgeClass.LAUNCH
    early = launch & (ts[dst] < end[src])
    lag[early] = np.maximum(ts[dst[early]] - end[src[early]], -dur[src[early]])
    ready_at = end[src] + lag
    violations = ready_at > ts[dst] + VIOLATION_TOLERANCE_US
    # Within the tolerance the measured overlap is clock skew (SM vs copy-engine vs host clocks):
    # the lag absorbs it, so an unchanged replay starts the task where it was measured.
    skew = ~violations & (ready_at > ts[dst])
    lag[skew] -= ready_at[skew] - ts[dst[skew]]
    ready_at[skew] = ts[dst[skew]]

    release = np.full(ctx.n, -np.inf)
    has_in = np.zeros(ctx.n, dtype=bool)
    has_in[dst] = True
    roots = ~has_in | anchored
    release[roots] = ts[roots]
    if len(src):
        order = np.lexsort((ready_at, dst))
        last = np.ones(len(order), dtype=bool)
        last[:-1] = dst[order][1:] != dst[order][:-1]
        binding = order[last]
        v = dst[binding]
        # The host's own time before the task began (a gap between top-level ops, Python) is
        # the binding edge's lag even where the task then waited for the GPU: measured from
        # the call's start, not from the end of its wait, so a replay in which the GPU is done
        # sooner still finds the host busy until then.
        slack = ctx.ts[v] - ready_at[binding]
        give = (slack > 0) & ~anchored[v]
        lag[binding[give]] += slack[give]
    return Timing(ts=ts, dur=dur, lag=lag, release=release, violations=violations)
