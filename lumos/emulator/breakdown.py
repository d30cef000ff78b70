"""Exposed compute / overlapped / exposed communication / other, by interval union.

The emulator's own small implementation (it may not import lumos.analysis), used
for calibration against the paper's Fig. 1 and in the emulator's tests.
"""

from __future__ import annotations

import numpy as np

from lumos.trace.schema import is_comm_kernel   # the one rule of what is communication
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def _union(iv: np.ndarray) -> np.ndarray:
    """Merge [start, end) intervals (n x 2) into disjoint sorted ones."""
    if len(iv) == 0:
        return iv.reshape(0, 2)
    iv = iv[np.argsort(iv[:, 0], kind="stable")]
    out = []
    cs, ce = iv[0]
    for s, e in iv[1:]:
        if s <= ce:
            ce = max(ce, e)
        else:
            out.append((cs, ce))
            cs, ce = s, e
    out.append((cs, ce))
    return np.array(out, dtype=float)


def _length(u: np.ndarray) -> float:
    return float((u[:, 1] - u[:, 0]).sum()) if len(u) else 0.0


def _intersection(a: np.ndarray, b: np.ndarray) -> float:
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i, 0], b[j, 0]), min(a[i, 1], b[j, 1])
        if hi > lo:
            total += hi - lo
        if a[i, 1] < b[j, 1]:
            i += 1
        else:
            j += 1
    return total


def breakdown(gpu_ops) -> dict:
    """gpu_ops: iterable of (start_us, end_us, is_comm). Returns the four parts and the total (us)."""
    ops = list(gpu_ops)
    if not ops:
        return {"exposed_compute": 0.0, "overlapped": 0.0, "exposed_comm": 0.0, "other": 0.0, "total": 0.0}
    comp = np.array([(s, e) for s, e, c in ops if not c], dtype=float).reshape(-1, 2)
    comm = np.array([(s, e) for s, e, c in ops if c], dtype=float).reshape(-1, 2)
    uc, um = _union(comp), _union(comm)
    lo = min(s for s, _, _ in ops)
    hi = max(e for _, e, _ in ops)
    both = _intersection(uc, um)
    lc, lm = _length(uc), _length(um)
    total = hi - lo
    return {"exposed_compute": lc - both, "overlapped": both, "exposed_comm": lm - both,
            "other": max(total - (lc + lm - both), 0.0), "total": total}


def breakdown_events(events) -> dict:
    """Breakdown over the GPU ops of Kineto event dicts (one rank, one step)."""
    return breakdown((e["ts"], e["ts"] + e["dur"], is_comm_kernel(e["name"]))
                     for e in events if e.get("ph") == "X" and e.get("cat") in GPU_CATS)


def breakdown_recorder(rec) -> dict:
    """Breakdown straight from an emulation Recorder (no file round trip)."""
    return breakdown((s, e, is_comm_kernel(name)) for s, e, _cat, name, *_ in rec.gpu)
