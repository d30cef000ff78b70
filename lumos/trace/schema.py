"""Kineto categories, old and new, mapped onto one small set of codes.

PyTorch 1.9-era traces say `Operator`/`Runtime`/`Kernel`/`Memcpy`/`Memset`;
PyTorch 2.x says `cpu_op`/`cuda_runtime`/`kernel`/`gpu_memcpy`/`gpu_memset`.
The rest of the project only ever sees the codes below.
"""

from __future__ import annotations

import re
from numbers import Integral

import numpy as np

from .comm_kernels import comm_kernel_rule

CPU_OP, ANNOTATION, RUNTIME, KERNEL, MEMCPY, MEMSET, SYNC, GPU_ANNOTATION, PY_MODULE = range(9)
CATEGORY_NAMES = ("cpu_op", "user_annotation", "cuda_runtime", "kernel", "gpu_memcpy",
                  "gpu_memset", "cuda_sync", "gpu_user_annotation", "python_function")
# `with_stack=True` writes a `python_function` event per Python call; only the module calls
# (`nn.Module: GPT2Block_0`, each module's forward) are kept: they name the layers.
MODULE_PREFIX = "nn.Module: "

CATEGORY_CODES = {
    "cpu_op": CPU_OP, "operator": CPU_OP,
    "user_annotation": ANNOTATION,
    "cuda_runtime": RUNTIME, "runtime": RUNTIME, "cuda_driver": RUNTIME, "driver": RUNTIME,
    "kernel": KERNEL,
    "gpu_memcpy": MEMCPY, "memcpy": MEMCPY,
    "gpu_memset": MEMSET, "memset": MEMSET,
    "cuda_sync": SYNC,
    "gpu_user_annotation": GPU_ANNOTATION,
    "python_function": PY_MODULE,
}

GPU_CATEGORIES = (KERNEL, MEMCPY, MEMSET)
CPU_CATEGORIES = (CPU_OP, ANNOTATION, RUNTIME)

# Runtime and driver calls, by what they do to the calling thread and the streams.
# The CUDA runtime (cudaX), the CUDA driver API (cuX: Triton and other JIT kernels
# launch through cuLaunchKernel) and ROCm's HIP runtime all land here: HIP mirrors
# the runtime names (cudaX -> hipX, `_hip`) and adds entry points of its own, and
# roctracer files them under `cuda_runtime` like CUPTI does. Map a new vendor's
# names here, nowhere else.


def _hip(cuda_names: set[str]) -> set[str]:
    """The HIP twin of each CUDA runtime name (cudaLaunchKernel -> hipLaunchKernel)."""
    return {"hip" + n[len("cuda"):] for n in cuda_names if n.startswith("cuda")}


def _calls(cuda: set[str], driver: set[str] = frozenset(), hip_only: set[str] = frozenset()) -> frozenset:
    return frozenset(set(cuda) | set(driver) | _hip(cuda) | set(hip_only))


# Calls that put work on a stream (their correlation id names the GPU op).
LAUNCH_CALLS = _calls(
    {"cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel",
     "cudaLaunchCooperativeKernelMultiDevice", "cudaMemcpyAsync", "cudaMemsetAsync", "cudaMemcpy",
     "cudaMemset", "cudaMemcpy2DAsync", "cudaMemcpyPeerAsync", "cudaGraphLaunch"},
    driver={"cuLaunchKernel", "cuLaunchKernelEx", "cuGraphLaunch", "cuMemcpyAsync", "cuMemsetD8Async",
            "cuMemsetD32Async", "cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2"},
    hip_only={"hipModuleLaunchKernel", "hipExtModuleLaunchKernel", "hipHccModuleLaunchKernel",
              "hipExtLaunchKernel", "hipExtLaunchMultiKernelMultiDevice", "hipMemcpyWithStream",
              "hipMemcpyHtoD", "hipMemcpyDtoH", "hipMemcpyDtoD", "hipMemcpyHtoDAsync", "hipMemcpyDtoHAsync",
              "hipMemcpyDtoDAsync", "hipMemsetD8Async", "hipMemsetD32Async"})
# Calls that launch a whole CUDA graph: every op of the graph carries the call's correlation id.
GRAPH_LAUNCH_CALLS = _calls({"cudaGraphLaunch"}, driver={"cuGraphLaunch"})
# Calls that block the calling thread until GPU work completes.
STREAM_SYNC_CALLS = _calls({"cudaStreamSynchronize"}, driver={"cuStreamSynchronize"})
DEVICE_SYNC_CALLS = _calls({"cudaDeviceSynchronize"}, driver={"cuCtxSynchronize"})
EVENT_SYNC_CALLS = _calls({"cudaEventSynchronize"}, driver={"cuEventSynchronize"})
# Copies that return only when their own copy is done. hipMemcpyWithStream is
# hipMemcpy on a given stream: it synchronizes that stream before returning.
BLOCKING_COPY_CALLS = _calls({"cudaMemcpy", "cudaMemset"},
                             hip_only={"hipMemcpyWithStream", "hipMemcpyHtoD", "hipMemcpyDtoH",
                                       "hipMemcpyDtoD"})
EVENT_RECORD_CALLS = _calls({"cudaEventRecord", "cudaEventRecordWithFlags"}, driver={"cuEventRecord"})
STREAM_WAIT_CALLS = _calls({"cudaStreamWaitEvent"}, driver={"cuStreamWaitEvent"})
# Calls that poll without blocking (NCCL watchdogs spin on them): never a dependency.
POLLING_CALLS = _calls({"cudaEventQuery", "cudaStreamQuery"})

FLOW_CATEGORIES = frozenset({"ac2g", "async_cpu_to_gpu", "async"})

# Which GPU kernels are communication: the named rules of `comm_kernels` (one table, each rule citing
# its library's source), asked here by every consumer. What kind of call a kernel runs is read in
# `lumos.trace.collectives`, with the ops that launched it.


def is_comm_kernel(name: str) -> bool:
    """Whether a GPU kernel is communication: some rule of `lumos.trace.comm_kernels.RULES`
    (NCCL/RCCL, MSCCL, symmetric memory, userbuffers, DeepEP, NVSHMEM, a collective's name) matches."""
    return comm_kernel_rule(name) is not None


def comm_kernel_rules(names) -> np.ndarray:
    """`comm_kernel_rule` per row (object array, None where no rule matches), decided once per
    distinct name (a run holds few)."""
    names = np.asarray(names, dtype=object)
    lookup = {n: comm_kernel_rule(n) for n in set(names.tolist())}
    out = np.empty(len(names), dtype=object)
    out[:] = [lookup[n] for n in names.tolist()]
    return out


def comm_kernel_mask(names) -> np.ndarray:
    """`is_comm_kernel` per row, decided once per distinct name (a run holds few)."""
    names = np.asarray(names, dtype=object)
    lookup = {n: comm_kernel_rule(n) is not None for n in set(names.tolist())}
    return np.fromiter(map(lookup.__getitem__, names.tolist()), dtype=bool, count=len(names))


_STEP = re.compile(r"^ProfilerStep#(\d+)$")


def profiler_step_number(name: str) -> int | None:
    m = _STEP.match(name)
    return int(m.group(1)) if m else None


def read_int(value) -> int | None:
    """An integer field as Kineto writes it (int, float, or a string such as the legacy
    GPU tid "stream 7"); None when absent or unreadable."""
    if type(value) is int or value is None:   # nearly every value: skip the checks below
        return value
    if isinstance(value, Integral):
        return int(value)
    if isinstance(value, float):
        return int(value)
    if isinstance(value, str):
        digits = value.rsplit(" ", 1)[-1]
        try:
            return int(digits)
        except ValueError:
            return None
    return None
