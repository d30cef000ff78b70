"""Iteration time and the four-part breakdown of the Lumos paper, plus stream duty cycle.

The iteration is the step period when the graph knows its step: from the
start of the step to the start of the next on the thread that marks steps,
so data loading and Python count as they do for the user. Otherwise (a
predicted graph, a run-level breakdown, `--iteration gpu`) it is the GPU span:
first start to last end of the GPU ops the iteration launched. Both are
reported. Over the iteration, every instant is one of:
- exposed compute: some non-communication GPU op runs, no communication op does;
- overlapped: both run;
- exposed communication: only communication ops run;
- other: no GPU op runs (host-bound gaps, data loading, launch latency, idle).
Communication = the kernels a rule of `lumos.trace.comm_kernels` names (NCCL/RCCL,
MSCCL, symmetric memory, userbuffers, DeepEP, NVSHMEM, a collective's name; the graph's
`comm` column). Memcpy and memset count as compute: they are local
GPU work, not collectives. Work queued by an earlier iteration that is still
running inside the iteration counts too: the GPU is busy with it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from lumos import intervals

COMPONENTS = ("exposed_compute_us", "overlapped_us", "exposed_comm_us", "other_us")
METRICS = ("iteration_us",) + COMPONENTS


@dataclass
class Breakdown:
    iteration_us: float
    exposed_compute_us: float
    overlapped_us: float
    exposed_comm_us: float
    other_us: float
    gpu_span_us: float | None = None     # first start to last end of the step's GPU ops
    step_period_us: float | None = None  # step start to next step start on the thread marking steps (None: not known)

    def as_dict(self) -> dict[str, float]:
        return {k: round(float(v), 3) for k, v in asdict(self).items() if v is not None}

    def components(self) -> np.ndarray:
        return np.array([getattr(self, c) for c in COMPONENTS])


def iteration_span(start: np.ndarray, end: np.ndarray, in_step: np.ndarray) -> tuple[float, float]:
    if not np.any(in_step):
        return 0.0, 0.0
    return float(start[in_step].min()), float(end[in_step].max())


def breakdown(start, end, is_gpu, comm, in_step, window: tuple[float, float] | None = None,
              unions=None, overlap=intervals.intersection_length) -> Breakdown:
    """Breakdown of one rank's timeline (measured or replayed) over `window` (the step
    period), or over the GPU span when there is none.

    `unions(lo, hi)` and `overlap` may stand in for the union of the compute and of the
    communication ops clipped to [lo, hi] and for their intersection length (a faster path
    that gives the very same numbers: `lumos.analysis.uncertainty.FastBreakdown`).

    A trace with no GPU op at all (a CPU-only capture) has no GPU span; its
    iteration is the step period or the span of its CPU tasks, all of it "other".
    """
    period = None if window is None else float(window[1] - window[0])
    if not np.any(is_gpu):
        total = period if period is not None else (float(end.max() - start.min()) if len(start) else 0.0)
        return Breakdown(total, 0.0, 0.0, 0.0, total, 0.0, period)
    g0, g1 = iteration_span(start, end, in_step & is_gpu)
    lo, hi = window if window is not None else (g0, g1)
    total = hi - lo
    if total <= 0:
        return Breakdown(0.0, 0.0, 0.0, 0.0, 0.0, g1 - g0, period)
    if unions is None:
        comp = intervals.union(*intervals.clip(start[is_gpu & ~comm], end[is_gpu & ~comm], lo, hi))
        com = intervals.union(*intervals.clip(start[is_gpu & comm], end[is_gpu & comm], lo, hi))
    else:
        comp, com = unions(lo, hi)
    comp_len, com_len = float(np.sum(comp[1] - comp[0])), float(np.sum(com[1] - com[0]))
    both = overlap(comp, com)
    busy = comp_len + com_len - both
    return Breakdown(iteration_us=total, exposed_compute_us=comp_len - both, overlapped_us=both,
                     exposed_comm_us=com_len - both, other_us=max(total - busy, 0.0), gpu_span_us=g1 - g0,
                     step_period_us=period)


def duty_cycle(start, end, is_gpu, in_step, bin_us: float = 1000.0) -> np.ndarray:
    """Share of each `bin_us` bin of the iteration in which at least one stream is busy.

    The paper calls this "SM utilization"; it is a stream-active duty cycle.
    """
    lo, hi = iteration_span(start, end, in_step & is_gpu)
    if hi <= lo:
        return np.zeros(0)
    s, e = intervals.union(*intervals.clip(start[is_gpu], end[is_gpu], lo, hi))
    edges = np.append(np.arange(lo, hi, bin_us), hi)
    return np.diff(intervals.busy_until(s, e, edges)) / np.diff(edges)


def relative_error_pct(predicted: float, actual: float) -> float | None:
    """Signed error in percent; None (JSON null) when there is nothing to compare against."""
    return None if actual == 0 else 100.0 * (predicted - actual) / actual


def component_l1_us(predicted: Breakdown, actual: Breakdown) -> float:
    """Sum over the four components of |predicted - actual|."""
    return float(np.sum(np.abs(predicted.components() - actual.components())))
