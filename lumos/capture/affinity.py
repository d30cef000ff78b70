"""Which cores a capture's process runs on (`lumos capture gpt --pin-core`, `lumosCapture.cpus`).

On a CPU run, ranks that the scheduler moves between cores wait on each other's collectives far
longer and far more variably: two unpinned ranks of the bundled GPT under FSDP2 ran 41-184 ms a
step over five recordings on the 2-core development machine, pinned 42-71 ms over four
(resources/traces/fsdp_cpu_sizes/PROVENANCE.md). Pinning one rank to one core is what one rank per
GPU does on a GPU host.
"""

from __future__ import annotations

import os

__all__ = ["cores", "pin_to_core"]


def cores() -> list[int] | None:
    """The cores this process may run on; None where the platform does not say."""
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None


def pin_to_core(local_rank: int) -> int:
    """Restrict this process to the `local_rank`-th core it may use (modulo their count); that core."""
    if not hasattr(os, "sched_setaffinity"):
        raise ValueError("--pin-core: this platform cannot set a process's cores (no os.sched_setaffinity)")
    allowed = sorted(os.sched_getaffinity(0))
    core = allowed[local_rank % len(allowed)]
    os.sched_setaffinity(0, {core})
    return core
