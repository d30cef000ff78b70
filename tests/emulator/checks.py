"""Physical-consistency checks on one rank's Kineto events (the happens-before edges a predictor uses)."""

from __future__ import annotations

from collections import defaultdict

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync", "cudaMemsetAsync")
EPS = 1e-6


def xs(events):
    return [e for e in events if e.get("ph") == "X"]


def check_all(events) -> list[str]:
    errs = []
    ev = xs(events)
    rt = {e["args"]["correlation"]: e for e in ev if e["cat"] == "cuda_runtime"}
    gpu = [e for e in ev if e["cat"] in GPU_CATS]
    # launch -> GPU op
    for g in gpu:
        c = g["args"]["correlation"]
        r = rt.get(c)
        if r is None or r["name"] not in LAUNCH:
            errs.append(f"GPU op {g['name'][:40]} corr {c} has no launching runtime call")
        elif g["ts"] < r["ts"] - EPS:
            errs.append(f"GPU op corr {c} starts before its launch")
        if g["args"].get("External id") != (r or {}).get("args", {}).get("External id"):
            errs.append(f"GPU op corr {c} External id differs from its launch")
    # CPU nesting per thread
    by_thread = defaultdict(list)
    for e in ev:
        if e["cat"] in ("cpu_op", "user_annotation", "cuda_runtime"):
            by_thread[(e["pid"], e["tid"])].append(e)
    for key, lst in by_thread.items():
        lst.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in lst:
            while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"] - EPS:
                stack.pop()
            if stack and e["ts"] + e["dur"] > stack[-1]["ts"] + stack[-1]["dur"] + EPS:
                errs.append(f"thread {key}: {e['name']} overlaps {stack[-1]['name']} without nesting")
            stack.append(e)
    # stream FIFO
    streams = defaultdict(list)
    for g in gpu:
        if g["args"]["correlation"] in rt:
            streams[g["tid"]].append(g)
    launch_order = {}
    for sid, lst in streams.items():
        lst.sort(key=lambda g: rt[g["args"]["correlation"]]["ts"])   # program (launch) order
        launch_order[sid] = [(rt[g["args"]["correlation"]]["ts"], g) for g in lst]
        for a, b in zip(lst, lst[1:]):
            if b["ts"] < a["ts"] + a["dur"] - EPS:
                errs.append(f"stream {sid}: {b['name'][:30]} starts before the previous op ends")

    def last_before(sid, t):
        best = None
        for lt, g in launch_order.get(sid, ()):
            if lt <= t:
                best = g
            else:
                break
        return best

    def first_after(sid, t):
        for lt, g in launch_order.get(sid, ()):
            if lt > t:
                return g
        return None

    for e in ev:
        if e["cat"] != "cuda_sync":
            continue
        a = e["args"]
        call = rt[a["correlation"]]
        if a["cuda_sync_kind"] == "Stream Wait Event":
            rec = rt[a["wait_on_cuda_event_record_corr_id"]]
            if rec["name"] != "cudaEventRecord" or call["name"] != "cudaStreamWaitEvent":
                errs.append(f"wait corr {a['correlation']} points at {rec['name']}")
                continue
            recorded = last_before(a["wait_on_stream"], rec["ts"])
            nxt = first_after(a["stream"], call["ts"])
            if recorded is not None and nxt is not None and nxt["ts"] < recorded["ts"] + recorded["dur"] - EPS:
                errs.append(f"stream {a['stream']} op starts before the awaited op on stream {a['wait_on_stream']} ends")
        elif a["cuda_sync_kind"] == "Stream Sync":
            last = last_before(a["stream"], call["ts"])
            if last is not None and call["ts"] + call["dur"] < last["ts"] + last["dur"] - EPS:
                errs.append(f"cudaStreamSynchronize corr {a['correlation']} returns before stream {a['stream']} drains")
    # NCCL metadata
    for g in gpu:
        if g["name"].startswith("nccl"):
            for k in ("Collective name", "In msg nelems", "Out msg nelems", "Group size", "dtype",
                      "Process Group Name", "Process Group Ranks"):
                if k not in g["args"]:
                    errs.append(f"NCCL kernel corr {g['args']['correlation']} lacks {k}")
    # flows pair up
    s_ids = {e["id"] for e in events if e.get("ph") == "s"}
    f_ids = {e["id"] for e in events if e.get("ph") == "f"}
    if s_ids != f_ids or s_ids != {g["args"]["correlation"] for g in gpu}:
        errs.append("ac2g flows do not pair one-to-one with GPU ops")
    return errs
