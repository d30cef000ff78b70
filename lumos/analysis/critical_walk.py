"""The compiled critical-path walk (`critical_path.critical_path`'s rule of its docstring): C,
`lumos/kernels/walks.c`, held to `critical_path_reference` by the tests."""

from __future__ import annotations

import numpy as np

from lumos import jit


def walk(v, start, end, in_ptr, in_src, in_lag, prev_on_proc, wait_kind, wait_target,
         s_ptr, s_ops, s_end, r_ptr, r_procs, tol) -> np.ndarray:
    """The path from v back (latest first). The timeline is taken as contiguous float64; every other
    argument must already be of its dtype, and the C code checks them all before it walks (lengths,
    ids within their tables, pointer arrays non-decreasing, wait kinds, each stream's ends sorted):
    a ValueError or TypeError naming the argument."""
    start = np.ascontiguousarray(start, dtype=np.float64)
    end = np.ascontiguousarray(end, dtype=np.float64)
    path = np.empty(len(start), dtype=np.int64)
    m = jit.kernels().walk(v, start, end, in_ptr, in_src, in_lag, prev_on_proc, wait_kind, wait_target,
                           s_ptr, s_ops, s_end, r_ptr, r_procs, tol, path)
    return path[:m]
