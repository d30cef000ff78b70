"""Failure 4: the host time between two top-level CPU ops lost in the graph.

An execution trace (Chakra, PyTorch ET) records ops, not the time between them, so a
simulator fed one replays the CPU back to back. Here the gap is the lag of the edge into
the next task on the thread (the binding one: `graph.timing`), so an unchanged replay
reproduces it and a changed one keeps it: a shorter op ahead moves the next one earlier
by exactly as much, the gap staying the same.

Found while building this corpus (fixed in `graph.timing`): a stream sync after a host
gap lost the gap when the GPU work it waited for ended inside the gap. The call
replayed at the end of that work, 20 us before it was measured to start, with no
timeline violation to say so.
"""

from __future__ import annotations

import numpy as np
import pytest

from lumos.analysis.replay import replay_graph
from lumos.graph import build_graph
from lumos.sim import simulate
from lumos.trace import load_trace

from ..conftest import DLRM, MORE
from ..tracegen import BWD, TraceBuilder
from .helpers import all_edges, replay_exact, task


def test_the_gap_between_two_top_level_ops_is_the_lag_of_their_edge():
    t = TraceBuilder()
    t.cpu("aten::linear", 10, 30)            # top-level op 1: 10..40, its launch 20..25
    t.launch("gemm", 20, 5, 30, 50)
    t.cpu("aten::relu", 77, 10)              # top-level op 2 after 37 us of Python: 77..87
    t.launch("relu_kernel", 80, 5, 90, 10)
    g = build_graph(t.table())
    assert all_edges(g) == [
        ("intra_stream", "gemm", "relu_kernel", 0.0),
        ("intra_thread", "cudaLaunchKernel", "cudaLaunchKernel", 55.0),   # 25 -> 80: op 1's tail, the gap, op 2's head
        ("launch", "cudaLaunchKernel", "gemm", 5.0),
        ("launch", "cudaLaunchKernel", "relu_kernel", 5.0)]
    replay_exact(g)
    # the first launch 3 us shorter: the second one 3 us earlier, the 55 us kept
    first = int(np.flatnonzero(g.name == "cudaLaunchKernel")[0])
    g.dur[first] -= 3.0
    s = simulate(g, engine="reference")
    assert s.start[first + 1] == 77.0


def test_a_long_gap_no_other_thread_explains_stays_on_the_thread():
    # 400 us of host time: over the 100 us gap rule, but no other thread ended inside it
    t = TraceBuilder()
    t.cpu("optimizer.step", 10, 20)
    t.cpu("aten::zero_", 430, 10)
    t.cpu("dataloader", 500, 30, tid=BWD)    # another thread, busy only after the gap
    g = build_graph(t.table())
    assert all_edges(g) == [
        ("inter_thread", "aten::zero_", "dataloader", 60.0),   # its own 500 us gap: the gap rule
        ("intra_thread", "optimizer.step", "aten::zero_", 400.0)]
    replay_exact(g)


def test_a_stream_sync_after_a_host_gap_keeps_the_gap():
    t = TraceBuilder()
    t.launch("k", 10, 15, 30, 30)                  # call 10..25, kernel 30..60
    t.runtime("cudaStreamSynchronize", 80, 5)      # the host reaches it at 80; the kernel is done
    g = build_graph(t.table())
    assert all_edges(g) == [("intra_thread", "cudaLaunchKernel", "cudaStreamSynchronize", 55.0),
                            ("launch", "cudaLaunchKernel", "k", 5.0)]
    replay_exact(g)                                 # before the fix: the sync replayed at 60
    # the kernel 50 us longer: now the sync waits for it (ends at 110), after its host gap
    g.dur[task(g, "k")] += 50.0
    s = simulate(g, engine="reference")
    assert s.start[task(g, "cudaStreamSynchronize")] == 110.0


def test_a_blocked_sync_keeps_the_host_time_before_it():
    t = TraceBuilder()
    t.launch("k", 10, 5, 20, 100)                  # kernel 20..120
    t.runtime("cudaStreamSynchronize", 60, 65)     # host gap 15..60, then blocked until 120
    g = build_graph(t.table())
    assert all_edges(g) == [("intra_thread", "cudaLaunchKernel", "cudaStreamSynchronize", 45.0),
                            ("launch", "cudaLaunchKernel", "k", 5.0)]
    replay_exact(g)
    # the kernel 90 us shorter (20..30): the host still reaches the sync only at 60
    g.dur[task(g, "k")] -= 90.0
    s = simulate(g, engine="reference")
    assert s.start[task(g, "cudaStreamSynchronize")] == 60.0


@pytest.mark.parametrize("path", [DLRM / "worker0_step_12.1694128201545.pt.trace.json.gz",
                                  MORE / "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz"])
def test_every_host_gap_of_a_real_step_is_replayed(path):
    """Every task of the step (1460 on DLRM rank 0, 56 on the AMD trace) replays at its
    measured start: each gap between two ops is on an edge."""
    g = build_graph(load_trace(path))
    r = replay_graph(g, engine="reference")
    assert np.abs(r.schedule.start - g.ts).max() == 0.0
    assert r.replayed.iteration_us == r.measured.iteration_us
