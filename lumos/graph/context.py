"""Shared lookups the edge builders need, computed once per graph build."""

from __future__ import annotations

import numpy as np

from lumos.lean_numpy import unique
from lumos.trace import schema
from lumos.trace.table import TraceTable

from .tasks import TaskSelection

CLOCK_TOL_US = 1.0   # a GPU op may be stamped this much before its launch call on another clock


class EdgeList:
    """Edges one builder found, in the order found; `how` says how inferred edges were found.

    A builder adds a whole array of edges at once (`extend`) where its rule is an array
    operation, one edge at a time (`add`) where it must decide edge by edge."""

    def __init__(self):
        self._chunks: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._src: list[int] = []
        self._dst: list[int] = []
        self._inferred: list[bool] = []
        self.how: dict[str, int] = {}

    def add(self, s: int, d: int, inferred: bool = False, how: str | None = None) -> None:
        self._src.append(int(s))
        self._dst.append(int(d))
        self._inferred.append(bool(inferred))
        if inferred and how:
            self.how[how] = self.how.get(how, 0) + 1

    def extend(self, src: np.ndarray, dst: np.ndarray, inferred: bool = False, how: str | None = None) -> None:
        self._flush()
        src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        self._chunks.append((src, dst, np.full(len(src), bool(inferred))))
        if inferred and how and len(src):
            self.how[how] = self.how.get(how, 0) + len(src)

    def _flush(self) -> None:
        if self._src:
            self._chunks.append((np.asarray(self._src, dtype=np.int64), np.asarray(self._dst, dtype=np.int64),
                                 np.asarray(self._inferred, dtype=bool)))
            self._src, self._dst, self._inferred = [], [], []

    def _column(self, k: int, dtype) -> np.ndarray:
        self._flush()
        if not self._chunks:
            return np.zeros(0, dtype=dtype)
        if len(self._chunks) > 1:
            self._chunks = [tuple(np.concatenate([c[j] for c in self._chunks]) for j in range(3))]
        return self._chunks[0][k]

    @property
    def src(self) -> np.ndarray:
        return self._column(0, np.int64)

    @property
    def dst(self) -> np.ndarray:
        return self._column(1, np.int64)

    @property
    def inferred(self) -> np.ndarray:
        return self._column(2, bool)

    def __len__(self) -> int:
        return sum(len(c[0]) for c in self._chunks) + len(self._src)


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
        self.stream_key = np.where(self.is_gpu, _stream_key(device, stream), -1)
        self.stream = np.where(self.is_gpu, stream, -1)
        self.device = np.where(self.is_gpu, device, -1)
        self.tid = tid
        # processors: threads then streams, numbered in key order
        cpu_keys, cpu_proc = np.unique(self.thread_key[~self.is_gpu], return_inverse=True)
        gpu_keys, gpu_proc = np.unique(self.stream_key[self.is_gpu], return_inverse=True)
        self.proc = np.empty(self.n, dtype=np.int32)
        self.proc[~self.is_gpu] = cpu_proc.reshape(-1)
        self.proc[self.is_gpu] = len(cpu_keys) + gpu_proc.reshape(-1)
        self.proc_kind = np.r_[np.zeros(len(cpu_keys), dtype=np.int8), np.ones(len(gpu_keys), dtype=np.int8)]
        self.proc_key = np.r_[cpu_keys, gpu_keys].astype(np.int64)
        # tasks of each processor in measured order
        order = np.lexsort((self.sel.event, self.ts, self.proc))
        splits = np.flatnonzero(np.diff(self.proc[order])) + 1
        self.proc_tasks: list[np.ndarray] = np.split(order, splits) if self.n else []
        self.stream_pos = np.full(self.n, -1, dtype=np.int32)
        for p, tasks in enumerate(self.proc_tasks):
            if len(tasks) and self.proc_kind[self.proc[tasks[0]]] == 1:
                self.stream_pos[tasks] = np.arange(len(tasks), dtype=np.int32)
        # launcher of each GPU op (runtime task with the same correlation id; ids are positive,
        # 0 is roctracer's "none")
        self.launcher = np.full(self.n, -1, dtype=np.int64)
        runtime = np.flatnonzero(~self.is_gpu & (self.cat == schema.RUNTIME) & (self.corr > 0))
        # the last runtime task of each correlation id (the later of two with one id wins)
        by_id = runtime[np.lexsort((self.ts[runtime], self.corr[runtime]))]
        ids = self.corr[by_id]
        last = np.r_[ids[1:] != ids[:-1], True] if len(ids) else np.zeros(0, dtype=bool)
        self._runtime_ids, self._runtime_tasks = ids[last], by_id[last]
        gpu = np.flatnonzero(self.is_gpu)
        self.launcher[gpu] = self.runtime_of(self.corr[gpu])
        if not last.all():
            self._launchers_of_reused_ids(gpu, by_id, ids)
        self._suffix_min: dict[tuple[str, int], np.ndarray] = {}
        self._prefix_max: dict[tuple[str, int], np.ndarray] = {}

    def _launchers_of_reused_ids(self, gpu: np.ndarray, by_id: np.ndarray, ids: np.ndarray) -> None:
        """Where runtime calls share a correlation id (a tracer that reuses ids), each
        op's launcher is the last of them that started by the op's start (clock tolerance
        CLOCK_TOL_US), else the first: never a call made after the op ran."""
        reused = unique(ids[:-1][ids[1:] == ids[:-1]])
        for g in gpu[np.isin(self.corr[gpu], reused)]:
            calls = by_id[ids == self.corr[g]]           # by start, earliest first
            k = int(np.searchsorted(self.ts[calls], self.ts[g] + CLOCK_TOL_US, side="right")) - 1
            self.launcher[g] = calls[max(k, 0)]

    def proc_of_stream(self, device: int, stream: int) -> int:
        if not hasattr(self, "_stream_procs"):
            self._stream_procs = {int(k): p for p, (kind, k) in enumerate(zip(self.proc_kind, self.proc_key)) if kind == 1}
        return self._stream_procs.get(_stream_key(device, stream), -1)

    def runtime_of(self, corr: np.ndarray) -> np.ndarray:
        """The runtime task of each correlation id (-1: none)."""
        return _lookup(self._runtime_ids, self._runtime_tasks, np.asarray(corr, dtype=np.int64))

    def procs_of_streams(self, device: np.ndarray, stream: np.ndarray) -> np.ndarray:
        """`proc_of_stream` for many (device, stream) pairs."""
        gpu = np.flatnonzero(self.proc_kind == 1)
        key = _stream_key(np.asarray(device, dtype=np.int64), np.asarray(stream, dtype=np.int64))
        return _lookup(self.proc_key[gpu], gpu.astype(np.int64), key)

    def last_on_streams(self, procs: np.ndarray, which: str, t: np.ndarray) -> np.ndarray:
        """`last_on_stream` for many queries (-1 where the processor is -1)."""
        out = np.full(len(procs), -1, dtype=np.int64)
        for p in unique(procs[procs >= 0]):
            q = np.flatnonzero(procs == p)
            k = np.searchsorted(self._suffix_min_of(which, int(p)), t[q], side="right") - 1
            out[q[k >= 0]] = self.proc_tasks[p][k[k >= 0]]
        return out

    def first_launched_after_many(self, procs: np.ndarray, t: np.ndarray) -> np.ndarray:
        """`first_launched_after` for many queries (-1 where the processor is -1)."""
        out = np.full(len(procs), -1, dtype=np.int64)
        for p in unique(procs[procs >= 0]):
            q = np.flatnonzero(procs == p)
            k = np.searchsorted(self._prefix_max_of("launch", int(p)), t[q], side="left")
            ops = self.proc_tasks[p]
            ok = k < len(ops)
            out[q[ok]] = ops[k[ok]]
        return out

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
        k = int(np.searchsorted(self._suffix_min_of(which, proc), t, side="right")) - 1
        return int(self.proc_tasks[proc][k]) if k >= 0 else -1

    def last_enqueued(self, proc: int, t: float) -> int:
        """What a sync issued at t finds last on stream `proc`: the end of the stream's
        longest prefix of ops all enqueued by t (a stream is FIFO: an op behind one not
        yet enqueued cannot be waited for). -1 if none."""
        k = int(np.searchsorted(self._prefix_max_of("enq", proc), t, side="right")) - 1
        return int(self.proc_tasks[proc][k]) if k >= 0 else -1

    def first_launched_after(self, proc: int, t: float) -> int:
        """The first op on stream `proc` whose launch call started at or after t, or -1."""
        k = int(np.searchsorted(self._prefix_max_of("launch", proc), t, side="left"))
        ops = self.proc_tasks[proc]
        return int(ops[k]) if k < len(ops) else -1

    def _times(self, which: str) -> np.ndarray:
        return self.enqueue_time() if which == "enq" else self.launch_time()

    def _suffix_min_of(self, which: str, proc: int) -> np.ndarray:
        """Running minimum from the end of stream `proc` of its ops' enqueue or launch times (made once)."""
        key = (which, proc)
        if key not in self._suffix_min:
            values = self._times(which)[self.proc_tasks[proc]]
            self._suffix_min[key] = np.minimum.accumulate(values[::-1])[::-1]
        return self._suffix_min[key]

    def _prefix_max_of(self, which: str, proc: int) -> np.ndarray:
        """Running maximum along stream `proc` of its ops' enqueue or launch times (made once)."""
        key = (which, proc)
        if key not in self._prefix_max:
            self._prefix_max[key] = np.maximum.accumulate(self._times(which)[self.proc_tasks[proc]])
        return self._prefix_max[key]


def _stream_key(device, stream):
    """One integer per (device, stream): a GPU processor's key."""
    return device * (1 << 32) + (stream & 0xFFFFFFFF)


def _lookup(keys: np.ndarray, values: np.ndarray, query: np.ndarray) -> np.ndarray:
    """values[i] where keys[i] == query (keys sorted, distinct), else -1."""
    at = np.searchsorted(keys, query)
    ok = at < len(keys)
    ok[ok] = keys[at[ok]] == query[ok]
    out = np.full(len(query), -1, dtype=np.int64)
    out[ok] = values[at[ok]]
    return out
