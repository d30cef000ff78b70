"""CPU -> GPU: the runtime call that put an op on a stream, matched by correlation id.

Covers every call that puts work on a stream (`schema.LAUNCH_CALLS`):
cudaLaunchKernel(ExC), the driver API's cuLaunchKernel(Ex) (Triton and other
JIT kernels), cudaMemcpyAsync, cudaMemsetAsync, their HIP twins
(hipLaunchKernel, hipExtModuleLaunchKernel, hipMemcpyWithStream, ...) and
cudaGraphLaunch, which fans out to every op of the graph (they all carry the
launch's correlation id). The match is by correlation id, not by name. GPU ops whose launcher is not in the window have
no launch edge; the task selection anchors them instead.
"""

from __future__ import annotations

import numpy as np

from ..context import BuildContext, EdgeList


def launch_edges(ctx: BuildContext) -> EdgeList:
    out = EdgeList()
    g = np.flatnonzero(ctx.launcher >= 0)
    out.extend(ctx.launcher[g], g)
    return out
