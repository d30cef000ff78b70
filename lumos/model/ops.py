"""What an op means, from its name and Input Dims: its class and a GEMM's or attention's dimensions.

The structure reader (`lumos.model.structure`), the shape rewriter (`lumos.transform.shapes`) and
the compute cost model (`lumos.durations.compute`) all ask the same questions of an op; this
module is the one place that answers them.
"""

from __future__ import annotations

import numpy as np

__all__ = ["GEMM_OPS", "op_class", "gemm_mkn", "attention_bshd", "elements"]

GEMM_OPS = frozenset({"aten::mm", "aten::matmul", "aten::addmm", "aten::linear", "aten::bmm"})
# one GEMM per local expert in one op: grouped_gemm's gmm (Megatron-Core's GroupedMLP), Input Dims
# [[rows of every expert, k], [experts, k, n]]
GROUPED_GEMM_OPS = frozenset({"grouped_gemm::gmm"})


def op_class(op: str) -> str:
    if op in GEMM_OPS:
        return "gemm"
    if "attention" in op:
        return "attention"
    return "elementwise"


def elements(d) -> float:
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


def attention_keys(op: str, dims) -> int | None:
    """The sequence the queries attend over: the longest of the op's (batch, seq, heads, head_dim) tensors (under
    context parallelism the keys and values span the whole sequence, the queries the rank's part), or None."""
    seqs = [int(d[2] if any(k in op for k in _HEADS_SECOND) else d[1]) for d in (dims or ())
            if _matrix(d) and len(d) == 4]
    return max(seqs) if seqs else None


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


def is_batched(dims) -> bool:
    """Two 3-D operands first: an unfused attention's batched products ([b x heads, s, .]), which
    are not among the layer's linear GEMMs."""
    return len(dims) >= 2 and all(isinstance(x, tuple) and len(x) == 3 for x in dims[:2])


def grouped_mkn(dims) -> tuple | None:
    """(rows, k, n, experts) of a grouped GEMM's forward Input Dims [[rows, k], [experts, k, n]], or None."""
    try:
        x, w = dims[0], dims[1]
        if len(x) == 2 and len(w) == 3 and int(x[1]) == int(w[1]):
            return int(x[0]), int(x[1]), int(w[2]), int(w[0])
    except (TypeError, IndexError, ValueError):
        pass
    return None


def expert_gemms(fc1: tuple, fc2: tuple) -> list:
    """The per-expert (m, k, n) of a forward's two grouped GEMMs (FC1, then FC2, each `grouped_mkn`), expert by
    expert as a loop of per-expert GEMMs would run them. How a grouped GEMM's rows split over its experts is
    not in the trace: each gets an equal share (the total exact), and `moe.ExpertLayout.grouped` says so."""
    rows, h, n1, e = fc1
    _, f, h2, _ = fc2
    share = [rows // e + (i < rows % e) for i in range(e)]
    return [g for r in share for g in ((r, h, n1), (r, f, h2))]
