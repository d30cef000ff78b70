"""Collects one rank's timeline as tuples during emulation and turns it into Kineto events.

Times are emulated microseconds from the iteration start; on output they are put
on an integer-nanosecond grid (3 decimals) so that "starts no earlier than the
previous end" survives rounding.
"""

from __future__ import annotations

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
        """Kineto trace events, deterministic order (by time, then a stable tie-break)."""
        base_ns = int(round(base_us * 1000.0))
        pid, dev = self.pid, self.device

        def tsd(ts, end):
            a = base_ns + int(round(ts * 1000.0))
            b = base_ns + int(round(end * 1000.0))
            return a / 1000.0, (b - a) / 1000.0

        keyed = []
        for i, (ts, end, cat, name, tid, args) in enumerate(self.cpu):
            t, d = tsd(ts, end)
            keyed.append(((t, -d, 0, i), {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid,
                                          "ts": t, "dur": d, "args": args}))
        for i, (ts, end, name, tid, corr, ext) in enumerate(self.rt):
            t, d = tsd(ts, end)
            keyed.append(((t, -d, 1, i), {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": pid,
                                          "tid": tid, "ts": t, "dur": d,
                                          "args": {"External id": ext, "cbid": CBID[name], "correlation": corr}}))
        rt_pos = {corr: (ts, tid) for ts, _e, _n, tid, corr, _x in self.rt}
        for i, (ts, end, cat, name, stream, corr, ext, extra) in enumerate(self.gpu):
            t, d = tsd(ts, end)
            args = {"External id": ext, "device": dev, "stream": stream, "correlation": corr}
            if extra:
                args.update(extra)
            keyed.append(((t, -d, 2, i), {"ph": "X", "cat": cat, "name": name, "pid": dev, "tid": stream,
                                          "ts": t, "dur": d, "args": args}))
            lts, ltid = rt_pos[corr]
            ls, _ = tsd(lts, lts)
            keyed.append(((ls, 0.0, 3, i), {"ph": "s", "id": corr, "pid": pid, "tid": ltid, "ts": ls,
                                            "cat": "ac2g", "name": "ac2g"}))
            keyed.append(((t, 0.0, 4, i), {"ph": "f", "id": corr, "pid": dev, "tid": stream, "ts": t,
                                           "cat": "ac2g", "name": "ac2g", "bp": "e"}))
        if not legacy:
            for i, (ts, end, stream, args) in enumerate(self.sync):
                t, d = tsd(ts, end)
                keyed.append(((t, -d, 5, i), {"ph": "X", "cat": "cuda_sync", "name": args["cuda_sync_kind"],
                                              "pid": dev, "tid": stream, "ts": t, "dur": d, "args": args}))
        keyed.sort(key=lambda kv: kv[0])
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
        return meta + [ev for _, ev in keyed]
