"""The GPU memory a prediction's memory verdict is against: the base trace's own GPU, else the profile's.

Kineto (and our emulator and capture) write each visible GPU's `deviceProperties`, with
`totalGlobalMem` in bytes as the CUDA runtime reports it. The capacity is the smallest over the
base's devices, floored to 0.1 GiB, as the profile states capacities: an H100 "80 GB" reports
85,049,802,752 B = 79.21 GiB, the profile's `gpu_memory_gib` 79.2, so an emulated H100 base reads
exactly the profile's value; a recorded H200 reads 139.8 GiB. A trace without device properties
(some real traces) takes the profile's; a CPU-only trace (no device event) has no GPU: no capacity
and no verdict. A capacity given (`--gpu-memory-gib`, `memory={"gpu_memory_gib": X}`) wins over both.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

from lumos.trace.table import devices

from .memory import GIB

__all__ = ["trace_capacity", "on_device", "device_memory", "with_device"]


def trace_capacity(tables: Sequence) -> tuple[float, str] | None:
    """(GiB floored to 0.1, where it was read) of the smallest GPU in the traces' `deviceProperties`;
    None where they name none."""
    least = None
    for t in tables:
        for dev in devices(t.metadata):
            b = dev.get("totalGlobalMem")
            if isinstance(b, (int, float)) and b > 0 and (least is None or b < least[0]):
                least = (int(b), str(dev.get("name") or "GPU"))
    if least is None:
        return None
    b, name = least
    return (math.floor(b / GIB * 10.0 + 1e-9) / 10.0,
            f"trace: {name} deviceProperties totalGlobalMem {b:,} B ({b / GIB:.2f} GiB, floored to 0.1)")


def on_device(tables: Sequence) -> bool:
    """Whether any trace has a device event (a kernel, copy or set): False for a CPU-only capture."""
    return any(bool((t.stream >= 0).any() or (t.device >= 0).any()) for t in tables)


def device_memory(tables: Sequence, memory: Mapping | None) -> tuple[dict, dict]:
    """(the memory overrides with the capacity to judge against, {"gpu": whether there is a GPU, "source": where
    the capacity came from}): given, else the trace's (`trace_capacity`), else the profile's; a CPU-only
    trace without a given capacity has none."""
    memory = dict(memory or {})
    if memory.get("gpu_memory_gib") is not None:
        return memory, {"gpu": True, "source": "given (--gpu-memory-gib)"}
    if not on_device(tables):
        return memory, {"gpu": False, "source": "none: a CPU-only trace (no GPU)"}
    read = trace_capacity(tables)
    if read is None:
        return memory, {"gpu": True, "source": "the cluster profile's (config/predict/clusters/): the trace has no "
                                               "deviceProperties"}
    memory["gpu_memory_gib"] = read[0]
    return memory, {"gpu": True, "source": read[1]}


def with_device(doc: dict, device: dict) -> dict:
    """A `plan_memory` result with where its capacity came from; without a GPU, no capacity and no verdict."""
    doc["gpu_memory_source"] = device["source"]
    if not device["gpu"]:
        doc["gpu_memory_gib"] = doc["fits"] = None
    return doc
