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


def busy_until(s: np.ndarray, e: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Busy time of disjoint sorted intervals (s, e) before each time in t."""
    done_len = np.concatenate([[0.0], np.cumsum(e - s)])
    k = np.searchsorted(s, t, side="left")  # intervals that started before t
    last = np.maximum(k - 1, 0)
    partial = np.where(k > 0, np.clip(np.minimum(t, e[last]) - s[last], 0.0, None), 0.0)
    return done_len[last] + partial


def share_under(start: np.ndarray, end: np.ndarray, other_start: np.ndarray, other_end: np.ndarray) -> np.ndarray:
    """Per interval [start, end), the share of it under the union of the other intervals (0 for an
    empty one)."""
    s, e = union(np.asarray(other_start, dtype=np.float64), np.asarray(other_end, dtype=np.float64))
    if len(s) == 0 or len(start) == 0:
        return np.zeros(len(start))
    span = end - start
    with np.errstate(divide="ignore", invalid="ignore"):
        share = (busy_until(s, e, end) - busy_until(s, e, start)) / span
    return np.where(span > 0, np.clip(share, 0.0, 1.0), 0.0)
