"""Program order on a processor: intra-thread (CPU) and intra-stream (GPU FIFO)."""

from __future__ import annotations

from ..context import BuildContext, EdgeList


def _chains(ctx: BuildContext, want_gpu: int) -> EdgeList:
    out = EdgeList()
    for tasks in ctx.proc_tasks:
        if len(tasks) < 2 or ctx.proc_kind[ctx.proc[tasks[0]]] != want_gpu:
            continue
        out.extend(tasks[:-1], tasks[1:])
    return out


def intra_thread_edges(ctx: BuildContext) -> EdgeList:
    """Each CPU task after the previous one on its thread."""
    return _chains(ctx, 0)


def intra_stream_edges(ctx: BuildContext) -> EdgeList:
    """Each GPU op after the previous one on its stream (CUDA streams are FIFO)."""
    return _chains(ctx, 1)
