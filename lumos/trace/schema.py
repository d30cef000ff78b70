"""Kineto categories, old and new, mapped onto one small set of codes.

PyTorch 1.9-era traces say `Operator`/`Runtime`/`Kernel`/`Memcpy`/`Memset`;
PyTorch 2.x says `cpu_op`/`cuda_runtime`/`kernel`/`gpu_memcpy`/`gpu_memset`.
The rest of the project only ever sees the codes below.
"""

from __future__ import annotations

import re

CPU_OP, ANNOTATION, RUNTIME, KERNEL, MEMCPY, MEMSET, SYNC, GPU_ANNOTATION = range(8)
CATEGORY_NAMES = ("cpu_op", "user_annotation", "cuda_runtime", "kernel", "gpu_memcpy",
                  "gpu_memset", "cuda_sync", "gpu_user_annotation")

CATEGORY_CODES = {
    "cpu_op": CPU_OP, "operator": CPU_OP,
    "user_annotation": ANNOTATION,
    "cuda_runtime": RUNTIME, "runtime": RUNTIME, "cuda_driver": RUNTIME, "driver": RUNTIME,
    "kernel": KERNEL,
    "gpu_memcpy": MEMCPY, "memcpy": MEMCPY,
    "gpu_memset": MEMSET, "memset": MEMSET,
    "cuda_sync": SYNC,
    "gpu_user_annotation": GPU_ANNOTATION,
}

GPU_CATEGORIES = (KERNEL, MEMCPY, MEMSET)
CPU_CATEGORIES = (CPU_OP, ANNOTATION, RUNTIME)

# Runtime calls that put work on a stream (their correlation id names the GPU op).
LAUNCH_CALLS = frozenset({
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
    "cudaLaunchCooperativeKernel", "cudaLaunchCooperativeKernelMultiDevice",
    "cudaMemcpyAsync", "cudaMemsetAsync", "cudaMemcpy", "cudaMemset", "cudaMemcpy2DAsync",
    "cudaMemcpyPeerAsync", "cudaGraphLaunch", "cuGraphLaunch", "cuMemcpyAsync",
    "cuMemsetD8Async", "cuMemsetD32Async", "cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2",
})
# Runtime calls that block the calling thread until GPU work completes.
STREAM_SYNC_CALLS = frozenset({"cudaStreamSynchronize", "cuStreamSynchronize"})
DEVICE_SYNC_CALLS = frozenset({"cudaDeviceSynchronize", "cuCtxSynchronize"})
EVENT_SYNC_CALLS = frozenset({"cudaEventSynchronize", "cuEventSynchronize"})
BLOCKING_COPY_CALLS = frozenset({"cudaMemcpy", "cudaMemset"})
EVENT_RECORD_CALLS = frozenset({"cudaEventRecord", "cuEventRecord", "cudaEventRecordWithFlags"})
STREAM_WAIT_CALLS = frozenset({"cudaStreamWaitEvent", "cuStreamWaitEvent"})

FLOW_CATEGORIES = frozenset({"ac2g", "async_cpu_to_gpu", "async"})

_COMM_KERNEL = re.compile(
    r"^(void )?(nccl(Dev)?Kernel_|ncclKernel|nccl::|c10d::|.*all_?reduce|.*all_?gather|"
    r".*reduce_?scatter|.*all_?to_?all|.*SendRecv|cross_device_reduce|.*one_shot_all_reduce|"
    r".*two_shot_all_reduce|.*userbuffers|.*multimem_all_reduce)", re.IGNORECASE)


def is_comm_kernel(name: str) -> bool:
    """NCCL kernels (`ncclKernel_*`, `ncclDevKernel_*`) and other known collective kernels."""
    return bool(_COMM_KERNEL.match(name))


_STEP = re.compile(r"^ProfilerStep#(\d+)$")


def profiler_step_number(name: str) -> int | None:
    m = _STEP.match(name)
    return int(m.group(1)) if m else None
