"""Collects one rank's timeline as tuples during emulation and turns it into Kineto events.

Times are emulated microseconds from the iteration start; on output they are put
on an integer-nanosecond grid (3 decimals) so that "starts no earlier than the
previous end" survives rounding.
"""

from __future__ import annotations

import numpy as np

CBID = {"cudaLaunchKernel": 211, "cudaLaunchKernelExC": 430, "cudaMemcpyAsync": 41,
        "cudaMemsetAsync": 51, "cudaEventRecord": 135, "cudaStreamWaitEvent": 147,
        "cudaStreamSynchronize": 131}
STREAM_NAMES = {7: "compute", 20: "nccl tp", 24: "nccl dp", 28: "nccl pp send", 32: "nccl pp recv"}


class Recorder:
    def __init__(self, rank: int, device: int, host_pid: int):
        self.rank, self.device, self.pid = rank, device, host_pid
        self.cpu: list = []    # (ts, end, cat, name, tid, args)
        self.rt: list = []     # (ts, end, name, tid, corr, ext)
        self.gpu: list = []    # (ts, end, cat, name, stream, corr, ext, extra_args)
        self.sync: list = []   # (ts, end, stream, args)
        self._corr = 100
        self._ext = 0
        self.threads: dict[int, str] = {}

    def next_corr(self) -> int:
        self._corr += 1
        return self._corr

    def next_ext(self) -> int:
        self._ext += 1
        return self._ext

    # -- output --------------------------------------------------------------
    def events(self, base_us: float, legacy: bool) -> list[dict]:
        """Kineto trace events, deterministic order (by time, then a stable tie-break).

        Column-wise: times go to the nanosecond grid and are sorted as arrays; only the
        final dicts are built per event (a 175B rank holds millions)."""
        base_ns = int(round(base_us * 1000.0))
        pid, dev = self.pid, self.device
        cols, parts = [], []    # per event kind: (ts, dur, kind order) arrays; its dicts

        def grid(ts, end):
            a = base_ns + np.rint(np.asarray(ts, dtype=np.float64) * 1000.0).astype(np.int64)
            b = base_ns + np.rint(np.asarray(end, dtype=np.float64) * 1000.0).astype(np.int64)
            return a / 1000.0, (b - a) / 1000.0

        def add(order, t, d, dicts):
            cols.append((t, d, np.full(len(t), order, dtype=np.int8)))
            parts.append(dicts)

        if self.cpu:
            ts, end, cat, name, tid, args = zip(*self.cpu)
            t, d = grid(ts, end)
            add(0, t, d, [{"ph": "X", "cat": c, "name": n, "pid": pid, "tid": th, "ts": a, "dur": b, "args": g}
                          for c, n, th, a, b, g in zip(cat, name, tid, t.tolist(), d.tolist(), args)])
        if self.rt:
            ts, end, name, tid, corr, ext = zip(*self.rt)
            t, d = grid(ts, end)
            add(1, t, d, [{"ph": "X", "cat": "cuda_runtime", "name": n, "pid": pid, "tid": th, "ts": a, "dur": b,
                           "args": {"External id": x, "cbid": CBID[n], "correlation": c}}
                          for n, th, a, b, c, x in zip(name, tid, t.tolist(), d.tolist(), corr, ext)])
            rt_corr = np.asarray(corr, dtype=np.int64)
            rt_ts, rt_tid = np.asarray(ts, dtype=np.float64), np.asarray(tid, dtype=np.int64)
        if self.gpu:
            ts, end, cat, name, stream, corr, ext, extra = zip(*self.gpu)
            t, d = grid(ts, end)
            kernels = []
            for c, n, st, a, b, co, x, more in zip(cat, name, stream, t.tolist(), d.tolist(), corr, ext, extra):
                args = {"External id": x, "device": dev, "stream": st, "correlation": co}
                if more:
                    args.update(more)
                kernels.append({"ph": "X", "cat": c, "name": n, "pid": dev, "tid": st, "ts": a, "dur": b,
                                "args": args})
            add(2, t, d, kernels)
            # flow arrows: launch (on the runtime call's thread, at its start) -> kernel start
            by_corr = np.argsort(rt_corr, kind="stable")
            at = by_corr[np.searchsorted(rt_corr[by_corr], np.asarray(corr, dtype=np.int64))]
            ls, _ = grid(rt_ts[at], rt_ts[at])
            zero = np.zeros(len(t))
            add(3, ls, zero, [{"ph": "s", "id": co, "pid": pid, "tid": th, "ts": a, "cat": "ac2g", "name": "ac2g"}
                              for co, th, a in zip(corr, rt_tid[at].tolist(), ls.tolist())])
            add(4, t, zero, [{"ph": "f", "id": co, "pid": dev, "tid": st, "ts": a, "cat": "ac2g", "name": "ac2g",
                              "bp": "e"} for co, st, a in zip(corr, stream, t.tolist())])
        if self.sync and not legacy:
            ts, end, stream, args = zip(*self.sync)
            t, d = grid(ts, end)
            add(5, t, d, [{"ph": "X", "cat": "cuda_sync", "name": g["cuda_sync_kind"], "pid": dev, "tid": st,
                           "ts": a, "dur": b, "args": g}
                          for st, a, b, g in zip(stream, t.tolist(), d.tolist(), args)])
        meta = [{"name": "process_name", "ph": "M", "ts": base_ns / 1000.0, "pid": pid, "tid": 0,
                 "args": {"name": "python3"}},
                {"name": "process_name", "ph": "M", "ts": base_ns / 1000.0, "pid": dev, "tid": 0,
                 "args": {"name": f"GPU {dev}"}}]
        for tid, tname in sorted(self.threads.items()):
            meta.append({"name": "thread_name", "ph": "M", "ts": base_ns / 1000.0, "pid": pid, "tid": tid,
                         "args": {"name": tname}})
        for sid, sname in sorted(STREAM_NAMES.items()):
            meta.append({"name": "thread_name", "ph": "M", "ts": base_ns / 1000.0, "pid": dev, "tid": sid,
                         "args": {"name": f"stream {sid} ({sname})"}})
        if not cols:
            return meta
        t, d, kind = (np.concatenate(c) for c in zip(*cols))
        index = np.concatenate([np.arange(len(c[0])) for c in cols])
        order = np.lexsort((index, kind, -d, t))   # time, longer first, kind, then recording order
        flat = [ev for dicts in parts for ev in dicts]
        return meta + [flat[k] for k in order.tolist()]
