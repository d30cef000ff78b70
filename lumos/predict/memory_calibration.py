"""The memory model's workspace constant, calibrated from the base run's measured peak.

The model (`memory.py`) predicts parameters, activations and logits from formulas; the rest
of a GPU's peak (library workspaces, temporaries, what the formulas miss) is one constant.
Where the base trace was recorded with `profile_memory=True`, its GPU `[memory]` events
measure the peak of the very configuration the base plan describes, so the constant is what
that peak holds beyond the predicted parts, and a prediction of another layout carries it over:

    workspace = max over base stages of (measured peak - parameters - activations - logits), >= 0

Only GPU events calibrate: a CPU `Total Allocated` leaves out what was allocated before
profiling (`lumos.trace.memory_events`), so it would understate the peak. `Total Allocated`
is what the caching allocator handed out; the CUDA context and NCCL's own buffers are not in it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

from lumos.trace.memory_events import peak_allocated

from .memory import GIB, MemorySettings, stage_memory

__all__ = ["MeasuredPeak", "workspace_from_peak", "calibrate", "measured_peak"]


@dataclass(frozen=True)
class MeasuredPeak:
    """The base run's measured peak per pipeline stage, and the layout it was measured on."""
    gib_by_stage: dict          # stage -> GiB (the largest GPU peak of its ranks); empty: CPU events only
    shape: object               # the base's ModelShape
    layers_per_stage: tuple
    pp: int
    dp: int
    microbatches: int
    source: str                 # the files and devices read, said in the prediction
    sharding: str | None = None   # the memory model's stage of the base's own DP (None: as the settings say)
    chunks: int = 1               # model chunks per stage of the base's schedule


def workspace_from_peak(parts: dict, measured_gib: float) -> float:
    """The constant a measured peak implies: measured - (parameters + activations + logits), >= 0.
    `parts` is a `stage_memory` result of the configuration that was measured."""
    predicted = parts["parameters_gib"] + parts["activations_gib"] + parts["logits_gib"]
    return max(0.0, measured_gib - predicted)


def calibrate(m: MemorySettings, peak: MeasuredPeak) -> MemorySettings:
    """`m` with the workspace constant the base's measured peak implies (the largest over its
    stages), predicted with `m`'s own settings but the sharding the base ran with (a target that shards
    otherwise must not fold the difference into the constant); `workspace_source` names the trace."""
    if not peak.gib_by_stage:
        return dataclasses.replace(m, workspace_source=f"{m.workspace_source} (not calibrated from {peak.source}: "
                                   "no GPU peak; a CPU one leaves out what was allocated before profiling)")
    as_base = m if peak.sharding is None else dataclasses.replace(m, sharding=peak.sharding)
    w = max(workspace_from_peak(stage_memory(peak.shape, n, s, peak.pp, peak.dp, peak.microbatches, as_base,
                                             ndigits=None, chunks=peak.chunks),
                                peak.gib_by_stage[s])
            for s, n in enumerate(peak.layers_per_stage) if s in peak.gib_by_stage)
    return dataclasses.replace(m, workspace_gib=round(w, 3), workspace_source=f"trace: {peak.source}")


def measured_peak(tables: Sequence, stage_of_rank: dict, shape, layers_per_stage: Sequence[int], pp: int,
                  dp: int, microbatches: int, step: int | None = None,
                  sharding: str | None = None, chunks: int = 1) -> MeasuredPeak | None:
    """The base's GPU peaks from the traces Kineto marks `profile_memory` (no other file is re-read);
    None when none is. `sharding`: the memory model's stage of the base's sharded DP, if it has one."""
    by_stage: dict[int, float] = {}
    read = []
    for t in tables:
        if not t.metadata.get("profile_memory"):
            continue
        peaks = peak_allocated(t.path, step=step) or {}
        gpu = {d: b for d, b in peaks.items() if d != "cpu"}
        read.append(f"{t.path} [memory] {', '.join(sorted(gpu or peaks)) or 'none in the step'}")
        if gpu and t.rank in stage_of_rank:
            s = stage_of_rank[t.rank]
            by_stage[s] = max(by_stage.get(s, 0.0), max(gpu.values()) / GIB)
    if not read:
        return None
    return MeasuredPeak(gib_by_stage=by_stage, shape=shape, layers_per_stage=tuple(layers_per_stage), pp=pp,
                        dp=dp, microbatches=microbatches, source="; ".join(read), sharding=sharding, chunks=chunks)
