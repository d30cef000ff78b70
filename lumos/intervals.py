"""Union, intersection and membership for sets of time intervals.

Dependency-free, so every stage that reasons about busy time (analysis, the
dPRO-style baseline) uses the same union instead of its own copy.
"""

from __future__ import annotations

import numpy as np


def union(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint sorted intervals covering the same time as the input."""
    if len(start) == 0:
        return np.zeros(0), np.zeros(0)
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    run_end = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    last = np.append(idx[1:] - 1, len(s) - 1)
    return s[idx], run_end[last]


def length(start: np.ndarray, end: np.ndarray) -> float:
    s, e = union(start, end)
    return float(np.sum(e - s))


def intersection_length(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> float:
    """Total overlap between two disjoint sorted interval sets."""
    (as_, ae), (bs, be) = a, b
    i = j = 0
    total = 0.0
    while i < len(as_) and j < len(bs):
        lo, hi = max(as_[i], bs[j]), min(ae[i], be[j])
        if hi > lo:
            total += hi - lo
        if ae[i] < be[j]:
            i += 1
        else:
            j += 1
    return total


def clip(start: np.ndarray, end: np.ndarray, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    s, e = np.maximum(start, lo), np.minimum(end, hi)
    keep = e > s
    return s[keep], e[keep]


def inside(t: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Whether each time in `t` lies inside one of the disjoint sorted intervals (s, e), ends included."""
    if not len(s):
        return np.zeros(len(t), dtype=bool)
    k = np.searchsorted(s, t, side="right") - 1
    ok = k >= 0
    out = np.zeros(len(t), dtype=bool)
    out[ok] = t[ok] <= e[k[ok]]
    return out
