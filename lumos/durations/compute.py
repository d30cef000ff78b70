"""Compute kernels re-timed from shapes: FLOP (GEMM, attention) or byte (element-wise) ratios.

Assumptions:
- A kernel's time is a fixed part (launch tail, setup) plus a part proportional to
  its work: 2mkn FLOPs for a GEMM ((m,k) x (k,n), read from mm / addmm / bmm /
  linear / matmul shapes), b*s_q*s_k*heads*head_dim for attention (s_q = s_k but under context
  parallelism, where a rank's queries attend over the whole sequence; flash, memory-
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
- GEMM wave quantisation, where the kernel's name says its output tile (cuBLAS
  `tilesize128x256x64`, `nvjet_..._256x128_...`, CUTLASS `..._128x128_...`) and the cluster
  profile gives the SM count: the GPU computes ceil(m / tile_m) x ceil(n / tile_n) output
  tiles, num_sms at a time, and a wave costs about the same whatever share of the SMs it
  fills (NVIDIA, "Matrix Multiplication Background User's Guide", tile and wave
  quantization). So a GEMM's time goes as waves x k, and a re-timed GEMM takes the measured
  time times that ratio. The kernel keeps its tile when the shape changes (the library may
  pick another). Without a tile in the name, or with `--gemm-efficiency flops`, the FLOP
  ratio stands. A per-tile cost (time = waves x (k + k0), k0 fitted on the base's GEMMs) was
  tried and dropped: on the H200 recordings (measured) it moved the width predictions 1-3
  points further from the measured times (docs/notes/2026-12-01-tp-changes.md).
- Other efficiency changes with shape (short reductions, kernel choice, clocks) are not
  modelled; they are the supplier's main error for large changes.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from lumos.model.ops import attention_bshd, attention_keys, elements, gemm_mkn, op_class


@dataclass(frozen=True)
class ComputeSpec:
    op: str
    dims: tuple


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
            return float(b) * s * (attention_keys(spec.op, d) or s) * a * hd   # queries x keys (context parallel)
        return float(sum(elements(x) for x in d if isinstance(x, (list, tuple))))
    except (TypeError, IndexError, ValueError):
        return 0.0


def scales_with_op(kernel_name: str, op: str) -> bool:
    """False for a memset / memcpy that a GEMM or attention op launches beside its kernel (cuBLAS,
    cuDNN workspace zeroing): its size is the library's, not the op's FLOPs (seen on the H200 traces:
    scaled by FLOPs it came out 2x too long at hidden 4096)."""
    return not (str(kernel_name).startswith(("Memset", "Memcpy")) and op_class(op) in ("gemm", "attention"))


_TILE = re.compile(r"(\d{2,3})x(\d{2,3})")


@lru_cache(maxsize=4096)
def gemm_tile(kernel_name: str) -> tuple[int, int] | None:
    """(tile_m, tile_n) a GEMM kernel's name states, or None (cached: a run re-times the same few
    kernel names thousands of times)."""
    m = _TILE.search(str(kernel_name))
    return (int(m.group(1)), int(m.group(2))) if m else None


def gemm_waves(mkn: tuple, tile: tuple[int, int], sms: int) -> int:
    m, _, n = mkn
    return math.ceil(math.ceil(m / tile[0]) * math.ceil(n / tile[1]) / sms)


@dataclass
class ComputeModel:
    fixed_us: dict = field(default_factory=lambda: {"gemm": 0.0, "attention": 0.0, "elementwise": 0.0})
    fitted_us: dict = field(default_factory=dict)   # the raw intercepts, for the record
    sms: int = 0                 # streaming multiprocessors of the GPU (0: no wave model, FLOP ratio)
    # a CPU capture: its CPU ops (and the gaps inside them) are its compute, which the transforms re-time
    host_ops: bool = False

    def retime(self, measured_us: float, old: ComputeSpec, new: ComputeSpec, kernel: str = "") -> float:
        """`kernel` (the task's name) spares a library's memset / memcpy beside a GEMM (`scales_with_op`)
        and names the GEMM's tile (the wave model)."""
        return self.apply(measured_us, self.rule(old, new, kernel))

    def apply(self, measured_us: float, rule: tuple | None) -> float:
        """A duration re-timed by a `rule`."""
        if rule is None:
            return measured_us
        cls, ratio = rule
        return measured_us * ratio if cls is None else self.scale(measured_us, cls, ratio)

    def rule(self, old: ComputeSpec, new: ComputeSpec, kernel: str = "") -> tuple | None:
        """How `retime` changes any duration of this (old, new, kernel): None (kept), (None, r) (times
        r) or (class, r) (`scale`, the class's fixed part kept)."""
        if old == new or not scales_with_op(kernel, old.op):
            return None
        ratio = self.gemm_ratio(old, new, kernel)
        if ratio is not None:
            return (None, ratio)
        w0, w1 = work(old), work(new)
        if w0 <= 0 or w1 <= 0:
            return None
        return (op_class(old.op), w1 / w0)

    def gemm_summary(self) -> dict:
        return {"model": "waves" if self.sms > 0 else "flops", "num_sms": self.sms or None}

    def gemm_ratio(self, old: ComputeSpec, new: ComputeSpec, kernel: str) -> float | None:
        """(waves x k of new) / (waves x k of old), or None where the wave model does not apply."""
        if self.sms <= 0 or op_class(old.op) != "gemm":
            return None
        tile = gemm_tile(str(kernel))
        a, b = gemm_mkn(old.op, old.dims), gemm_mkn(new.op, new.dims)
        if tile is None or a is None or b is None or min(a) <= 0 or min(b) <= 0:
            return None
        return gemm_waves(b, tile, self.sms) * b[1] / (gemm_waves(a, tile, self.sms) * a[1])

    def scale(self, measured_us: float, cls: str, ratio: float) -> float:
        """The class's fixed part kept, the rest multiplied by `ratio` (a work or speed ratio)."""
        c = min(self.fixed_us.get(cls, 0.0), measured_us)
        return c + (measured_us - c) * ratio


def fit_compute(samples: list[tuple[ComputeSpec, float]], sms: int = 0, host_ops: bool = False) -> ComputeModel:
    """Fixed part per class from (spec, measured duration) samples of the base trace; `sms` > 0
    turns the GEMM wave model on; `host_ops`: the samples are a CPU capture's ops and gaps."""
    by: dict[str, dict[float, list[float]]] = {}
    known: dict[ComputeSpec, float] = {}   # a trace repeats a few shapes thousands of times
    for spec, dur in samples:
        try:
            w = known[spec]
        except KeyError:
            w = known[spec] = work(spec)
        except TypeError:      # Input Dims holding a list: no key, worked out each time
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
    return ComputeModel(fixed_us=fixed, fitted_us=fitted, sms=sms, host_ops=host_ops)
