"""Shared lookups the edge builders need, computed once per graph build."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from lumos.trace import schema
from lumos.trace.table import TraceTable

from .tasks import TaskSelection


@dataclass
class EdgeList:
    """Edges one builder found; `how` says how inferred edges were found."""
    src: list = field(default_factory=list)
    dst: list = field(default_factory=list)
    inferred: list = field(default_factory=list)
    how: dict = field(default_factory=dict)

    def add(self, s: int, d: int, inferred: bool = False, how: str | None = None) -> None:
        self.src.append(int(s))
        self.dst.append(int(d))
        self.inferred.append(bool(inferred))
        if inferred and how:
            self.how[how] = self.how.get(how, 0) + 1

    def __len__(self) -> int:
        return len(self.src)


class BuildContext:
    """Per-task fields and per-processor orders of one rank's selected tasks."""

    def __init__(self, table: TraceTable, sel: TaskSelection):
        self.table = table
        self.sel = sel
        ev = sel.event
        self.n = len(ev)
        self.name = table.name[ev]
        self.cat = table.cat[ev]
        self.corr = table.corr[ev]
        self.ts = sel.ts
        self.dur = sel.dur
        self.end = sel.ts + sel.dur
        self.is_gpu = sel.is_gpu
        pid, tid = table.pid[ev], table.tid[ev]
        stream, device = table.stream[ev], table.device[ev]
        self.thread_key = np.where(self.is_gpu, -1, pid * (1 << 32) + (tid & 0xFFFFFFFF))
        self.stream_key = np.where(self.is_gpu, device * (1 << 32) + (stream & 0xFFFFFFFF), -1)
        self.stream = np.where(self.is_gpu, stream, -1)
        self.device = np.where(self.is_gpu, device, -1)
        self.tid = tid
        # processors: threads then streams, numbered in key order
        keys = np.where(self.is_gpu, self.stream_key, self.thread_key)
        kinds = self.is_gpu.astype(np.int8)
        uniq = sorted(set(zip(kinds.tolist(), keys.tolist())))
        index = {k: i for i, k in enumerate(uniq)}
        self.proc = np.array([index[(k, v)] for k, v in zip(kinds.tolist(), keys.tolist())], dtype=np.int32)
        self.proc_kind = np.array([k for k, _ in uniq], dtype=np.int8)
        self.proc_key = np.array([v for _, v in uniq], dtype=np.int64)
        # tasks of each processor in measured order
        order = np.lexsort((self.sel.event, self.ts, self.proc))
        splits = np.flatnonzero(np.diff(self.proc[order])) + 1
        self.proc_tasks: list[np.ndarray] = np.split(order, splits) if self.n else []
        self.stream_pos = np.full(self.n, -1, dtype=np.int32)
        for p, tasks in enumerate(self.proc_tasks):
            if len(tasks) and self.proc_kind[self.proc[tasks[0]]] == 1:
                self.stream_pos[tasks] = np.arange(len(tasks), dtype=np.int32)
        # launcher of each GPU op (runtime task with the same correlation id)
        self.launcher = np.full(self.n, -1, dtype=np.int64)
        runtime = np.flatnonzero(~self.is_gpu & (self.cat == schema.RUNTIME) & (self.corr >= 0))
        by_corr = {int(self.corr[i]): int(i) for i in runtime}
        for g in np.flatnonzero(self.is_gpu):
            self.launcher[g] = by_corr.get(int(self.corr[g]), -1)
        self.runtime_by_corr = by_corr
        self._suffix_min: dict[tuple[str, int], np.ndarray] = {}
        self._prefix_max: dict[tuple[str, int], np.ndarray] = {}

    def proc_of_stream(self, device: int, stream: int) -> int:
        if not hasattr(self, "_stream_procs"):
            self._stream_procs = {int(k): p for p, (kind, k) in enumerate(zip(self.proc_kind, self.proc_key)) if kind == 1}
        return self._stream_procs.get(device * (1 << 32) + (stream & 0xFFFFFFFF), -1)

    def streams_of_device(self, device: int) -> np.ndarray:
        return np.flatnonzero((self.proc_kind == 1) & ((self.proc_key >> 32) == device))

    def enqueue_time(self) -> np.ndarray:
        """Measured time each GPU op became visible to a sync: its launcher's end (-inf if none)."""
        if not hasattr(self, "_enq"):
            t = np.full(self.n, -np.inf)
            has = self.launcher >= 0
            t[has] = self.end[self.launcher[has]]
            self._enq = t
        return self._enq

    def launch_time(self) -> np.ndarray:
        """When each GPU op's launch call started (-inf if it has no launcher in the window)."""
        if not hasattr(self, "_launch_ts"):
            t = np.full(self.n, -np.inf)
            has = self.launcher >= 0
            t[has] = self.ts[self.launcher[has]]
            self._launch_ts = t
        return self._launch_ts

    def last_on_stream(self, proc: int, which: str, t: float) -> int:
        """The op furthest along stream `proc` whose enqueue (which='enq') or launch
        (which='launch') time is <= t, or -1. Exact even when those times are not
        monotone along the stream (suffix minimum + binary search)."""
        key = (which, proc)
        if key not in self._suffix_min:
            values = (self.enqueue_time() if which == "enq" else self.launch_time())[self.proc_tasks[proc]]
            self._suffix_min[key] = np.minimum.accumulate(values[::-1])[::-1]
        k = int(np.searchsorted(self._suffix_min[key], t, side="right")) - 1
        return int(self.proc_tasks[proc][k]) if k >= 0 else -1

    def last_enqueued(self, proc: int, t: float) -> int:
        """What a sync issued at t finds last on stream `proc`: the end of the stream's
        longest prefix of ops all enqueued by t (a stream is FIFO: an op behind one not
        yet enqueued cannot be waited for). -1 if none."""
        key = ("enq", proc)
        if key not in self._prefix_max:
            self._prefix_max[key] = np.maximum.accumulate(self.enqueue_time()[self.proc_tasks[proc]])
        k = int(np.searchsorted(self._prefix_max[key], t, side="right")) - 1
        return int(self.proc_tasks[proc][k]) if k >= 0 else -1

    def first_launched_after(self, proc: int, t: float) -> int:
        """The first op on stream `proc` whose launch call started at or after t, or -1."""
        key = ("launch", proc)
        if key not in self._prefix_max:
            self._prefix_max[key] = np.maximum.accumulate(self.launch_time()[self.proc_tasks[proc]])
        k = int(np.searchsorted(self._prefix_max[key], t, side="left"))
        ops = self.proc_tasks[proc]
        return int(ops[k]) if k < len(ops) else -1
