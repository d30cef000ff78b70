"""CPU -> GPU: the runtime call that put an op on a stream, matched by correlation id.

Covers cudaLaunchKernel(ExC), cuLaunchKernel, cudaMemcpyAsync, cudaMemsetAsync
and cudaGraphLaunch, which fans out to every op of the graph (they all carry
the launch's correlation id). GPU ops whose launcher is not in the window have
no launch edge; the task selection anchors them instead.
"""

from __future__ import annotations

import numpy as np

from ..context import BuildContext, EdgeList


def launch_edges(ctx: BuildContext) -> EdgeList:
    out = EdgeList()
    for g in np.flatnonzero(ctx.launcher >= 0):
        out.add(ctx.launcher[g], g)
    return out
