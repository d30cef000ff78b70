"""Train the bundled GPT with torch's DistributedDataParallel (`lumos capture gpt --ddp`).

The plain `lumos capture gpt` under torchrun all-reduces one bucket per block by hand
(`gpt.GradBuckets`), with our own `grad_bucket_{i}/reduce` ranges. Most PyTorch users train with
`torch.nn.parallel.DistributedDataParallel` instead, and a predictor has to read what it does
from torch's own trace: DDP's reducer (torch `csrc/distributed/c10d/reducer.cpp`) registers a
hook on every parameter's gradient accumulator, packs the gradients into buckets of about
`bucket_cap_mb` (parameters in reverse order of registration, so the last layers' bucket is
ready first), and when a bucket's last gradient is in, issues its all-reduce
(`c10d::allreduce_`, asynchronous: on gloo a worker thread runs it) from the hook, during the
backward. At the end of the backward it waits for every bucket and copies the averaged
gradients back.

`DDP_BUCKET_MB` is small (0.1 MiB: 3 to 27 buckets on the bundled GPT's CPU sizes) so that a
step has several buckets, as a large model has with DDP's 25 MiB default. With gradient
accumulation every micro-batch but the last runs inside `no_sync()` (forward and backward), so
only the last one reduces, as the DDP documentation recommends.

One process joins a one-rank group (`group.ensure_process_group`): DDP has no path of its own
for a group of one, so its reducer still issues every bucket's all-reduce, over a group of one.
"""

from __future__ import annotations

from . import require_torch

__all__ = ["DDP_BUCKET_MB", "DDPGradients"]

DDP_BUCKET_MB = 0.1   # MiB per gradient bucket (DDP's bucket_cap_mb; its default is 25)


class DDPGradients:
    """The train loop's gradient hand-off under DDP: the reducer all-reduces during the backward.

    Same interface as `gpt.GradBuckets` (`armed`, `finish`, `use_stream`), plus `forward`: the
    DDP-wrapped model to call. Disarming it (every micro-batch but the last) enters DDP's
    `no_sync()`; arming it again leaves it, so the next forward and backward reduce.
    """

    use_stream = False

    def __init__(self, model, bucket_cap_mb: float = DDP_BUCKET_MB):
        torch = require_torch()
        if not torch.distributed.is_initialized():
            raise ValueError("--ddp needs a process group (torchrun, or a one-rank group)")
        self.forward = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=bucket_cap_mb)
        self.bucket_cap_mb = bucket_cap_mb
        self._no_sync = None

    @property
    def armed(self) -> bool:
        return self._no_sync is None

    @armed.setter
    def armed(self, on: bool) -> None:
        if on and self._no_sync is not None:
            self._no_sync.__exit__(None, None, None)
            self._no_sync = None
        elif not on and self._no_sync is None:
            self._no_sync = self.forward.no_sync()
            self._no_sync.__enter__()

    def finish(self) -> None:
        pass
