"""FSDP2 or DDP on the host's collectives (gloo on CPU) taken to one rank, and from one rank to N.

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

DDP (torch `csrc/distributed/c10d/reducer.cpp`) has no path of its own for a group of one: it issues
each bucket's all-reduce over a group of one, which copies nothing and waits for no one (a few us
on the worker thread), and its finalize has nothing to wait for. So at one rank DDP's issuing ops
stay as measured: a one-rank run still pays them (the core handed to the worker thread it wakes:
ms a step on a loaded host; docs/notes/2026-12-07-dp-over-gloo.md); only the worker ranges and the
waits on them go.

`to_one_rank` takes out of a step graph of such a base every op inside an `FSDP::all_gather` range,
inside an FSDP2 collective's issuing op, and inside the worker threads' collective ranges, and the
waits on them. It keeps the Python before and after each stretch. A task taken out stays as a
placeholder with no length and no lag into it, so every other task, edge and row is unchanged.
Kept as measured, and said in the notes: the copy-out (at one rank the per-parameter copies take
its place); the optimizer step (it then updates every parameter, not 1/DP of them; on the CPU
captures its cost is per call more than per element); the compute of ranks that shared the
machine's cores.

`from_one_rank` goes the other way, where a one-rank base holds nothing of the work: each hook
range of the step (`lumos.model.dp_hooks.dp_ranges`: FSDP2's hooks, or DDP's issuing op per bucket
and its finalize) gets the time a larger group adds inside it, read off
calibration recordings of another model size (`lumos.durations.dp_host`), as host time before the first op
the hook runs; the time outside the hooks is scaled by the calibration's slowdown of processes
sharing the host.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lumos.durations.dp_host import HostCollectiveCosts
from lumos.graph.model import EdgeClass, Graph, TaskKind
from lumos.model.dp_flavour import collective_kind, find_dp_flavour
from lumos.model.dp_hooks import dp_ranges, role_label
from lumos.trace import TraceTable
from lumos.trace.steps import select_step

__all__ = ["HostCollectives", "alone_on_host", "find_host_collectives", "from_one_rank", "to_one_rank"]

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
    return _spans_inside(graph, table, [(int(table.tid[r]), float(table.ts[r]), float(table.ts[r] + table.dur[r]))
                                        for r in rows.tolist()])


def _spans_inside(graph: Graph, table: TraceTable, spans: list) -> np.ndarray:
    """Tasks of `graph` whose trace op lies inside one of `spans` ((thread, start, end), us), on its thread."""
    inside = np.zeros(graph.n_tasks, dtype=bool)
    if not spans:
        return inside
    cpu = np.flatnonzero((graph.kind == TaskKind.CPU) & (graph.event >= 0))
    rows_of = graph.event[cpu]
    tid, ts = table.tid[rows_of], table.ts[rows_of]   # as measured: a graph's durations may be medians
    end = ts + table.dur[rows_of]
    for thread, lo, hi in spans:
        inside[cpu[(tid == thread) & (ts >= lo) & (end <= hi)]] = True
    return inside


def find_host_collectives(graph: Graph, table: TraceTable, *, issuing: bool = True) -> HostCollectives:
    """The host collective work of `graph` (one step of `table`); the issuing ops' tasks among it
    unless `issuing` is False (DDP at one rank still runs them)."""
    name = table.name
    lo, hi = graph.summary["window_us"]
    in_window = (table.ts < hi) & (table.ts + table.dur > lo) & (table.tid >= 0)
    rows = np.flatnonzero(in_window)
    unshard = np.array([r for r in rows.tolist() if str(name[r]).startswith(ALL_GATHER_RANGE)
                        and not str(name[r]).startswith(COPY_OUT_RANGE)], dtype=np.int64)
    issue_rows = np.array([r for r in rows.tolist() if str(name[r]).startswith("c10d::")
                           and collective_kind(str(name[r]))], dtype=np.int64)
    worker = np.array([r for r in rows.tolist() if str(name[r]).startswith(WORKER_PREFIX)], dtype=np.int64)
    tasks = _rows_inside(graph, table, unshard) | _rows_inside(graph, table, worker)
    if issuing:
        tasks |= _rows_inside(graph, table, issue_rows)
    waits = (graph.cls == EdgeClass.INTER_THREAD) & (tasks[graph.src] | tasks[graph.dst])
    return HostCollectives(tasks=tasks, waits=waits,
                           ranges={"unshard": len(unshard), "issuing": len(issue_rows) if issuing else 0,
                                   "worker": len(worker)})


def to_one_rank(graph: Graph, table: TraceTable, shared_host: bool = True) -> tuple[Graph, HostCollectives, list[str]]:
    """`graph` as FSDP2 or DDP would run it on one rank: the host collective work (`find_host_collectives`)
    of no length, the lags into it and the waits on it zero; the notes say what was kept (with `shared_host`,
    every op's time as the base's ranks ran it sharing the host: False where `alone_on_host` follows)."""
    ddp = find_dp_flavour(table, graph.summary.get("step")).ddp
    found = find_host_collectives(graph, table, issuing=not ddp)
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
    why = ("as DDP's all-reduces over a group of one copy nothing and wait for no one" if ddp else
           "as FSDP2 skips them at a group of one")
    kept = ("the all-reduces' issuing ops (DDP still issues them over a group of one), the reducer's copies "
            "into and out of its buckets" if ddp else
            "the all-gather copy-out (the per-parameter copies that replace it at one rank)")
    held = (f"{found.ranges['worker']} gloo worker-thread all-reduces" if ddp else
            f"{found.ranges['unshard']} FSDP unshard ranges, {found.ranges['issuing']} issuing ops, "
            f"{found.ranges['worker']} worker-thread collectives")
    notes = [f"DP -> 1 from host collectives (gloo): {int(found.tasks.sum())} CPU ops taken out ({held}) and "
             f"{int(found.waits.sum())} waits on them, {why}",
             f"kept as measured: {kept}, the optimizer step (it then updates every parameter)"
             + (", and every op's time as it ran beside the other ranks on this host" if shared_host else "")]
    return out, found, notes


def alone_on_host(graph: Graph, found: HostCollectives, slowdown: float) -> Graph:
    """`graph` (from `to_one_rank`) with its kept CPU work, and the lags into it, / `slowdown`: the
    base's N ranks shared the host's cores (and the gloo workers their main threads'), so each ran
    slower than one rank alone does; `lumos.predict.dp_host` reads by how much off calibration pairs."""
    out = graph.copy()
    out.dur, out.lag = out.dur.copy(), out.lag.copy()
    kept = (graph.kind == TaskKind.CPU) & ~found.tasks
    out.dur[kept] /= slowdown
    out.lag[kept[out.dst]] /= slowdown
    return out


def from_one_rank(graph: Graph, table: TraceTable, costs: HostCollectiveCosts) -> tuple[Graph, dict, list[str]]:
    """`graph` (one step of a one-rank FSDP2 or DDP run, `table`) as it would run at `costs.dp` ranks:
    each hook range's added time (`HostCollectiveCosts.cost` at its unit's size) as a lag before the
    first CPU task that starts in it, or after it where none does; every task and lag outside
    the hooks scaled by `costs.outside_scale`. Also what was added, per hook role."""
    step = select_step(table, graph.summary.get("step"))
    found = dp_ranges(table, step)
    if found is None:
        raise ValueError(f"{table.path}: no FSDP2 hook range or DDP bucket in step {graph.summary.get('step')}: "
                         "nothing tells where a larger group's collectives would run")
    hooks, elements = found.hooks, found.elements
    strategy = (f"{len(hooks)} FSDP2 hook ranges of the step each" if found.kind == "fsdp2" else
                f"DDP's finalize after the backward, holding the step's {hooks[0].parts} buckets,")
    cpu = np.flatnonzero((graph.kind == TaskKind.CPU) & (graph.event >= 0))
    cpu = cpu[np.argsort(table.ts[graph.event[cpu]], kind="stable")]
    cpu = {int(t): cpu[table.tid[graph.event[cpu]] == t] for t in {h.tid for h in hooks}}   # on the hooks' thread
    cpu_ts = {t: table.ts[graph.event[c]] for t, c in cpu.items()}
    added = np.zeros(graph.n_tasks)
    by_role: dict[str, float] = {}
    for h in hooks:
        if h.unit not in elements:
            raise ValueError(f"{table.path}: the size of DP unit {h.unit!r} (hook {h.name}) is not in the "
                             "trace (no fsdp::chunk_cat inside its hooks)")
        extra = costs.cost(h.role, elements[h.unit], f"{table.path}: {h.name}", h.parts)
        i = int(np.searchsorted(cpu_ts[h.tid], h.start))
        if i == len(cpu[h.tid]):
            raise ValueError(f"{table.path}: no CPU op at or after DP hook {h.name} in step "
                             f"{graph.summary.get('step')}")
        added[cpu[h.tid][i]] += extra
        by_role[role_label(h.role)] = by_role.get(role_label(h.role), 0.0) + extra
    out = graph.copy()
    out.dur, out.lag = out.dur.copy(), out.lag.copy()
    outside = (graph.kind == TaskKind.CPU) & ~_spans_inside(graph, table, [(h.tid, h.start, h.end) for h in hooks])
    out.dur[outside] *= costs.outside_scale
    out.lag[outside[out.dst]] *= costs.outside_scale
    incoming = np.bincount(out.dst, minlength=out.n_tasks) > 0
    hit = np.flatnonzero(added != 0)
    first = hit[~incoming[hit]]            # the step's first task: the time runs before it ends
    # a hook whose fitted time is below zero (a few us of noise, on hooks that add nothing) takes
    # out no more than the lag or op it lands on
    out.dur[first] = np.maximum(out.dur[first] + added[first], 0.0)
    into = incoming[out.dst] & (added[out.dst] != 0)
    out.lag[into] = np.maximum(out.lag[into] + added[out.dst[into]], 0.0)
    out.summary = {**graph.summary, "host_collectives_added_us": {k: round(v, 1) for k, v in by_role.items()}}
    notes = [f"DP 1 -> {costs.dp} on host collectives (gloo): {strategy} "
             f"given the time {costs.dp} ranks add inside it ({sum(by_role.values()) / 1e3:.3f} ms in all), "
             f"fitted per hook on {len(costs.recordings)} calibration pairs ({', '.join(costs.recordings)}); "
             f"the time outside the hooks x{costs.outside_scale:.3f} (the calibration's processes sharing "
             "the host's cores)"]
    far = sorted({f"{h.unit} ({elements[h.unit]})" for h in hooks
                  if not (costs.hooks[h.role].elements[0] <= elements[h.unit] <= costs.hooks[h.role].elements[1])})
    flat = any(c.elements[0] == c.elements[1] for c in costs.hooks.values())
    if far:
        notes.append(f"units outside the calibration's sizes (parameters): {', '.join(far)}; "
                     + ("their hooks' added time taken as at the one calibration size, not scaled" if flat else
                        "extrapolated along each hook's fitted line"))
    return out, by_role, notes
