"""What an MoE layer's experts cost as a function of the tokens they get, fitted on the base's own layers.

A rank's routed experts run the same few GEMMs every layer (FC1 and FC2 forward; in the backward each one's
data and weight gradients), and the tokens they get change from layer to layer with the routing: the base
itself holds each GEMM at many sizes. Per GEMM (its place among the experts' GEMMs of a layer pass), the fit
is time = A + b x rows, least squares over the base's layers; the intercept A holds what does not grow with
the tokens (the kernel's start, its weights' reads, and for a weight gradient the short-reduction overhead
that makes few rows slow: a weight gradient's reduction is over the rows). A grouped GEMM over L experts has
L such intercepts less L - 1 kernel starts (`fixed_us`), so a target with L' experts per rank gets
L' / L of the intercept's per-expert part. A width change scales A and b with the width (the GEMMs' other
dimension). Where the base's rows hardly vary (a balanced router), b is the time per row of the mean
(A the kernel start alone).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_SPREAD = 0.02   # relative spread of the rows below which a slope is not fitted


@dataclass(frozen=True)
class ExpertCost:
    intercepts: tuple       # A per GEMM of a forward pass, then per GEMM of a backward pass
    slopes: tuple           # b (us per row) per GEMM, same order
    forward: int            # how many of them are the forward's
    experts_local: int      # L of the base
    fixed_us: float         # one kernel start

    def times_us(self, backward: bool, rows: float, experts_local: int, width_ratio: float = 1.0) -> list:
        """Each expert GEMM of one layer pass with `rows` tokens over `experts_local` experts per rank: one
        kernel start, each expert's share of the base's intercept beyond it, and the rows' time."""
        lo, hi = (self.forward, len(self.slopes)) if backward else (0, self.forward)
        L, f = self.experts_local, self.fixed_us
        out = []
        for a, b in zip(self.intercepts[lo:hi], self.slopes[lo:hi]):
            per_expert = max((a + (L - 1) * f) / L - f, 0.0)     # an expert's part of the intercept
            out.append(f + experts_local * per_expert * width_ratio + b * rows * width_ratio)
        return out

    def per_row_us(self, backward: bool, width_ratio: float = 1.0) -> float:
        lo, hi = (self.forward, len(self.slopes)) if backward else (0, self.forward)
        return float(sum(self.slopes[lo:hi])) * width_ratio


def fit_expert_cost(samples: list, experts_local: int, fixed_us: float) -> ExpertCost | None:
    """`samples`: (backward, rows, [duration of each expert GEMM of the pass, in order]) per layer pass of the
    base. None where the passes disagree on how many GEMMs they run."""
    out = {}
    for backward in (False, True):
        rows = np.array([r for bw, r, _ in samples if bw == backward], dtype=float)
        durs = [d for bw, _, d in samples if bw == backward]
        if not len(rows) or len({len(d) for d in durs}) != 1:
            return None
        d = np.array(durs, dtype=float)
        fits = []
        for j in range(d.shape[1]):
            y = d[:, j]
            if rows.std() > MIN_SPREAD * rows.mean() and len(rows) > 2:
                b, a = np.polyfit(rows, y, 1)
                if b <= 0:    # no growth with the rows seen: proportional to the mean
                    a, b = fixed_us, max(y.mean() - fixed_us, 0.0) / rows.mean()
            else:
                a, b = fixed_us, max(y.mean() - fixed_us, 0.0) / max(rows.mean(), 1.0)
            fits.append((float(max(a, 0.0)), float(b)))
        out[backward] = fits
    return ExpertCost(intercepts=tuple(a for a, _ in out[False] + out[True]),
                      slopes=tuple(b for _, b in out[False] + out[True]), forward=len(out[False]),
                      experts_local=experts_local, fixed_us=fixed_us)
