from __future__ import annotations

from lumos.emulator import emulate

from .checks import check_all, xs


def test_zero_violations(tiny_docs):
    for rank, doc in tiny_docs.items():
        errs = check_all(doc["traceEvents"])
        assert not errs, f"rank {rank}: {len(errs)} violations, first: {errs[:5]}"


def test_events_look_like_kineto(tiny_docs):
    ev = xs(tiny_docs[0]["traceEvents"])
    cats = {e["cat"] for e in ev}
    assert {"cpu_op", "user_annotation", "cuda_runtime", "kernel", "gpu_memcpy", "gpu_memset",
            "cuda_sync"} <= cats
    steps = [e for e in ev if e["name"] == "ProfilerStep#5"]
    assert len(steps) == 1 and steps[0]["tid"] == steps[0]["pid"] == 10000
    st = steps[0]
    for e in ev:   # every event of the iteration lies inside the step
        assert st["ts"] <= e["ts"] and e["ts"] + e["dur"] <= st["ts"] + st["dur"] + 1e-6
    names = {e["name"] for e in ev}
    assert {"layer_0/forward/mb0", "layer_1/backward/mb3", "embedding/forward/mb0", "optimizer"} <= names
    mm = next(e for e in ev if e["name"] == "aten::mm")
    assert len(mm["args"]["Input Dims"]) == 2 and mm["args"]["Input type"] == ["c10::BFloat16"] * 2
    assert {e["tid"] for e in ev if e["cat"] == "cpu_op"} == {10000, 10001}   # main + autograd threads
    streams = {e["tid"] for e in ev if e["cat"] == "kernel"}
    assert streams == {7, 20, 24, 28, 32}
    for e in ev:   # ns precision, 3 decimals
        assert round(e["ts"], 3) == e["ts"] and round(e["dur"], 3) == e["dur"]


def test_collective_metadata(tiny_docs):
    ev = xs(tiny_docs[0]["traceEvents"])
    nccl = [e for e in ev if e["name"].startswith("ncclDevKernel")]
    kinds = {(e["tid"], e["args"]["Collective name"]) for e in nccl}
    assert kinds == {(20, "allreduce"), (24, "allreduce"), (28, "send"), (32, "recv")}
    for e in nccl:
        a = e["args"]
        if e["tid"] in (28, 32):
            assert a["Process Group Ranks"] == "[0, 8]" and a["Group size"] == 2
        if e["tid"] == 24:
            assert a["Process Group Ranks"] == "[0, 2, 4, 6]"
        assert a["dtype"] == "BFloat16"


def test_sync_events_point_at_records(tiny_docs):
    ev = xs(tiny_docs[8]["traceEvents"])
    rt = {e["args"]["correlation"]: e for e in ev if e["cat"] == "cuda_runtime"}
    waits = [e for e in ev if e["cat"] == "cuda_sync" and e["name"] == "Stream Wait Event"]
    syncs = [e for e in ev if e["cat"] == "cuda_sync" and e["name"] == "Stream Sync"]
    assert waits and syncs
    assert len(waits) == sum(1 for e in rt.values() if e["name"] == "cudaStreamWaitEvent")
    for w in waits:
        assert rt[w["args"]["wait_on_cuda_event_record_corr_id"]]["name"] == "cudaEventRecord"
        assert w["tid"] == w["args"]["stream"] and w["pid"] == 0


def test_legacy_omits_cuda_sync(tmp_path):
    r = emulate(["model=tiny", "trace.legacy=true"], progress=False)
    ev = r.events(0)
    assert not [e for e in ev if e.get("cat") == "cuda_sync"]
    assert any(e.get("name") == "cudaStreamWaitEvent" for e in ev)
    assert not check_all(ev)


def test_coarse_granularity_has_fewer_kernels():
    fine = emulate(["model=tiny"], progress=False)
    coarse = emulate(["model=tiny", "emulator.granularity=coarse"], progress=False)
    nf, nc = len(fine.recorders[0].gpu), len(coarse.recorders[0].gpu)
    assert nc < 0.7 * nf
    assert not check_all(coarse.events(0))
    assert abs(coarse.iteration_us / fine.iteration_us - 1) < 0.15


def test_larger_layout_is_consistent():
    r = emulate(["model=tiny", "parallel.tp=2", "parallel.pp=4", "parallel.dp=8", "seed=1"], progress=False)
    for rank in r.ranks:
        assert not check_all(r.events(rank))


def test_events_are_complete_time_ordered_and_flows_start_at_their_launch():
    """The column-wise writer: every recorded event once, sorted by (ts, longer first), and each
    flow arrow leaving its launching runtime call where and when that call starts."""
    r = emulate(["model=tiny", "parallel.tp=2", "seed=4"], progress=False)
    rec = r.recorders[0]
    body = [e for e in r.events(0) if e["ph"] != "M"]
    assert len(body) == len(rec.cpu) + len(rec.rt) + 3 * len(rec.gpu) + len(rec.sync)
    keys = [(e["ts"], -e.get("dur", 0.0)) for e in body]
    assert keys == sorted(keys)
    calls = {e["args"]["correlation"]: e for e in body if e.get("cat") == "cuda_runtime"}
    starts = [e for e in body if e["ph"] == "s"]
    assert len(starts) == len(rec.gpu)
    for s in starts:
        call = calls[s["id"]]
        assert (s["ts"], s["tid"], s["pid"]) == (call["ts"], call["tid"], call["pid"])
