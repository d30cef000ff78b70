"""Collects one rank's timeline as tuples during emulation and turns it into Kineto events.

Times are emulated microseconds from the iteration start; on output they are put
on an integer-nanosecond grid (3 decimals) so that "starts no earlier than the
previous end" survives rounding.

`encode` writes the trace a column at a time (`lumos.trace.column_writer`): what the
emulator writes. `events` builds the same events as dicts, one by one: the definition
`encode` is held to (tests/emulator/test_column_writer.py), and what a caller that wants
dicts gets.
"""

from __future__ import annotations

import numpy as np
import orjson

from lumos.trace.column_writer import INT, MAX_NUMBERS, USEC, Fragments, Kind, around_events, encode_rows

CBID = {"cudaLaunchKernel": 211, "cudaLaunchKernelExC": 430, "cudaMemcpyAsync": 41,
        "cudaMemsetAsync": 51, "cudaEventRecord": 135, "cudaStreamWaitEvent": 147,
        "cudaStreamSynchronize": 131}
STREAM_NAMES = {7: "compute", 20: "nccl tp", 24: "nccl dp", 28: "nccl pp send", 32: "nccl pp recv"}
# named only where used (interleaved 1F1B: `rank.SEND_BWD_S`; context parallelism: `engine.CP_STREAM`)
RING_STREAM_NAMES = {29: "nccl pp send (backward)", 33: "nccl pp recv (backward)", 44: "nccl cp",
                     46: "nccl cp recv", 48: "expert parallel"}


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
            a, d = ns_grid(base_ns, ts, end)
            return a / 1000.0, d / 1000.0

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
        meta = self.meta_events(base_ns)
        if not cols:
            return meta
        t, d, kind = (np.concatenate(c) for c in zip(*cols))
        index = np.concatenate([np.arange(len(c[0])) for c in cols])
        order = np.lexsort((index, kind, -d, t))   # time, longer first, kind, then recording order
        flat = [ev for dicts in parts for ev in dicts]
        return meta + [flat[k] for k in order.tolist()]

    def meta_events(self, base_ns: int) -> list[dict]:
        """Process and thread names (Kineto's "M" events)."""
        pid, dev, ts = self.pid, self.device, base_ns / 1000.0
        meta = [{"name": "process_name", "ph": "M", "ts": ts, "pid": pid, "tid": 0, "args": {"name": "python3"}},
                {"name": "process_name", "ph": "M", "ts": ts, "pid": dev, "tid": 0, "args": {"name": f"GPU {dev}"}}]
        for tid, tname in sorted(self.threads.items()):
            meta.append({"name": "thread_name", "ph": "M", "ts": ts, "pid": pid, "tid": tid,
                         "args": {"name": tname}})
        used = {g[4] for g in self.gpu}
        names = {**STREAM_NAMES, **{k: v for k, v in RING_STREAM_NAMES.items() if k in used}}
        for sid, sname in sorted(names.items()):
            meta.append({"name": "thread_name", "ph": "M", "ts": ts, "pid": dev, "tid": sid,
                         "args": {"name": f"stream {sid} ({sname})"}})
        return meta

    def encode(self, base_us: float, legacy: bool, metadata: dict) -> np.ndarray:
        """The rank's trace file as JSON bytes (a uint8 array): `metadata`'s keys, then "traceEvents":
        the metadata events, then every other event encoded column-wise, in the order of `events`
        (by time, longer first, kind, recording order)."""
        base_ns = int(round(base_us * 1000.0))
        pid, dev = self.pid, self.device
        fr = Fragments()
        rows = []   # per kind present: (kind index, ts ns, dur ns, head ids, numbers, tail ids or None)

        def grid(ts, end):
            return ns_grid(base_ns, ts, end)

        def head(cat, name):
            return b'{"ph":"X","cat":' + orjson.dumps(cat) + b',"name":' + orjson.dumps(name) + b',"pid":'

        def full(n, v):
            return np.full(n, v, dtype=np.int64)

        if self.cpu:
            ts, end, cat, name, tid, args = zip(*self.cpu)
            t, d = grid(ts, end)
            rows.append((0, t, d, fr.ids(list(zip(cat, name)), lambda k: head(*k)),
                         [full(len(t), pid), ints(tid), t, d], fr.extend(map(orjson.dumps, args))))
        if self.rt:
            ts, end, name, tid, corr, ext = zip(*self.rt)
            t, d = grid(ts, end)
            rt_corr, rt_tid = ints(corr), ints(tid)
            rows.append((1, t, d, fr.ids(name, lambda n: head("cuda_runtime", n)),
                         [full(len(t), pid), rt_tid, t, d, ints(ext), ints(map(CBID.__getitem__, name), len(name)),
                          rt_corr], None))
            rt_t = t
        if self.gpu:
            ts, end, cat, name, stream, corr, ext, extra = zip(*self.gpu)
            t, d = grid(ts, end)
            n = len(t)
            st, co = ints(stream), ints(corr)
            more = [b"," + orjson.dumps(m)[1:-1] if m else b"" for m in extra]
            rows.append((2, t, d, fr.ids(list(zip(cat, name)), lambda k: head(*k)),
                         [full(n, dev), st, t, d, ints(ext), full(n, dev), st, co], fr.extend(more)))
            # flow arrows: launch (on the runtime call's thread, at its start) -> kernel start
            by_corr = np.argsort(rt_corr, kind="stable")
            at = by_corr[np.searchsorted(rt_corr[by_corr], co)]
            ls, zero = rt_t[at], np.zeros(n, dtype=np.int64)
            rows.append((3, ls, zero, full(n, fr.add(b'{"ph":"s","id":')), [co, full(n, pid), rt_tid[at], ls], None))
            rows.append((4, t, zero, full(n, fr.add(b'{"ph":"f","id":')), [co, full(n, dev), st, t], None))
        if self.sync and not legacy:
            ts, end, stream, args = zip(*self.sync)
            t, d = grid(ts, end)
            rows.append((5, t, d, fr.ids([g["cuda_sync_kind"] for g in args], lambda n: head("cuda_sync", n)),
                         [full(len(t), dev), ints(stream), t, d], fr.extend(map(orjson.dumps, args))))
        document = {"schemaVersion": 1, **metadata, "traceEvents": self.meta_events(base_ns)}
        prefix, suffix = around_events(document, more=bool(rows))
        if not rows:
            return np.frombuffer(prefix + suffix, dtype=np.uint8)
        kind = np.concatenate([full(len(r[1]), r[0]) for r in rows])
        t, d = (np.concatenate([r[i] for r in rows]) for i in (1, 2))
        index = np.concatenate([np.arange(len(r[1])) for r in rows])
        order = np.lexsort((index, kind, -d, t))   # time, longer first, kind, then recording order
        numbers = np.zeros((len(kind), MAX_NUMBERS), dtype=np.int64)
        at = 0
        for r in rows:
            m = len(r[1])
            numbers[at:at + m, :len(r[4])] = np.column_stack(r[4])
            at += m
        head_ids = np.concatenate([r[3] for r in rows])
        tail_ids = np.concatenate([r[5] if r[5] is not None else full(len(r[1]), -1) for r in rows])
        return encode_rows(fr, KINDS, kind[order], head_ids[order], numbers[order], tail_ids[order], prefix, suffix)


def ns_grid(base_ns: int, ts, end) -> tuple[np.ndarray, np.ndarray]:
    """Start and duration in integer nanoseconds: both ends rounded to the grid, so a start no
    earlier than the previous end stays so."""
    a = base_ns + np.rint(floats(ts) * 1000.0).astype(np.int64)
    b = base_ns + np.rint(floats(end) * 1000.0).astype(np.int64)
    return a, b - a


def floats(values) -> np.ndarray:
    return np.fromiter(values, dtype=np.float64, count=len(values))


def ints(values, count: int | None = None) -> np.ndarray:
    return np.fromiter(values, dtype=np.int64, count=len(values) if count is None else count)


_PTTD = ((b"", INT), (b',"tid":', INT), (b',"ts":', USEC), (b',"dur":', USEC))   # after a head ending '"pid":'


def _kind(numbers, pre=b"", post=b"}") -> Kind:
    return Kind(tuple(s for s, _ in numbers), tuple(f for _, f in numbers), pre, post)


# the event kinds of `encode`, in the tie-break order of `events`
KINDS = (
    _kind(_PTTD, pre=b',"args":'),                                                        # 0 host op, annotation
    _kind(_PTTD + ((b',"args":{"External id":', INT), (b',"cbid":', INT), (b',"correlation":', INT)),
          post=b"}}"),                                                                    # 1 runtime call
    _kind(_PTTD + ((b',"args":{"External id":', INT), (b',"device":', INT), (b',"stream":', INT),
                   (b',"correlation":', INT)), post=b"}}"),                               # 2 kernel (tail: more args)
    _kind(((b"", INT), (b',"pid":', INT), (b',"tid":', INT), (b',"ts":', USEC)),
          post=b',"cat":"ac2g","name":"ac2g"}'),                                          # 3 flow start
    _kind(((b"", INT), (b',"pid":', INT), (b',"tid":', INT), (b',"ts":', USEC)),
          post=b',"cat":"ac2g","name":"ac2g","bp":"e"}'),                                 # 4 flow end
    _kind(_PTTD, pre=b',"args":'),                                                        # 5 sync
)
