"""Training phase (forward, backward, update) of each GPU op, from the CPU context that launched it.

dPRO names every op FW/BW/UPDATE because its framework plug-ins read the
phase from the dataflow graph. A Kineto trace has no such label, but the
launch call sits inside CPU events that say it: autograd runs backward ops
under `autograd::engine::evaluate_function: XBackward0` (and Megatron-style
code under `.../backward/...` annotations), optimizers under `Optimizer.step#...`
or an `optimizer` annotation. An op launched inside an optimizer marker is an
update op, else inside a backward marker a backward op, else a forward op. An
op with no launch call in the trace (queued before the profiled window) is
taken as forward.
"""

from __future__ import annotations

import re
from enum import IntEnum

import numpy as np

from lumos import intervals

from lumos.trace import TraceTable, schema


class Phase(IntEnum):
    FORWARD = 0
    BACKWARD = 1
    UPDATE = 2


UPDATE_MARKER = re.compile(r"optim", re.IGNORECASE)
BACKWARD_MARKER = re.compile(r"backward|autograd::engine", re.IGNORECASE)


def gpu_op_phases(table: TraceTable, rows: np.ndarray) -> np.ndarray:
    """Phase (int8 Phase) of the GPU ops at table rows `rows`."""
    rows = np.asarray(rows, dtype=np.int64)
    out = np.full(len(rows), Phase.FORWARD, dtype=np.int8)
    if not len(rows):
        return out
    runtime = np.flatnonzero((table.cat == schema.RUNTIME) & (table.corr >= 0))
    by_corr = dict(zip(table.corr[runtime].tolist(), runtime.tolist()))
    launcher = np.array([by_corr.get(int(c), -1) if c >= 0 else -1 for c in table.corr[rows]], dtype=np.int64)
    has = launcher >= 0
    if not np.any(has):
        return out
    t = table.ts[launcher[has]]
    pid = table.pid[launcher[has]]
    ctx = np.flatnonzero(np.isin(table.cat, (schema.CPU_OP, schema.ANNOTATION)))
    names = table.name[ctx]
    is_update = np.array([bool(UPDATE_MARKER.search(n)) for n in names], dtype=bool)
    is_backward = np.array([bool(BACKWARD_MARKER.search(n)) for n in names], dtype=bool) & ~is_update
    phase = np.full(len(t), Phase.FORWARD, dtype=np.int8)
    for p in np.unique(pid):
        mine = pid == p
        same = table.pid[ctx] == p
        for marker, value in ((is_backward, Phase.BACKWARD), (is_update, Phase.UPDATE)):
            m = ctx[same & marker]
            s, e = intervals.union(table.ts[m], table.ts[m] + table.dur[m])
            phase[mine & intervals.inside(t, s, e)] = value  # update is applied last: it wins
    out[has] = phase
    return out
