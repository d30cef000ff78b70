"""Hand-written Kineto traces for exact-structure tests.

`TraceBuilder` places CPU ops, runtime calls and GPU ops at explicit times, so
a test states the timeline and the edges it expects in a few lines.
"""

from __future__ import annotations

from lumos.trace import parse_document, write_trace

PID, MAIN, BWD, DEV = 100, 100, 101, 0


class TraceBuilder:
    def __init__(self, step: tuple[float, float] | None = (0.0, 1000.0), rank: int = 0):
        self.events: list[dict] = []
        self.corr = 1
        self.rank = rank
        if step is not None:
            self.events.append({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1",
                                "pid": PID, "tid": MAIN, "ts": step[0], "dur": step[1] - step[0], "args": {}})

    def cpu(self, name, ts, dur, tid=MAIN, **args):
        self.events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": PID, "tid": tid,
                            "ts": ts, "dur": dur, "args": dict(args)})

    def runtime(self, name, ts, dur, tid=MAIN, corr=None):
        if corr is None:
            corr = self.corr
            self.corr += 1
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": PID, "tid": tid,
                            "ts": ts, "dur": dur, "args": {"correlation": corr, "cbid": 0}})
        return corr

    def gpu(self, name, ts, dur, stream=7, corr=-1, cat="kernel", **args):
        a = {"device": DEV, "stream": stream, "correlation": corr}
        a.update(args)
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": DEV, "tid": stream,
                            "ts": ts, "dur": dur, "args": a})

    def launch(self, kernel, t_call, call_dur, t_kernel, k_dur, stream=7, tid=MAIN, call="cudaLaunchKernel", **args):
        c = self.runtime(call, t_call, call_dur, tid=tid)
        self.gpu(kernel, t_kernel, k_dur, stream=stream, corr=c, **args)
        return c

    def sync_record(self, kind, corr, stream=-1, wait_stream=-1, wait_corr=-1, ts=0.0):
        self.events.append({"ph": "X", "cat": "cuda_sync", "name": kind, "pid": DEV, "tid": stream,
                            "ts": ts, "dur": 1, "args": {"cuda_sync_kind": kind, "stream": stream,
                                                         "wait_on_stream": wait_stream,
                                                         "wait_on_cuda_event_record_corr_id": wait_corr,
                                                         "correlation": corr, "device": DEV}})

    def document(self) -> dict:
        return {"traceEvents": list(self.events),
                "distributedInfo": {"rank": self.rank, "world_size": 1, "backend": "nccl"}}

    def table(self, path="synthetic.json"):
        return parse_document(self.document(), path)

    def write(self, path):
        write_trace(path, self.events, {"distributedInfo": {"rank": self.rank, "world_size": 1}})
        return path
