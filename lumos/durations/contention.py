"""Compute kernels run slower while a communication kernel runs beside them on the same GPU.

An NCCL kernel holds SMs and memory bandwidth for as long as it runs, so a GEMM or an
elementwise kernel that overlaps it takes longer than the same kernel alone. A base's measured
durations hold the slowdown of whatever communication happened to run beside each kernel; a
target that overlaps more (an FSDP or ZeRO base at a larger DP: longer collectives under the same
compute) or less keeps the base's, unless the slowdown is taken out and put back.

The model: a compute kernel that spends a share `f` of its span under a communication kernel of
its GPU takes `(1 + slowdown * f)` times its time alone. `slowdown` is fitted on the base trace:
per kernel (name and the launching op's Input Dims) with at least `MIN_EACH` occurrences wholly
under communication and as many wholly clear of it, and a clear median of at least `MIN_US` (a
trace's microsecond timestamps make a 2 us kernel read 1.5x for one tick), the ratio of the two
medians; `slowdown` is the median of those ratios weighted by the time each kernel spent under
communication (the long kernels, which the prediction's time is made of, decide), less one and
floored at 0; 0 where fewer than `MIN_KERNELS` kernels show both (a single-GPU base, a trace whose
communication never overlaps compute).

Seen in traces: our emulator slows compute by 12% under NCCL and its traces read 1.12
(`python studies/contention/comm_contention.py`); on hardware, by name, HTA's public A100 ranks
(`resources/traces/real/hta`) read 1.0 (trace_diff control: 4 kernels of 10 us or more both ways,
1.45-2.45x), 0.052 (nccl_parser_config: 4 kernels, 0.60-3.49x) and nothing (one rank, and PARAM's
eight V100 DLRM ranks: no such kernel; `python studies/contention/comm_contention.py --real`). Applied in
`lumos.predict.contention`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lumos.intervals import share_under

__all__ = ["Contention", "CONTENTION_MODES", "fit_contention", "base_shares", "NO_CONTENTION"]

CONTENTION_MODES = ("fit", "off")
MIN_EACH = 3          # occurrences of a kernel wholly under and wholly clear of communication
MIN_KERNELS = 3       # kernels with both before the base says anything
MIN_US = 10.0         # shortest clear median a kernel's ratio is read from
WHOLLY = 0.99         # share under communication that counts as wholly under (1 - WHOLLY: wholly clear)


@dataclass(frozen=True)
class Contention:
    slowdown: float          # fractional slowdown of a compute kernel wholly under communication
    kernels: int = 0         # kernels (name, Input Dims) the fit rests on
    ratios: tuple = ()       # their under / clear median ratios, sorted
    mode: str = "fit"

    @property
    def active(self) -> bool:
        return self.slowdown > 0

    def alone(self, dur: np.ndarray, share: np.ndarray) -> np.ndarray:
        """Durations with the slowdown of their measured share under communication taken out."""
        return dur / (1.0 + self.slowdown * share)

    def beside(self, alone: np.ndarray, share: np.ndarray) -> np.ndarray:
        """Durations of kernels that run `share` of their span under communication."""
        return alone * (1.0 + self.slowdown * share)

    def retime(self, measured_us: float, old: float, new: float) -> float:
        """A kernel measured with share `old` of its span under communication, run with share `new`."""
        return float(self.beside(self.alone(np.float64(measured_us), old), new))

    def as_dict(self) -> dict:
        q = np.percentile(self.ratios, [10, 50, 90]).round(3).tolist() if self.ratios else []
        return {"mode": self.mode, "slowdown": round(self.slowdown, 4), "kernels": self.kernels,
                "ratio_p10_p50_p90": q}


NO_CONTENTION = Contention(0.0, mode="off")


def fit_contention(keys: np.ndarray, dur: np.ndarray, share: np.ndarray) -> Contention:
    """The slowdown the base's own kernels show: `keys` name each compute kernel occurrence (kernel
    name and launching op's Input Dims), `dur` its measured duration, `share` its share under
    communication on its GPU."""
    under, clear = share >= WHOLLY, share <= 1.0 - WHOLLY
    ratios, weights = [], []
    groups: dict = {}
    for i in np.flatnonzero(under | clear).tolist():
        groups.setdefault(keys[i], []).append(i)
    for idx in groups.values():
        idx = np.asarray(idx)
        u, c = dur[idx[under[idx]]], dur[idx[clear[idx]]]
        if len(u) >= MIN_EACH and len(c) >= MIN_EACH and np.median(c) >= MIN_US:
            ratios.append(float(np.median(u) / np.median(c)))
            weights.append(float(np.sum(u)))
    if len(ratios) < MIN_KERNELS:
        return Contention(0.0, kernels=len(ratios), ratios=tuple(sorted(ratios)))
    return Contention(max(0.0, weighted_median(np.array(ratios), np.array(weights)) - 1.0), kernels=len(ratios),
                      ratios=tuple(sorted(ratios)))


def weighted_median(values: np.ndarray, weights: np.ndarray) -> float:
    """The value below which half the weight lies (the lower one on an exact tie)."""
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weights[order])
    return float(values[order][np.searchsorted(cum, cum[-1] / 2.0)])


def base_shares(graph, tables, tasks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(measured duration, share under communication) of each of `tasks` in the base, from the trace
    rows themselves (a graph's durations may be medians over profiled steps; its starts are the
    selected step's): communication is every communication kernel of the task's rank."""
    by_rank = {t.rank: t for t in tables}
    dur = np.zeros(len(tasks))
    share = np.zeros(len(tasks))
    comm = np.flatnonzero(graph.comm.astype(bool) & (graph.event >= 0))
    for r in np.unique(graph.rank[tasks]).tolist():
        table = by_rank[r]
        mine = np.flatnonzero((graph.rank[tasks] == r) & (graph.event[tasks] >= 0))
        ev = graph.event[tasks[mine]]
        cev = graph.event[comm[graph.rank[comm] == r]]
        start, d = table.ts[ev].astype(np.float64), table.dur[ev].astype(np.float64)
        dur[mine] = d
        share[mine] = share_under(start, start + d, table.ts[cev], table.ts[cev] + table.dur[cev])
    return dur, share
