"""`np.median` and `np.unique` without the numpy.ma import, for the replay's start-up path.

`np.median` checks its result for NaN through `np.ma`, and numpy >= 2.3's `np.unique` asks
`np.ma.is_masked` when it returns the values alone; the first such call imports numpy.ma,
9-10 ms of a 0.3 s `lumos replay`. These give the same values (a median: the middle element, or
the mean of the two middle ones, NaN where any value is NaN); tests/test_lean_numpy.py holds the
replay to them.
"""

from __future__ import annotations

import numpy as np

__all__ = ["median", "median_by_key", "unique"]


def median(values) -> float:
    a = np.sort(np.asarray(values, dtype=np.float64))
    if len(a) == 0:
        raise ValueError("median of no values")
    if np.isnan(a[-1]):
        return float("nan")
    n = len(a)
    return float((a[(n - 1) // 2] + a[n // 2]) / 2)


def median_by_key(keys: np.ndarray, values: np.ndarray) -> np.ndarray:
    """For each element, the median of `values` over the elements with its key (one sort)."""
    _, inv, counts = np.unique(keys, return_inverse=True, return_counts=True)
    v = np.asarray(values, dtype=np.float64)
    order = np.lexsort((v, inv))
    s = v[order]
    first = np.concatenate(([0], np.cumsum(counts)[:-1]))
    lo, hi = first + (counts - 1) // 2, first + counts // 2
    med = (s[lo] + s[hi]) / 2
    last = first + counts - 1
    med[np.isnan(s[last])] = np.nan   # lexsort puts NaN last within its key
    return med[inv]


def unique(values) -> np.ndarray:
    """The sorted distinct values of a 1-d array (NaNs, if any, each kept: use np.unique for floats)."""
    a = np.sort(np.asarray(values).ravel())
    if len(a) == 0:
        return a
    keep = np.empty(len(a), dtype=bool)
    keep[0] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]
