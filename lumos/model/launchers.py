"""Which host work launched each kernel: the runtime call (`cudaLaunchKernel`, ...) with its
correlation id, looked up for every kernel at once by a search on the sorted ids, not one dict
probe per kernel (a base run has thousands; `find_structure` asks it per rank)."""

from __future__ import annotations

import numpy as np

from lumos.trace import TraceTable, schema

__all__ = ["by_correlation", "launching_events", "runtime_calls"]


def runtime_calls(table: TraceTable, rows: np.ndarray) -> np.ndarray:
    """Which of `rows` are runtime calls with a correlation id (the host side of a launch)."""
    return (table.cat[rows] == schema.RUNTIME) & (table.corr[rows] >= 0)


def by_correlation(ids: np.ndarray, values: np.ndarray, wanted: np.ndarray, missing) -> np.ndarray:
    """Per id in `wanted`, the value paired with it in (`ids`, `values`), the last pair where several
    share the id (as a dict filled in that order would keep); `missing` (a scalar, or one per
    wanted id) where none does."""
    ids, first = np.unique(ids[::-1], return_index=True)   # of the reversed pairs: the last of each id
    values = values[::-1][first]
    out = np.broadcast_to(np.asarray(missing, dtype=values.dtype), wanted.shape).copy()
    if len(ids):
        at = np.minimum(np.searchsorted(ids, wanted), len(ids) - 1)
        found = ids[at] == wanted
        out[found] = values[at[found]]
    return out


def launching_events(table: TraceTable, host_rows: np.ndarray, kernel_rows: np.ndarray) -> np.ndarray:
    """Per kernel row, the row among `host_rows` of the runtime call with its correlation id (the
    last such in `host_rows` order where several share one); the kernel's own row where none does."""
    calls = host_rows[runtime_calls(table, host_rows)]
    return by_correlation(table.corr[calls], calls, table.corr[kernel_rows], kernel_rows)
