"""The execution graph as arrays: tasks, processors, typed edges, run-time waits.

Arrays (not objects) so the simulator core can be compiled and a 10^7-task
graph fits in memory. Task i is row i of every task array; edge j is row j of
every edge array.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np


class EdgeClass(IntEnum):
    INTRA_THREAD = 0
    INTER_THREAD = 1
    LAUNCH = 2
    SYNC = 3
    INTRA_STREAM = 4
    INTER_STREAM = 5
    CROSS_RANK = 6

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, text: str) -> "EdgeClass":
        try:
            return cls[text.strip().upper()]
        except KeyError:
            names = ", ".join(c.label for c in cls)
            raise ValueError(f"unknown edge class {text!r} (known: {names})") from None


ALL_EDGE_CLASSES = frozenset(EdgeClass)


class TaskKind(IntEnum):
    CPU = 0
    GPU = 1


class WaitKind(IntEnum):
    """Dependencies resolved only at replay time (Algorithm 1's run-time dependencies)."""
    NONE = 0
    STREAM = 1  # wait for whatever is last on stream `wait_target` when the task starts
    DEVICE = 2  # wait for whatever is last on every stream of rank `wait_target`


@dataclass
class Graph:
    """Tasks with measured timing, processors, and happens-before edges.

    Edge semantics: start(dst) >= end(src) + lag. `lag` carries the measured
    gap that the edge explains (host overhead, launch latency); it is computed
    once on the full graph, so dropping a class in an ablation removes that
    class's constraint without moving its gap elsewhere.
    """

    # tasks
    name: np.ndarray          # object
    kind: np.ndarray          # int8 TaskKind
    proc: np.ndarray          # int32 processor id
    dur: np.ndarray           # float64 replay duration (us)
    ts: np.ndarray            # float64 measured start (us, trace clock)
    release: np.ndarray       # float64 earliest start; -inf when dependencies decide
    comm: np.ndarray          # bool, communication (collective / p2p) GPU op
    in_step: np.ndarray       # bool, GPU op of the selected iteration (defines the span)
    rank: np.ndarray          # int32
    stream_pos: np.ndarray    # int32 position on its stream (-1 for CPU tasks)
    wait_kind: np.ndarray     # int8 WaitKind
    wait_target: np.ndarray   # int32 processor id (STREAM) or rank (DEVICE)
    event: np.ndarray         # int64 row in the rank's TraceTable (-1: synthetic)
    layer: np.ndarray         # int32, -1 unknown
    phase: np.ndarray         # int8, -1 unknown, 0 fwd, 1 bwd, 2 optimizer
    # processors
    proc_kind: np.ndarray     # int8 TaskKind (thread or stream)
    proc_rank: np.ndarray     # int32
    proc_key: np.ndarray      # int64 (pid<<32|tid) for threads, (device<<32|stream) for streams
    proc_name: np.ndarray     # object, for output traces
    # edges
    src: np.ndarray           # int64
    dst: np.ndarray           # int64
    cls: np.ndarray           # int8 EdgeClass
    lag: np.ndarray           # float64
    inferred: np.ndarray      # bool: inferred from the timeline, not read from explicit args
    summary: dict[str, Any] = field(default_factory=dict)
    # Optional per-task earliest end (us; -inf: none): a collective of a rank replayed without its
    # peers ends no earlier than they let it (`lumos.analysis.transfer`). None: no task has one.
    finish_floor: np.ndarray | None = None

    TASK_FIELDS = ("name", "kind", "proc", "dur", "ts", "release", "comm", "in_step", "rank",
                   "stream_pos", "wait_kind", "wait_target", "event", "layer", "phase")
    PROC_FIELDS = ("proc_kind", "proc_rank", "proc_key", "proc_name")
    EDGE_FIELDS = ("src", "dst", "cls", "lag", "inferred")

    @property
    def n_tasks(self) -> int:
        return len(self.dur)

    @property
    def n_edges(self) -> int:
        return len(self.src)

    @property
    def n_procs(self) -> int:
        return len(self.proc_kind)

    @property
    def end(self) -> np.ndarray:
        return self.ts + self.dur

    def edge_counts(self) -> dict[str, int]:
        counts = np.bincount(self.cls.astype(np.int64), minlength=len(EdgeClass))
        return {c.label: int(counts[c]) for c in EdgeClass}

    def with_edges(self, keep: np.ndarray) -> "Graph":
        """The same tasks with only the edges where `keep` is true."""
        kw = {f: getattr(self, f) for f in self.TASK_FIELDS + self.PROC_FIELDS}
        kw.update({f: getattr(self, f)[keep] for f in self.EDGE_FIELDS})
        return Graph(summary=dict(self.summary), finish_floor=self.finish_floor, **kw)

    def copy(self) -> "Graph":
        kw = {f: np.array(getattr(self, f), copy=True) for f in self.TASK_FIELDS + self.PROC_FIELDS + self.EDGE_FIELDS}
        floor = None if self.finish_floor is None else self.finish_floor.copy()
        return Graph(summary=dict(self.summary), finish_floor=floor, **kw)
