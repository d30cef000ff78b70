"""The dPRO-style baseline: what dPRO would build from the same trace, replayed its way.

dPRO (Hu et al., "dPRO: A Generic Performance Diagnosis and Optimization
Toolkit for Expediting Distributed DNN Training", MLSys 2022) profiles
framework ops and fine-grained communication ops, joins them into a global
dataflow graph (DFG) and replays that graph with one queue per device. Each
choice below follows that design; where a Kineto trace forces an
approximation, it says so. (Design read from the paper and from the public
replayer, github.com/joapolarbear/dpro `replay.py`; no code was copied.)

- Nodes are GPU ops only. dPRO's DFG holds framework ops and communication
  ops; the host side (Python, the dispatcher, the CUDA runtime, the
  launching threads) is not modelled and shows up only as gaps between ops.
  So: no CPU threads, no runtime calls, no launch edges, no GPU->CPU syncs.
- Per device, one computation queue and one communication queue (dPRO's
  replayer keeps a `Device` per worker and op category, and an op runs only
  when its device is free). All compute streams of a GPU (kernels, memcpy,
  memset) share the computation queue; all NCCL streams share the
  communication queue. Ops that ran concurrently on two compute streams are
  therefore serialized, as dPRO serializes a device's ops.
- Within a queue, ops keep their measured order (start time, then trace row).
  dPRO takes the order of a device's ops from its timeline; Kineto gives a
  total order, so no op can overtake another in its queue.
- Priorities: forward, backward, update, communication, in that order, as in
  dPRO's scheduler (FW before BW before UPDATE before the rest). Here they
  order the queue heads that are ready at the same instant; because each
  queue is already totally ordered, they never reorder a queue and so never
  change a time. They are kept as node attributes for analysis. The phase of
  an op comes from the CPU context that launched it (`phases.py`).
- Gaps are node attributes: dPRO records, per op, the measured idle time
  between it and the next op on the same device (its OPERATOR->OPERATOR gap)
  and adds it to the device time after the op. Here the gap is the device
  idle time: next op's start minus the latest end so far in the queue,
  never negative (a serialized overlap has no gap).
- The only cross-queue dependency is the one dPRO's DFG has between compute
  and communication: a gradient's collective waits for the backward op that
  produced the gradient, plus the measured BW->Comm gap on that edge. A
  Kineto trace does not say which op produced a tensor, so the producer is
  approximated as the compute op of the same GPU that ended last before the
  collective's measured start, and the edge's gap is the measured time
  between them. No inter-stream events (cudaEventRecord/cudaStreamWaitEvent)
  are used: dPRO does not see them.
- Deviations, on purpose: dPRO averages op durations and gaps over the
  profiled iterations and drops the BW->UPDATE gap in favour of its
  Comm->UPDATE DFG edges. This baseline takes the replayed iteration's own
  durations and gaps (the same inputs the Lumos replay gets, so any
  difference comes from structure alone) and keeps every gap, with no
  Comm->UPDATE edge: the kept gap carries the same wait on an unchanged
  replay.
- The first op of each queue, and ops carried in from an earlier iteration,
  start no earlier than their measured start (dPRO starts an iteration's
  first ops at the step's start).

Replay (`replay_dpro`): each queue runs one op at a time, in its order; an op
starts at max(queue free, end of its producer + BW->Comm gap, release), and
the queue is then free at its end plus its gap.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np

from lumos.graph.build import resolve_step
from lumos.graph.model import EdgeClass, Graph, TaskKind
from lumos.graph.tasks import select_tasks
from lumos.sim import Schedule, SimulationError
from lumos.trace import TraceTable, schema

from .phases import Phase, gpu_op_phases


class Priority(IntEnum):
    """dPRO's scheduling priority; smaller runs first among ops ready together."""
    FORWARD = 0
    BACKWARD = 1
    UPDATE = 2
    COMMUNICATION = 3

    @property
    def label(self) -> str:
        return self.name.lower()


class QueueKind(IntEnum):
    COMPUTE = 0
    COMMUNICATION = 1


@dataclass
class DproGraph:
    """dPRO nodes (GPU ops) of one rank, stored queue by queue in queue order.

    Node i is row i of every array. `task` is the op's index among the tasks
    `build_graph` selects for the same step, and `event` its trace row, so a
    dPRO node maps to the Lumos task it came from.
    """

    task: np.ndarray      # int64 Lumos task id
    event: np.ndarray     # int64 row in the TraceTable
    name: np.ndarray      # object
    queue: np.ndarray     # int32 queue id (index into queue_kind / queue_device)
    priority: np.ndarray  # int8 Priority
    phase: np.ndarray     # int8 Phase of the launching context
    ts: np.ndarray        # float64 measured start
    dur: np.ndarray       # float64
    gap: np.ndarray       # float64 measured idle time after the op on its queue
    dep: np.ndarray       # int64 producer node of a collective (-1: none)
    dep_gap: np.ndarray   # float64 measured producer-end -> collective-start gap
    release: np.ndarray   # float64 earliest start (-inf: none)
    comm: np.ndarray      # bool
    in_step: np.ndarray   # bool, launched in the iteration
    carry_in: np.ndarray  # bool, queued by an earlier iteration
    queue_kind: np.ndarray    # int8 QueueKind per queue
    queue_device: np.ndarray  # int64 GPU per queue
    rank: int = 0
    summary: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.ts)

    @property
    def end(self) -> np.ndarray:
        return self.ts + self.dur

    def queue_nodes(self, q: int) -> np.ndarray:
        """Nodes of queue `q` in queue order."""
        return np.flatnonzero(self.queue == q)

    def queues(self) -> dict[str, list[int]]:
        """Trace rows of each queue in order, keyed '<kind> (GPU d)': for reports and tests."""
        return {f"{QueueKind(int(k)).name.lower()} (GPU {int(d)})": self.event[self.queue_nodes(q)].tolist()
                for q, (k, d) in enumerate(zip(self.queue_kind, self.queue_device))}

    def to_graph(self) -> Graph:
        """The same model as a Lumos Graph (queues as processors, queue order and
        producer edges carrying the gaps as lags), for timelines, critical paths
        and cross-checking the queue discipline against Algorithm 1."""
        n = len(self)
        chain = np.flatnonzero(self.queue[1:] == self.queue[:-1])  # node k -> k+1 in one queue
        has_dep = np.flatnonzero(self.dep >= 0)
        src = np.concatenate([chain, self.dep[has_dep]]).astype(np.int64)
        dst = np.concatenate([chain + 1, has_dep]).astype(np.int64)
        cls = np.concatenate([np.full(len(chain), EdgeClass.INTRA_STREAM, np.int8),
                              np.full(len(has_dep), EdgeClass.INTER_STREAM, np.int8)])
        lag = np.concatenate([self.gap[chain], self.dep_gap[has_dep]])
        inferred = np.concatenate([np.zeros(len(chain), bool), np.ones(len(has_dep), bool)])
        pos = np.zeros(n, dtype=np.int32)
        for q in range(len(self.queue_kind)):
            nodes = self.queue_nodes(q)
            pos[nodes] = np.arange(len(nodes), dtype=np.int32)
        names = np.empty(len(self.queue_kind), dtype=object)
        names[:] = [f"dPRO {QueueKind(int(k)).name.lower()} queue (GPU {int(d)})"
                    for k, d in zip(self.queue_kind, self.queue_device)]
        graph = Graph(
            name=self.name, kind=np.full(n, TaskKind.GPU, np.int8), proc=self.queue.astype(np.int32),
            dur=self.dur, ts=self.ts, release=self.release, comm=self.comm, in_step=self.in_step,
            rank=np.full(n, self.rank, np.int32), stream_pos=pos, wait_kind=np.zeros(n, np.int8),
            wait_target=np.full(n, -1, np.int32), event=self.event, layer=np.full(n, -1, np.int32),
            phase=self.phase.astype(np.int8),
            proc_kind=np.full(len(self.queue_kind), TaskKind.GPU, np.int8),
            proc_rank=np.full(len(self.queue_kind), self.rank, np.int32),
            proc_key=(self.queue_device.astype(np.int64) << 32) | self.queue_kind.astype(np.int64),
            proc_name=names, src=src, dst=dst, cls=cls, lag=lag.astype(np.float64), inferred=inferred,
        )
        graph.summary = dict(self.summary)
        graph.summary["edges"] = graph.edge_counts()
        graph.summary["inferred_edges"] = int(np.sum(inferred))
        return graph


def build_dpro(table: TraceTable, step=None) -> DproGraph:
    """dPRO's model of one rank's iteration `step` (default: as `build_graph` picks it)."""
    step = resolve_step(table, step)
    sel = select_tasks(table, step)
    task = np.flatnonzero(sel.is_gpu).astype(np.int64)
    rows = sel.event[task]
    comm = schema.comm_kernel_mask(table.name[rows])
    device = table.device[rows].astype(np.int64)
    devices = np.unique(device)
    dev_index = np.searchsorted(devices, device)
    queue = (dev_index * 2 + comm).astype(np.int64)  # (device, kind), kind 0 compute / 1 comm
    ts, dur = sel.ts[task], sel.dur[task]
    order = np.lexsort((rows, ts, queue))
    task, rows, comm, queue, ts, dur = task[order], rows[order], comm[order], queue[order], ts[order], dur[order]
    in_step, carry_in = sel.in_step[task], sel.carry_in[task]
    # renumber queues densely in (device, kind) order
    qkeys, queue = np.unique(queue, return_inverse=True)
    queue_kind = (qkeys % 2).astype(np.int8)
    queue_device = devices[qkeys // 2]

    phase = gpu_op_phases(table, rows)
    priority = np.where(comm, Priority.COMMUNICATION, phase).astype(np.int8)
    end = ts + dur
    n = len(task)
    gap = np.zeros(n)
    release = np.full(n, -np.inf)
    for q in range(len(qkeys)):
        nodes = np.flatnonzero(queue == q)
        release[nodes[0]] = ts[nodes[0]]
        if len(nodes) > 1:
            busy_until = np.maximum.accumulate(end[nodes])
            gap[nodes[:-1]] = np.maximum(ts[nodes[1:]] - busy_until[:-1], 0.0)
    release[carry_in] = ts[carry_in]

    dep = np.full(n, -1, dtype=np.int64)
    dep_gap = np.zeros(n)
    for q in np.flatnonzero(queue_kind == QueueKind.COMMUNICATION):
        compute_q = np.flatnonzero((queue_kind == QueueKind.COMPUTE) & (queue_device == queue_device[q]))
        if not len(compute_q):
            continue
        producers = np.flatnonzero(queue == compute_q[0])
        by_end = producers[np.argsort(end[producers], kind="stable")]
        for c in np.flatnonzero(queue == q):
            k = int(np.searchsorted(end[by_end], ts[c], side="right")) - 1
            if k >= 0:
                dep[c] = by_end[k]
                dep_gap[c] = ts[c] - end[by_end[k]]

    d = DproGraph(task=task, event=rows, name=table.name[rows], queue=queue.astype(np.int32), priority=priority,
                  phase=phase, ts=ts, dur=dur, gap=gap, dep=dep, dep_gap=dep_gap, release=release, comm=comm,
                  in_step=in_step, carry_in=carry_in, queue_kind=queue_kind, queue_device=queue_device,
                  rank=int(table.rank))
    d.summary = {
        "simulator": "dpro",
        "trace": table.path,
        "rank": int(table.rank),
        "step": None if step is None else step.number,
        "window_us": list(sel.window),
        "tasks": n,
        "cpu_tasks": 0,
        "gpu_tasks": n,
        "carry_in_gpu_ops": int(np.sum(carry_in)),
        "queues": {k: len(v) for k, v in d.queues().items()},
        "priorities": {p.label: int(np.sum(priority == p)) for p in Priority},
        "dependencies": int(np.sum(dep >= 0)),
        "gap_us_total": round(float(np.sum(gap)), 3),
        "serialized_overlap_us": round(float(_serialized_overlap(queue, ts, end)), 3),
        "violations": 0,
        "inferred_edges": int(np.sum(dep >= 0)),
        "edges": {c.label: 0 for c in EdgeClass},
    }
    d.summary["edges"].update({EdgeClass.INTRA_STREAM.label: int(np.sum(queue[1:] == queue[:-1])),
                               EdgeClass.INTER_STREAM.label: int(np.sum(dep >= 0))})
    return d


def _serialized_overlap(queue: np.ndarray, ts: np.ndarray, end: np.ndarray) -> float:
    """Measured time ops of one queue overlapped (work the queue discipline serializes)."""
    total = 0.0
    for q in np.unique(queue):
        nodes = np.flatnonzero(queue == q)
        if len(nodes) < 2:
            continue
        busy_until = np.maximum.accumulate(end[nodes])
        total += float(np.sum(np.clip(busy_until[:-1] - ts[nodes[1:]], 0.0, end[nodes[1:]] - ts[nodes[1:]])))
    return total


def replay_dpro(d: DproGraph) -> Schedule:
    """Replay by dPRO's queue discipline; returns each node's start and end."""
    n = len(d)
    start = np.full(n, np.nan)
    end = np.full(n, np.nan)
    done = np.zeros(n, dtype=bool)
    n_queues = len(d.queue_kind)
    free = np.full(n_queues, -np.inf)       # when each queue can take its next op
    bounds = np.searchsorted(d.queue, np.arange(n_queues + 1))  # nodes are queue-major
    head = bounds[:-1].copy()               # next node of each queue
    waiting: dict[int, list[int]] = {}      # producer -> queue heads waiting for it
    ready_heap: list[tuple[int, float, float, int]] = []

    def offer(q: int) -> None:
        if head[q] >= bounds[q + 1]:
            return
        i = int(head[q])
        p = int(d.dep[i])
        if p >= 0 and not done[p]:
            waiting.setdefault(p, []).append(q)
            return
        ready = max(free[q], d.release[i])
        if p >= 0:
            ready = max(ready, end[p] + d.dep_gap[i])
        heapq.heappush(ready_heap, (int(d.priority[i]), ready, float(d.ts[i]), i))

    for q in range(n_queues):
        offer(q)
    while ready_heap:
        _, s, _, i = heapq.heappop(ready_heap)
        q = int(d.queue[i])
        start[i] = s
        end[i] = s + d.dur[i]
        done[i] = True
        free[q] = end[i] + d.gap[i]
        head[q] += 1
        offer(q)
        for w in waiting.pop(i, ()):
            offer(w)
    if not done.all():
        stuck = np.flatnonzero(~done)
        raise SimulationError([f"#{i} {d.name[i]}" for i in stuck[:8]], len(stuck), n)
    return Schedule(start=start, end=end)


__all__ = ["DproGraph", "Priority", "QueueKind", "Phase", "build_dpro", "replay_dpro"]
