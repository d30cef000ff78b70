"""ROCm/HIP runtime and CUDA driver-API calls build the same edges as their CUDA runtime twins.

Each test is a CUDA-runtime builder test with the HIP (or driver) name put in:
the hand-written timeline is the same, so the expected edge, wait and duration are too.
"""

from __future__ import annotations

import numpy as np
import pytest

from lumos.graph import EdgeClass, WaitKind, build_graph
from lumos.trace import schema

from ..tracegen import TraceBuilder
from .test_builders import edges


@pytest.mark.parametrize("call", ["cudaMemcpy", "hipMemcpy", "hipMemcpyWithStream"])
def test_blocking_copy_gates_the_next_task_on_its_thread(call):
    # the call (10..60) returns after its copy (20..50); the op after it waits for the copy
    t = TraceBuilder()
    t.launch("Memcpy HtoD", 10, 50, 20, 30, call=call, cat="gpu_memcpy")
    t.cpu("aten::linear", 70, 5)
    g = build_graph(t.table())
    assert edges(g, EdgeClass.SYNC) == [("Memcpy HtoD", "aten::linear")]
    assert edges(g, EdgeClass.LAUNCH) == [(call, "Memcpy HtoD")]
    assert g.summary["violations"] == 0


@pytest.mark.parametrize("call", ["cudaStreamSynchronize", "hipStreamSynchronize"])
def test_hip_stream_sync_is_a_run_time_wait(call):
    t = TraceBuilder()
    t.launch("k", 10, 5, 20, 100, stream=9, call="hipLaunchKernel")
    t.runtime(call, 30, 95)   # returns at 125, 5 us after the kernel ended
    g = build_graph(t.table())
    i = int(np.flatnonzero(g.name == call)[0])
    assert g.wait_kind[i] == WaitKind.STREAM
    assert g.proc_name[g.wait_target[i]] == "stream 9 (GPU 0)"
    assert g.ts[i] == 120.0 and g.dur[i] == 5.0  # blocked until the kernel ended at 120


def test_hip_device_sync_waits_for_every_stream():
    t = TraceBuilder()
    t.launch("k", 10, 5, 20, 100, stream=9, call="hipLaunchKernel")
    t.runtime("hipDeviceSynchronize", 30, 95)
    g = build_graph(t.table())
    i = int(np.flatnonzero(g.name == "hipDeviceSynchronize")[0])
    assert g.wait_kind[i] == WaitKind.DEVICE
    assert g.ts[i] == 120.0 and g.dur[i] == 5.0


def test_hip_event_sync_waits_for_the_op_that_ended_during_it():
    t = TraceBuilder()
    t.launch("k", 10, 5, 20, 100, call="hipLaunchKernel")
    t.runtime("hipEventRecord", 16, 2)
    t.runtime("hipEventSynchronize", 30, 95)
    g = build_graph(t.table())
    assert edges(g, EdgeClass.SYNC) == [("k", "hipEventSynchronize")]
    i = int(np.flatnonzero(g.name == "hipEventSynchronize")[0])
    assert g.dur[i] == 5.0


def test_hip_stream_wait_event_is_inferred_like_cuda():
    t = TraceBuilder()
    t.launch("producer", 10, 5, 20, 100, stream=7, call="hipLaunchKernel")
    t.runtime("hipEventRecord", 16, 2)
    t.runtime("hipStreamWaitEvent", 19, 2)
    t.launch("consumer", 22, 3, 121, 10, stream=9, call="hipLaunchKernel")
    g = build_graph(t.table())
    assert edges(g, EdgeClass.INTER_STREAM) == [("producer", "consumer")]


def test_hip_polling_calls_never_explain_a_gap():
    t = TraceBuilder()
    t.runtime("hipEventQuery", 200, 5, tid=101)   # a poller that ends inside the main thread's gap
    t.cpu("main_after", 600, 5)
    g = build_graph(t.table(), gap_threshold_us=100)
    assert edges(g, EdgeClass.INTER_THREAD) == []


@pytest.mark.parametrize("cuda,hip", [("cudaLaunchKernel", "hipLaunchKernel"),
                                      ("cudaMemcpyAsync", "hipMemcpyAsync"),
                                      ("cudaGraphLaunch", "hipGraphLaunch")])
def test_every_cuda_runtime_launch_has_its_hip_twin(cuda, hip):
    assert cuda in schema.LAUNCH_CALLS and hip in schema.LAUNCH_CALLS
