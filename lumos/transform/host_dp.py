"""FSDP2 on the host's collectives (gloo on CPU) taken to one rank.

On a CPU run a collective is host work. The issuing op (`c10d::_allgather_base_`, ...) enqueues
it; a gloo worker thread runs it (a `gloo:all_gather` range: a few copies, with the wait for the
peer between them); the main thread waits for the worker. The graph's gap rule
(`lumos.graph.edges.inter_thread`) gives that wait an edge from the worker's last op, and the
enqueue one from the issuing op to the worker's first.

At a group of one, FSDP2 issues no collective (torch `distributed/fsdp/_fully_shard/`):
- `_fsdp_param_group.py`, `unshard`: returns before its `FSDP::all_gather` range, so the copy-in
  and the issuing op are not run;
- `wait_for_unshard`: copies each parameter's shard instead of `FSDP::all_gather_copy_out`;
- `_fsdp_collectives.py`, `foreach_reduce`: copies the gradient instead of reduce-scattering it.

`to_one_rank` takes out of a step graph of such a base every op inside an `FSDP::all_gather` range,
inside a collective's issuing op, and inside the worker threads' collective ranges, and the
waits on them. It keeps the Python before and after each stretch. A task taken out stays as a
placeholder with no length and no lag into it, so every other task, edge and row is unchanged.
Kept as measured, and said in the notes: the copy-out (at one rank the per-parameter copies take
its place); the optimizer step (it then updates every parameter, not 1/DP of them; on the CPU
captures its cost is per call more than per element); the compute of ranks that shared the
machine's cores.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lumos.graph.model import EdgeClass, Graph, TaskKind
from lumos.trace import TraceTable

from .dp_flavour import collective_kind

__all__ = ["HostCollectives", "find_host_collectives", "to_one_rank"]

ALL_GATHER_RANGE = "FSDP::all_gather"          # FSDP2's unshard; not its `FSDP::all_gather_copy_out`
COPY_OUT_RANGE = "FSDP::all_gather_copy_out"
WORKER_PREFIX = "gloo:"                         # the worker thread's range of one collective


@dataclass
class HostCollectives:
    """The host-side collective work of one step graph: which tasks it holds, and why."""
    tasks: np.ndarray          # bool per task: inside an unshard range, an issuing op or a worker range
    waits: np.ndarray          # bool per edge: a cross-thread edge with a taken-out end
    ranges: dict               # what was found: unshard ranges, issuing ops, worker ranges (counts)


def _rows_inside(graph: Graph, table: TraceTable, rows: np.ndarray) -> np.ndarray:
    """Tasks of `graph` whose trace op lies inside one of the ranges `rows`, on the same thread."""
    inside = np.zeros(graph.n_tasks, dtype=bool)
    if not len(rows):
        return inside
    cpu = np.flatnonzero((graph.kind == TaskKind.CPU) & (graph.event >= 0))
    rows_of = graph.event[cpu]
    tid, ts = table.tid[rows_of], table.ts[rows_of]   # as measured: a graph's durations may be medians
    end = ts + table.dur[rows_of]
    for r in rows.tolist():
        lo, hi = float(table.ts[r]), float(table.ts[r] + table.dur[r])
        inside[cpu[(tid == table.tid[r]) & (ts >= lo) & (end <= hi)]] = True
    return inside


def find_host_collectives(graph: Graph, table: TraceTable) -> HostCollectives:
    """The host collective work of `graph` (one step of `table`)."""
    name = table.name
    lo, hi = graph.summary["window_us"]
    in_window = (table.ts < hi) & (table.ts + table.dur > lo) & (table.tid >= 0)
    rows = np.flatnonzero(in_window)
    unshard = np.array([r for r in rows.tolist() if str(name[r]).startswith(ALL_GATHER_RANGE)
                        and not str(name[r]).startswith(COPY_OUT_RANGE)], dtype=np.int64)
    issuing = np.array([r for r in rows.tolist() if str(name[r]).startswith("c10d::")
                        and collective_kind(str(name[r]))], dtype=np.int64)
    worker = np.array([r for r in rows.tolist() if str(name[r]).startswith(WORKER_PREFIX)], dtype=np.int64)
    tasks = _rows_inside(graph, table, unshard) | _rows_inside(graph, table, issuing) \
        | _rows_inside(graph, table, worker)
    waits = (graph.cls == EdgeClass.INTER_THREAD) & (tasks[graph.src] | tasks[graph.dst])
    return HostCollectives(tasks=tasks, waits=waits,
                           ranges={"unshard": len(unshard), "issuing": len(issuing), "worker": len(worker)})


def to_one_rank(graph: Graph, table: TraceTable) -> tuple[Graph, HostCollectives, list[str]]:
    """`graph` as FSDP2 would run it on one rank: the host collective work (`find_host_collectives`)
    of no length, the lags into it and the waits on it zero; the notes say what was kept."""
    found = find_host_collectives(graph, table)
    if not found.tasks.any():
        raise ValueError(f"{table.path}: no host collective in step {graph.summary.get('step')} (no "
                         f"{ALL_GATHER_RANGE} range, issuing c10d op or {WORKER_PREFIX}* worker range): "
                         "nothing to take out for one rank")
    out = graph.copy()
    out.dur = out.dur.copy()
    out.lag = out.lag.copy()
    out.dur[found.tasks] = 0.0
    # the Python before a stretch (an edge from kept work into it) stays; inside it, and the waits, go
    inner = found.tasks[out.src] & found.tasks[out.dst]
    out.lag[inner | found.waits] = 0.0
    out.summary = {**graph.summary, "host_collectives": found.ranges}
    notes = [f"DP -> 1 from host collectives (gloo): {int(found.tasks.sum())} CPU ops taken out "
             f"({found.ranges['unshard']} FSDP unshard ranges, {found.ranges['issuing']} issuing ops, "
             f"{found.ranges['worker']} worker-thread collectives) and {int(found.waits.sum())} waits on them, "
             "as FSDP2 skips them at a group of one",
             "kept as measured: the all-gather copy-out (the per-parameter copies that replace it at one rank), "
             "the optimizer step (it then updates every parameter), and every op's time as it ran beside the "
             "other ranks on this host"]
    return out, found, notes
