"""Compute kernels re-timed from shapes: FLOP (GEMM, attention) or byte (element-wise) ratios.

Assumptions:
- A kernel's time is a fixed part (launch tail, setup) plus a part proportional to
  its work: 2mkn FLOPs for a GEMM ((m,k) x (k,n), read from mm / addmm / bmm /
  linear / matmul shapes), b*s^2*heads*head_dim for attention (flash, memory-
  efficient, cuDNN or torch's scaled_dot_product ops, each in its own tensor
  layout), the number of elements touched for anything else (memory-bound).
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


def _matrix(x) -> bool:
    return isinstance(x, (list, tuple)) and len(x) >= 2 and all(isinstance(v, (int, float)) for v in x)


def gemm_mkn(op: str, dims) -> tuple | None:
    """(m, k, n) of a GEMM op from its Input Dims, or None when they do not say.

    `aten::mm` [[m,k],[k,n]]; `aten::addmm` [[bias],[m,k],[k,n]]; `aten::bmm`
    [[b,m,k],[b,k,n]] (m counts all b); `aten::linear` / `aten::matmul` with an
    N-d input [..., k] and a weight [n, k] (linear) or [k, n] (matmul), m the
    product of the leading input dims.
    """
    if not dims:
        return None
    try:
        mats = [tuple(int(v) for v in d) for d in dims if _matrix(d)]
        if op == "aten::linear" and len(mats) >= 2 and len(mats[1]) == 2:
            x, w = mats[0], mats[1]
            return (int(np.prod(x[:-1])), x[-1], w[0])
        if op == "aten::matmul" and len(mats) >= 2 and len(mats[1]) == 2:
            x, w = mats[0], mats[1]
            return (int(np.prod(x[:-1])), x[-1], w[1])
        if op == "aten::bmm" and len(mats) >= 2 and len(mats[0]) == 3:
            a, b = mats[0], mats[1]
            return (a[0] * a[1], a[2], b[2])
        two = [d for d in mats if len(d) == 2]
        if len(two) >= 2 and two[-2][1] == two[-1][0]:
            return (two[-2][0], two[-2][1], two[-1][1])
    except (TypeError, ValueError):
        return None
    return None


#: attention ops whose tensors are (batch, heads, seq, head_dim), as torch's
#: scaled_dot_product_attention takes them; the flash / memory-efficient kernels'
#: own ops (and the emulator's) take (batch, seq, heads, head_dim).
_HEADS_SECOND = ("scaled_dot_product", "cudnn_attention")


def attention_bshd(op: str, dims) -> tuple | None:
    """(batch, seq, heads, head_dim) of an attention op's query, or None."""
    if not dims:
        return None
    q = next((d for d in dims if _matrix(d) and len(d) == 4), None)
    if q is None:
        return None
    b, x, y, hd = (int(v) for v in q)
    if any(k in op for k in _HEADS_SECOND):
        return (b, y, x, hd)
    return (b, x, y, hd)


def work(spec: ComputeSpec) -> float:
    d = spec.dims
    if not d:
        return 0.0
    cls = op_class(spec.op)
    try:
        if cls == "gemm":
            mkn = gemm_mkn(spec.op, d)
            if mkn is not None:
                return 2.0 * mkn[0] * mkn[1] * mkn[2]
        if cls == "attention":
            bshd = attention_bshd(spec.op, d)
            if bshd is None:
                return 0.0
            b, s, a, hd = bshd
            return float(b) * s * s * a * hd
        return float(sum(_prod(x) for x in d if isinstance(x, (list, tuple))))
    except (TypeError, IndexError, ValueError):
        return 0.0


def scales_with_op(kernel_name: str, op: str) -> bool:
    """False for a memset / memcpy that a GEMM or attention op launches beside its kernel (cuBLAS,
    cuDNN workspace zeroing): its size is the library's, not the op's FLOPs (seen on the H200 traces:
    scaled by FLOPs it came out 2x too long at hidden 4096)."""
    return not (str(kernel_name).startswith(("Memset", "Memcpy")) and op_class(op) in ("gemm", "attention"))


@dataclass
class ComputeModel:
    fixed_us: dict = field(default_factory=lambda: {"gemm": 0.0, "attention": 0.0, "elementwise": 0.0})
    fitted_us: dict = field(default_factory=dict)   # the raw intercepts, for the record

    def retime(self, measured_us: float, old: ComputeSpec, new: ComputeSpec, kernel: str = "") -> float:
        """`kernel` (the task's name) spares a library's memset / memcpy beside a GEMM (`scales_with_op`)."""
        if old == new or not scales_with_op(kernel, old.op):
            return measured_us
        w0, w1 = work(old), work(new)
        if w0 <= 0 or w1 <= 0:
            return measured_us
        return self.scale(measured_us, op_class(old.op), w1 / w0)

    def scale(self, measured_us: float, cls: str, ratio: float) -> float:
        """The class's fixed part kept, the rest multiplied by `ratio` (a work or speed ratio)."""
        c = min(self.fixed_us.get(cls, 0.0), measured_us)
        return c + (measured_us - c) * ratio


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
