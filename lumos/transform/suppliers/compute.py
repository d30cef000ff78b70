"""Compute kernels re-timed from shapes: FLOP (GEMM, attention) or byte (element-wise) ratios.

Assumptions:
- A kernel's time is a fixed part (launch tail, setup) plus a part proportional to
  its work: 2mkn FLOPs for a GEMM ((m,k) x (k,n)), b*s^2*heads*head_dim for flash
  attention, the number of elements touched for anything else (memory-bound).
- GEMM and attention kernels of transformer sizes (hundreds of us) are compute-bound:
  they scale with the FLOP ratio and no fixed part. (A least-squares intercept over the
  handful of GEMM shapes in one trace mostly absorbs per-shape tile efficiency, which
  does not fall steadily with size, so it would bias every re-timed GEMM; it is fitted
  and reported, not used.)
- Element-wise kernels: the fixed part is fitted on the base trace's own kernels (least
  squares of duration against elements over the distinct shapes, clamped to
  [0, shortest kernel]); the rest scales with the element ratio.
- Efficiency changes with shape (tile quantisation, short reductions) are not
  modelled beyond that fit; they are the supplier's main error for large changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

GEMM_OPS = frozenset({"aten::mm", "aten::matmul", "aten::addmm", "aten::linear", "aten::bmm"})


@dataclass(frozen=True)
class ComputeSpec:
    op: str
    dims: tuple


def op_class(op: str) -> str:
    if op in GEMM_OPS:
        return "gemm"
    if "attention" in op:
        return "attention"
    return "elementwise"


def _prod(d) -> float:
    p = 1.0
    for x in d:
        if isinstance(x, (list, tuple)):
            return 0.0
        p *= float(x)
    return p


def work(spec: ComputeSpec) -> float:
    d = spec.dims
    if not d:
        return 0.0
    cls = op_class(spec.op)
    try:
        if cls == "gemm" and len(d) >= 2 and len(d[0]) == 2 and len(d[1]) == 2:
            return 2.0 * d[0][0] * d[0][1] * d[1][1]
        if cls == "attention":
            b, s, a, hd = d[0][:4] if len(d[0]) >= 4 else (1, 1, 1, 1)
            return float(b) * s * s * a * hd
        return float(sum(_prod(x) for x in d if isinstance(x, (list, tuple))))
    except (TypeError, IndexError, ValueError):
        return 0.0


@dataclass
class ComputeModel:
    fixed_us: dict = field(default_factory=lambda: {"gemm": 0.0, "attention": 0.0, "elementwise": 0.0})
    fitted_us: dict = field(default_factory=dict)   # the raw intercepts, for the record

    def retime(self, measured_us: float, old: ComputeSpec, new: ComputeSpec) -> float:
        if old == new:
            return measured_us
        w0, w1 = work(old), work(new)
        if w0 <= 0 or w1 <= 0:
            return measured_us
        c = min(self.fixed_us.get(op_class(old.op), 0.0), measured_us)
        return c + (measured_us - c) * w1 / w0


def fit_compute(samples: list[tuple[ComputeSpec, float]]) -> ComputeModel:
    """Fixed part per class from (spec, measured duration) samples of the base trace."""
    by: dict[str, dict[float, list[float]]] = {}
    for spec, dur in samples:
        w = work(spec)
        if w > 0:
            by.setdefault(op_class(spec.op), {}).setdefault(w, []).append(float(dur))
    fixed = {"gemm": 0.0, "attention": 0.0, "elementwise": 0.0}
    for cls, pts in by.items():
        ws = np.array(sorted(pts))
        ts = np.array([np.median(pts[w]) for w in ws])
        if len(ws) < 2:
            continue
        slope, icpt = np.polyfit(ws, ts, 1)
        if slope <= 0:
            continue
        fixed[cls] = float(np.clip(icpt, 0.0, ts.min()))
    fitted = dict(fixed)
    fixed["gemm"] = fixed["attention"] = 0.0
    return ComputeModel(fixed_us=fixed, fitted_us=fitted)
