"""CPU -> CPU across threads, inferred from significant execution gaps.

Kineto records no cross-thread link, so, as in the Lumos paper, a gap longer
than `threshold_us` before a task is taken as blocking: the task waited for
the task on another thread of the same process that ended last inside the gap
(e.g. the first backward op waits for the last forward op). Polling threads
(NCCL watchdogs, negative tids, cudaEventQuery loops) never explain a gap.
"""

from __future__ import annotations

import numpy as np

from lumos.trace import schema

from ..context import BuildContext, EdgeList

HOW = "gap rule"


def inter_thread_edges(ctx: BuildContext, threshold_us: float) -> EdgeList:
    out = EdgeList()
    cpu = np.flatnonzero(~ctx.is_gpu)
    usable = np.array([n not in schema.POLLING_CALLS for n in ctx.name[cpu]], dtype=bool) & (ctx.tid[cpu] >= 0)
    cand = cpu[usable]
    if len(cand) == 0:
        return out
    order = np.argsort(ctx.end[cand], kind="stable")
    cand, cand_end = cand[order], ctx.end[cand][order]
    cand_thread = ctx.thread_key[cand]
    w0 = ctx.sel.window[0]
    for tasks in ctx.proc_tasks:
        if not len(tasks) or ctx.proc_kind[ctx.proc[tasks[0]]] != 0:
            continue
        prev_end = np.concatenate([[w0], ctx.end[tasks[:-1]]])
        gaps = ctx.ts[tasks] - prev_end
        for v, gap, gap_start in zip(tasks[gaps > threshold_us], gaps[gaps > threshold_us],
                                     prev_end[gaps > threshold_us]):
            # latest task on another thread that ended inside the gap
            hi = np.searchsorted(cand_end, ctx.ts[v] + 1e-9, side="right")
            lo = np.searchsorted(cand_end, gap_start, side="left")
            for k in range(hi - 1, lo - 1, -1):
                if cand_thread[k] != ctx.thread_key[v]:
                    out.add(cand[k], v, inferred=True, how=HOW)
                    break
    return out
