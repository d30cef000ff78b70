"""The compiled critical-path walk (`critical_path.critical_path`'s rule of its docstring),
imported where it pays: importing it starts numba (`lumos.jit`)."""

from __future__ import annotations

import numpy as np

from lumos.jit import njit


@njit(cache=True)
def _binds_later(ready, end_u, u, s, tol, best_ready, best_end, best):
    """u binds the task starting at s, and (ready, end, id) beats the best so far."""
    return abs(ready - s) <= tol and (ready > best_ready or (ready == best_ready and (
        end_u > best_end or (end_u == best_end and u > best))))


@njit(cache=True)
def walk(v, start, end, in_ptr, in_src, in_lag, prev_on_proc, wait_kind, wait_target,
          s_ptr, s_ops, s_end, r_ptr, r_procs, tol):
    """The path from v back (latest first); the rule of the module docstring."""
    n = len(start)
    seen = np.zeros(n, dtype=np.bool_)
    path = np.empty(n, dtype=np.int64)
    m = 0
    while True:
        path[m] = v
        m += 1
        seen[v] = True
        s = start[v]
        best, best_ready, best_end = -1, -np.inf, -np.inf
        for k in range(in_ptr[v], in_ptr[v + 1]):
            u = in_src[k]
            ready = end[u] + in_lag[k]
            if _binds_later(ready, end[u], u, s, tol, best_ready, best_end, best):
                best, best_ready, best_end = u, ready, end[u]
        u = prev_on_proc[v]
        if u >= 0:
            ready = end[u]
            if _binds_later(ready, end[u], u, s, tol, best_ready, best_end, best):
                best, best_ready, best_end = u, ready, end[u]
        wk, w = wait_kind[v], wait_target[v]
        if wk != 0 and len(s_ops) and w >= 0:
            if wk == 1:
                lo_p, hi_p = 0, 1 if w < len(s_ptr) - 1 else 0
            else:
                lo_p, hi_p = r_ptr[w], r_ptr[w + 1]
            for j in range(lo_p, hi_p):
                p = w if wk == 1 else r_procs[j]
                a, b = s_ptr[p], s_ptr[p + 1]
                if a == b:
                    continue
                k = np.searchsorted(s_end[a:b], s + tol, side="right") - 1
                if k >= 0:
                    u = s_ops[a + k]
                    ready = end[u]
                    if _binds_later(ready, end[u], u, s, tol, best_ready, best_end, best):
                        best, best_ready, best_end = u, ready, end[u]
        if best < 0 or seen[best]:
            break
        v = best
    return path[:m]
