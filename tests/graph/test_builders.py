"""Each edge builder on a hand-written trace with a known answer."""

from __future__ import annotations

import numpy as np
import pytest

from lumos.graph import ALL_EDGE_CLASSES, EdgeClass, WaitKind, build_graph
from lumos.trace import schema

from ..tracegen import BWD, TraceBuilder


def edges(g, cls):
    return sorted((str(g.name[s]), str(g.name[d])) for s, d, c in zip(g.src, g.dst, g.cls) if c == cls)


def test_intra_thread_chains_leaves_and_folds_parents():
    t = TraceBuilder()
    t.cpu("aten::linear", 10, 50)          # parent: not a task, its self time becomes gaps
    t.cpu("aten::t", 12, 3)
    t.cpu("aten::mm", 20, 30)
    t.launch("gemm", 25, 10, 40, 100)      # runtime call inside aten::mm: aten::mm is not a leaf
    t.cpu("aten::relu", 70, 5)
    g = build_graph(t.table())
    assert edges(g, EdgeClass.INTRA_THREAD) == sorted([("aten::t", "cudaLaunchKernel"),
                                                      ("cudaLaunchKernel", "aten::relu")])
    assert "aten::linear" not in set(g.name) and "aten::mm" not in set(g.name)
    # the host gap between aten::t (ends 15) and the launch (25) rides on the intra-thread edge
    e = int(np.flatnonzero(g.cls == EdgeClass.INTRA_THREAD)[0])
    assert g.lag[e] == 10.0


@pytest.mark.parametrize("call", ["cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel",
                                  "cudaMemcpyAsync", "cudaMemsetAsync",
                                  # ROCm / HIP and CUDA driver-API twins
                                  "hipLaunchKernel", "hipExtModuleLaunchKernel", "hipModuleLaunchKernel",
                                  "hipMemcpyAsync", "hipMemsetAsync", "cuLaunchKernelEx"])
def test_launch_by_correlation(call):
    assert call in schema.LAUNCH_CALLS
    t = TraceBuilder()
    t.launch("op", 10, 5, 30, 10, call=call)
    g = build_graph(t.table())
    assert edges(g, EdgeClass.LAUNCH) == [(call, "op")]
    e = int(np.flatnonzero(g.cls == EdgeClass.LAUNCH)[0])
    assert g.lag[e] == 15.0  # launch latency: 30 - (10 + 5)


def test_cuda_graph_launch_fans_out_to_every_op():
    t = TraceBuilder()
    c = t.runtime("cudaGraphLaunch", 10, 20)
    for k in range(3):
        t.gpu(f"graph_op{k}", 40 + 10 * k, 10, corr=c)
    g = build_graph(t.table())
    assert edges(g, EdgeClass.LAUNCH) == [("cudaGraphLaunch", f"graph_op{k}") for k in range(3)]
    assert edges(g, EdgeClass.INTRA_STREAM) == [("graph_op0", "graph_op1"), ("graph_op1", "graph_op2")]


def test_kernel_starting_before_its_launch_returns_is_consistent():
    t = TraceBuilder()
    t.launch("k", 10, 20, 15, 5)  # kernel starts at 15, the call returns at 30
    g = build_graph(t.table())
    e = int(np.flatnonzero(g.cls == EdgeClass.LAUNCH)[0])
    assert g.lag[e] == -15.0
    assert g.summary["violations"] == 0


def test_inter_thread_gap_rule_and_threshold():
    t = TraceBuilder()
    t.cpu("forward_last", 10, 20)                 # main thread, ends at 30
    t.cpu("main_after", 600, 5)
    t.cpu("backward_first", 250, 10, tid=BWD)     # 250 us after the window start: a gap
    g = build_graph(t.table(), gap_threshold_us=100)
    assert edges(g, EdgeClass.INTER_THREAD) == [("backward_first", "main_after"), ("forward_last", "backward_first")]
    assert g.summary["inferred_how"] == {"gap rule": 2}
    g2 = build_graph(t.table(), gap_threshold_us=1000)
    assert edges(g2, EdgeClass.INTER_THREAD) == []


def test_stream_sync_from_cuda_sync_record_is_a_run_time_wait():
    t = TraceBuilder()
    t.launch("k", 10, 5, 20, 100, stream=9)
    c = t.runtime("cudaStreamSynchronize", 30, 95)
    t.sync_record("Stream Sync", c, stream=9)
    t.cpu("after", 130, 5)
    g = build_graph(t.table())
    i = int(np.flatnonzero(g.name == "cudaStreamSynchronize")[0])
    assert g.wait_kind[i] == WaitKind.STREAM
    assert g.proc_name[g.wait_target[i]] == "stream 9 (GPU 0)"
    assert g.summary["sync_waits"] == {"explicit": 1, "inferred": 0}
    assert g.ts[i] == 120.0 and g.dur[i] == 5.0  # blocked until the kernel ended at 120


def test_stream_sync_stream_is_inferred_consistently_with_the_timeline():
    t = TraceBuilder()
    t.launch("long_on_7", 10, 5, 20, 500, stream=7)     # still running when the sync returns
    t.launch("short_on_9", 16, 4, 25, 50, stream=9)     # ends at 75, inside the sync
    t.runtime("cudaStreamSynchronize", 30, 50)          # returns at 80
    g = build_graph(t.table())
    i = int(np.flatnonzero(g.name == "cudaStreamSynchronize")[0])
    assert g.proc_name[g.wait_target[i]] == "stream 9 (GPU 0)"
    assert g.summary["sync_waits"] == {"explicit": 0, "inferred": 1}
    assert g.summary["violations"] == 0


def test_explicit_stream_wait_event():
    t = TraceBuilder()
    t.launch("producer", 10, 5, 20, 100, stream=7)
    rec = t.runtime("cudaEventRecord", 16, 2)
    w = t.runtime("cudaStreamWaitEvent", 19, 2)
    t.sync_record("Stream Wait Event", w, stream=9, wait_stream=7, wait_corr=rec, ts=19)
    t.launch("consumer", 22, 3, 121, 10, stream=9)
    g = build_graph(t.table())
    assert edges(g, EdgeClass.INTER_STREAM) == [("producer", "consumer")]
    assert g.summary["inferred_edges"] == 0


def test_inferred_stream_wait_event_without_args():
    t = TraceBuilder()
    t.launch("producer", 10, 5, 20, 100, stream=7)
    t.runtime("cudaEventRecord", 16, 2)
    t.runtime("cudaStreamWaitEvent", 19, 2)
    t.launch("consumer", 22, 3, 121, 10, stream=9)   # launched at 25, starts right after producer
    g = build_graph(t.table())
    assert edges(g, EdgeClass.INTER_STREAM) == [("producer", "consumer")]
    assert g.summary["inferred_how"] == {"timeline: delayed op after cudaStreamWaitEvent": 1}


def test_inferred_wait_is_not_a_backlog_op_ending_by_chance():
    # Stream 7 drains a backlog launched long before; the thread then launches c1 on stream 21,
    # waits, and launches g on stream 20. g starts 1 us after a4 ends, 16 us after c1 ends.
    # a5 was launched behind a4 before the wait, so no event recorded before the wait
    # captured a4; c1 is what the thread launched last before it (torch's current stream).
    t = TraceBuilder()
    for i in range(5):
        t.launch(f"a{i + 1}", 10 + 5 * i, 3, 100 + 50 * i, 50, stream=7)   # a4: 250-300
    t.launch("c1", 40, 5, 46, 239, stream=21)                             # ends at 285
    t.runtime("cudaStreamWaitEvent", 50, 2)
    t.launch("g", 55, 5, 301, 10, stream=20)
    g = build_graph(t.table())
    assert edges(g, EdgeClass.INTER_STREAM) == [("c1", "g")]
    assert g.summary["violations"] == 0


def test_inferred_wait_skips_ops_launched_after_the_wait():
    # x on stream 7 is launched, the thread waits, launches g on stream 21, then m on stream 7.
    # g starts 4 us after m ends and 10 us after x ends: m was enqueued after the wait, so the
    # event the wait paired with cannot have captured it.
    t = TraceBuilder()
    t.launch("x", 10, 5, 20, 80, stream=7)           # ends at 100
    t.runtime("cudaStreamWaitEvent", 20, 2)
    t.launch("g", 25, 5, 110, 10, stream=21)
    t.launch("m", 35, 5, 102, 4, stream=7)           # ends at 106
    g = build_graph(t.table())
    assert edges(g, EdgeClass.INTER_STREAM) == [("x", "g")]
    assert g.summary["violations"] == 0


def test_no_wait_call_means_no_inferred_inter_stream_edge():
    t = TraceBuilder()
    t.launch("producer", 10, 5, 20, 100, stream=7)
    t.launch("consumer", 22, 3, 121, 10, stream=9)
    g = build_graph(t.table())
    assert edges(g, EdgeClass.INTER_STREAM) == []


def test_op_launched_before_the_window_is_kept_and_anchored():
    t = TraceBuilder(step=(100.0, 400.0))
    t.gpu("backlog", 50, 200, stream=7, corr=999)       # no launcher in the trace
    t.launch("ours", 110, 5, 250, 20, stream=7)         # queued behind the backlog
    g = build_graph(t.table())
    assert g.summary["carry_in_gpu_ops"] == 1
    b = int(np.flatnonzero(g.name == "backlog")[0])
    assert g.release[b] == 50.0 and not g.in_step[b]
    assert edges(g, EdgeClass.INTRA_STREAM) == [("backlog", "ours")]


def test_dropping_a_class_removes_exactly_that_class():
    t = TraceBuilder()
    t.cpu("a", 10, 5)
    t.launch("k1", 20, 5, 30, 10)
    t.launch("k2", 26, 5, 40, 10)
    full = build_graph(t.table())
    for cls in ALL_EDGE_CLASSES:
        g = build_graph(t.table(), edge_classes=ALL_EDGE_CLASSES - {cls})
        counts, before = g.edge_counts(), full.edge_counts()
        assert counts[cls.label] == 0
        assert {k: v for k, v in counts.items() if k != cls.label} == {k: v for k, v in before.items() if k != cls.label}
