"""Shard the bundled GPT with FSDP2 (`torch.distributed.fsdp.fully_shard`), as most PyTorch users train.

`lumos capture gpt --fsdp full|grad_op` wraps every transformer block, then the
whole model (the root, which holds the embeddings, the final norm and the head),
the way torchtitan and the FSDP2 tutorial do. FSDP2 then, per block and per
micro-batch, all-gathers the block's parameter shards before its forward
(`FSDP::pre_forward` / `FSDP::all_gather`), frees them after it when resharding
(`full`: FULL_SHARD, ZeRO-3; `grad_op`: kept until the backward, SHARD_GRAD_OP,
ZeRO-2), all-gathers them again before the backward when they were freed,
prefetching the next block's (`FSDP::backward_prefetch`), and reduce-scatters
the block's gradients after it (`FSDP::post_backward_reduce`), each message 1/DP
of the block. With gradient accumulation only the last micro-batch
reduce-scatters (`set_requires_gradient_sync(False)` before the others), as the
FSDP2 documentation recommends. The ranges above are FSDP2's own (torch
`torch/distributed/fsdp/_fully_shard/_fsdp_state.py` and `_fsdp_param_group.py`).

`--fsdp hsdp` shards within groups of `HSDP_SHARD` ranks and replicates across them (HSDP: a 2-D
device mesh, FSDP2's `fully_shard(mesh=...)` with dimensions replicate x shard): the gradients are
reduce-scattered within the shard group, then all-reduced across the replicas; it needs at least
two shard groups. It reshards after forward, as `full`.

One process needs a process group too: outside torchrun it joins a one-rank group
(`group.ensure_process_group`), so a 1-rank capture runs the same program a DP run does.
"""

from __future__ import annotations

import warnings

from . import require_torch

MODES = ("off", "full", "grad_op", "hsdp")
HSDP_SHARD = 2   # ranks per shard group of `hsdp` (a host's GPUs, in a real job)


def shard_model(model, device, mode: str) -> None:
    """fully_shard every block, then the root; `mode` full (reshard after forward) or grad_op."""
    if mode not in MODES[1:]:
        raise ValueError(f"--fsdp must be one of {', '.join(MODES)}, got {mode!r}")
    torch = require_torch()
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    # Our blocks return the identity autograd marker's view of their output (`annotate.markers`);
    # FSDP2 warns that an in-place op on such a view would skip its pre-backward hook. Nothing
    # here writes into a block's output in place, so the warning says nothing about this model.
    warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module .* returned a view tensor")
    world = torch.distributed.get_world_size()
    if mode == "hsdp":   # shard within groups of HSDP_SHARD ranks, replicate (all-reduce) across them
        if world < 2 * HSDP_SHARD or world % HSDP_SHARD:
            raise ValueError(f"--fsdp hsdp needs a multiple of {HSDP_SHARD} ranks, at least {2 * HSDP_SHARD}; "
                             f"got {world}")
        mesh = init_device_mesh(device.type, (world // HSDP_SHARD, HSDP_SHARD), mesh_dim_names=("replicate", "shard"))
    else:
        mesh = init_device_mesh(device.type, (world,))
    reshard = mode in ("full", "hsdp")
    for block in model.blocks:
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard)
    model.watch_embedding_grads()


class ShardedGradients:
    """The train loop's gradient hand-off under FSDP2: FSDP reduce-scatters, so nothing to reduce.

    Same interface as `gpt.GradBuckets` (`armed`, `finish`, `use_stream`); arming it for the last
    micro-batch turns FSDP's gradient sync on.
    """

    use_stream = False

    def __init__(self, model):
        self.model = model
        self._armed = True

    @property
    def armed(self) -> bool:
        return self._armed

    @armed.setter
    def armed(self, on: bool) -> None:
        if on != self._armed:
            self.model.set_requires_gradient_sync(on)
        self._armed = on

    def finish(self) -> None:
        pass
