"""What keeps the graph right under changed durations, on hand-written traces: blocking copies,
stalled calls, the carried-in backlog and the step period, each with the exact edge, lag and
duration and what a replay does when one duration changes."""

from __future__ import annotations

import numpy as np

from lumos.analysis.replay import measured_breakdown, replayed_breakdown
from lumos.graph import EdgeClass, build_graph
from lumos.sim import simulate

from ..tracegen import TraceBuilder

PAGEABLE = "Memcpy HtoD (Pageable -> Device)"


def task(g, name):
    (i,) = np.flatnonzero(g.name == name)
    return int(i)


def sync_edges(g):
    return [(str(g.name[s]), str(g.name[d]), float(g.lag[e]))
            for e, (s, d, c) in enumerate(zip(g.src, g.dst, g.cls)) if c == EdgeClass.SYNC]


def copy_then_kernel(copy_name):
    t = TraceBuilder()
    t.launch(copy_name, 100, 300, 150, 240, cat="gpu_memcpy", call="cudaMemcpyAsync")  # copy 150-390, call 100-400
    t.launch("relu", 420, 10, 440, 50)                                                   # kernel 440-490
    return build_graph(t.table())


def test_pageable_copy_blocks_its_call_and_the_thread_waits_for_the_copy():
    g = copy_then_kernel(PAGEABLE)
    call = task(g, "cudaMemcpyAsync")
    # the call keeps the part before its copy started; the copy -> next task edge holds the rest:
    # 10 us of the call after the copy ended, then the 20 us gap to the next call
    assert g.dur[call] == 50.0
    assert sync_edges(g) == [(PAGEABLE, "cudaLaunchKernel", 30.0)]
    assert g.summary["blocking_copies"] == 1 and g.summary["violations"] == 0
    assert np.allclose(simulate(g).start, g.ts)  # unchanged replay is exact
    # a copy 140 us shorter lets the thread, and so the kernel, go 140 us earlier
    g.dur[task(g, PAGEABLE)] = 100.0
    s = simulate(g)
    assert s.start[task(g, "relu")] == 300.0


def test_pinned_copy_does_not_block():
    g = copy_then_kernel("Memcpy HtoD (Pinned -> Device)")
    assert sync_edges(g) == [] and g.summary["blocking_copies"] == 0
    assert g.dur[task(g, "cudaMemcpyAsync")] == 300.0


def test_stalled_launch_waits_for_the_op_that_freed_the_queue():
    t = TraceBuilder()
    t.launch("A", 10, 5, 20, 500)                  # A runs 20-520
    t.launch("B", 100, 425, 530, 10, stream=8)     # the call returns at 525, 5 us after A ended
    for k, name in enumerate("CDE"):
        t.launch(name, 540 + 20 * k, 5, 550 + 20 * k, 10)
    g = build_graph(t.table())
    (e,) = np.flatnonzero(g.cls == EdgeClass.SYNC)
    call = int(g.dst[e])
    assert (g.name[g.src[e]], g.ts[call], g.dur[call]) == ("A", 520.0, 5.0)
    assert g.summary["stalled_calls"] == {"count": 1, "waiting_us": 420.0}
    assert g.summary["inferred_how"] == {"call returned when a queued GPU op ended (stall)": 1}
    assert np.allclose(simulate(g).start, g.ts)
    g.dur[task(g, "A")] = 200.0                    # A ends at 220: the call returns at 225
    assert simulate(g).start[task(g, "B")] == 230.0


def test_carried_in_backlog_moves_with_what_is_ahead_of_it():
    t = TraceBuilder(step=(100.0, 1000.0))
    t.launch("K1", 10, 5, 50, 100)     # launched before the step: carried in, 50-150
    t.launch("K2", 20, 5, 150, 100)    # queued behind K1: 150-250
    t.launch("K3", 110, 5, 250, 50)    # the step's own op waits for the backlog
    g = build_graph(t.table())
    assert g.summary["carry_in_gpu_ops"] == 2 and g.summary["carry_in_anchored"] == 1
    assert np.isfinite(g.release[task(g, "K1")]) and not np.isfinite(g.release[task(g, "K2")])
    assert np.allclose(simulate(g).start, g.ts)
    g.dur[task(g, "K1")] = 60.0        # the backlog drains 40 us sooner, and so does the step
    s = simulate(g)
    assert (s.start[task(g, "K2")], s.start[task(g, "K3")]) == (110.0, 210.0)


def test_iteration_is_the_step_period_with_the_gpu_span_beside_it():
    t = TraceBuilder(step=(0.0, 1000.0))
    t.cpu("load", 100, 50)             # 100 us of untraced Python before it
    t.launch("k", 200, 10, 220, 100)
    t.cpu("log", 900, 50)              # 50 us after it, until the next step starts
    g = build_graph(t.table())
    m = measured_breakdown(g)                    # the iteration is the step period
    assert (m.iteration_us, m.gpu_span_us, m.step_period_us) == (1000.0, 100.0, 1000.0)
    assert (m.exposed_compute_us, m.other_us) == (100.0, 900.0)  # the GPU idles 900 us of the step
    assert measured_breakdown(g, "gpu").iteration_us == 100.0
    assert g.summary["step_thread"]["head_us"] == 100.0 and g.summary["step_thread"]["tail_us"] == 50.0
    g.dur[task(g, "log")] = 80.0
    r = replayed_breakdown(g, simulate(g))
    assert (r.iteration_us, r.gpu_span_us) == (1030.0, 100.0)
