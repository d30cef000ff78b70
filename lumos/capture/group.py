"""The process group a capture trains in: torchrun's, or a group of one.

Under torchrun (WORLD_SIZE > 1) a capture joins the launcher's group: NCCL on CUDA, gloo on CPU.
FSDP2 and DDP need a group even in one process: outside torchrun `ensure_process_group` makes a
one-rank gloo (CPU) or NCCL (CUDA) group on an in-memory store, so a one-rank capture runs the
same program a DP run does, on a group of one.
"""

from __future__ import annotations

import os

from . import require_torch

__all__ = ["ensure_process_group", "join_group", "resolve_device"]


def resolve_device(name: str):
    """`auto` (CUDA where torch sees it), `cpu`, `cuda`, `cuda:N` as a torch device."""
    torch = require_torch()
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"--device {name} asked for, but torch sees no CUDA device")
    return torch.device(name)


def join_group(device_arg: str):
    """Join a process group under torchrun (WORLD_SIZE > 1).

    Returns None when not distributed, else (rank, world_size, local_rank, created)
    where `created` says whether this call initialized the group.
    """
    torch = require_torch()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1 or not torch.distributed.is_available():
        return None
    dist = torch.distributed
    local = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = device_arg != "cpu" and torch.cuda.is_available()
    if use_cuda:
        torch.cuda.set_device(local)
    created = not dist.is_initialized()
    if created:
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    return dist.get_rank(), dist.get_world_size(), local, created


def ensure_process_group(device) -> bool:
    """Join a one-rank group when none exists (FSDP2 and DDP need one); True if this call made it."""
    dist = require_torch().distributed
    if dist.is_initialized():
        return False
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    return True
