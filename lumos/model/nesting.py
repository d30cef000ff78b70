"""Which event of a thread contains a moment: the innermost (or outermost) enclosing range or op.

`innermost` answers it for every task of a base run at once (the structure finder asks it for
each CPU task and each kernel's launcher, the DP-flavour and layer-range readers for their ops),
so it is array work, not a walk per query: on one thread, with the candidates in start order
(the longer first on a tie), the events that contain t are those of the prefix that starts at
or before t and ends after it; the outermost is the first such (a search on the running
maximum of the ends), the innermost the last (a walk back along each candidate's previous
longer-lasting one, which for ranges that nest is its parent: as many steps as the nesting is deep).
"""

from __future__ import annotations

import numpy as np

__all__ = ["innermost"]


def innermost(table, cand: np.ndarray, pid: np.ndarray, tid: np.ndarray, ts: np.ndarray,
              outermost: bool = False) -> np.ndarray:
    """For each query (pid, tid, ts), the innermost (or outermost) candidate event containing ts
    (start <= ts < end); -1 if none. Candidates that start together: the longer is the outer."""
    out = np.full(len(ts), -1, dtype=np.int64)
    if not len(cand):
        return out
    key_c = table.pid[cand] * (1 << 32) + (table.tid[cand] & 0xFFFFFFFF)
    key_q = pid * (1 << 32) + (tid & 0xFFFFFFFF)
    for k in np.unique(key_q):
        c = cand[key_c == k]
        q = np.flatnonzero(key_q == k)
        if not len(c):
            continue
        c = c[np.lexsort((-table.dur[c], table.ts[c]))]
        cs, ce = table.ts[c], table.ts[c] + table.dur[c]
        t = ts[q]
        started = np.searchsorted(cs, t, side="right")     # c[:started] start at or before t
        if outermost:
            pick = np.searchsorted(np.maximum.accumulate(ce), t, side="right")   # the first ending after t
            hit = pick < started
        else:
            pick = _last_ending_after(ce, started - 1, t)
            hit = pick >= 0
        out[q[hit]] = c[pick[hit]]
    return out


def _previous_longer(end: np.ndarray) -> np.ndarray:
    """Per index i, the last j < i with end[j] > end[i] (-1 if none), by pointer jumping: every
    index between them ends no later than i."""
    ptr = np.arange(-1, len(end) - 1, dtype=np.int64)
    todo = np.flatnonzero(ptr >= 0)
    while len(todo):
        p = ptr[todo]
        jump = end[p] <= end[todo]
        todo, p = todo[jump], p[jump]
        ptr[todo] = ptr[p]
        todo = todo[ptr[todo] >= 0]
    return ptr


def _last_ending_after(end: np.ndarray, last: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Per query, the last index i <= last[q] with end[i] > t[q] (-1 if none)."""
    prev = _previous_longer(end)
    at = last.copy()
    todo = np.flatnonzero(at >= 0)
    while len(todo):
        over = end[at[todo]] <= t[todo]
        todo = todo[over]
        at[todo] = prev[at[todo]]
        todo = todo[at[todo] >= 0]
    return at
