"""Kernels launched before the window opened, and the CPU running far ahead of the GPU.

When the host runs ahead, the GPU spends the start of step k on ops step k-1 (or an
earlier one) launched. Those ops are "carried in": kept on their streams, the first on
each stream (and any that began after its stream went idle) pinned at its measured start,
the rest queued behind it, so step k's own ops start where they started and a change to
the backlog moves them. The step's iteration is its step period on the thread that marks
steps; the GPU span of its own work (`--iteration gpu`) may run far past it.

Real trace: resources/traces/real/hta/negative_queue_length_values_check__rank0.json.gz
(HTA test data, PROVENANCE.md there). In ProfilerStep#551 (216.483 ms) the GPU first runs
880 ops step 550 launched, until 161.841 ms into the step; the step's own GPU work spans
375.129 ms. Its step 550 starts on 872 ops launched before the profiler started.
"""

from __future__ import annotations

import numpy as np
import pytest

from lumos.analysis.replay import replay_graph
from lumos.graph import build_graph
from lumos.sim import simulate
from lumos.trace import load_trace

from ..conftest import REAL
from ..tracegen import TraceBuilder
from .helpers import all_edges, replay_exact, task

BACKLOG = REAL / "hta" / "negative_queue_length_values_check__rank0.json.gz"


@pytest.fixture(scope="module")
def backlog_table():
    return load_trace(BACKLOG)


def test_a_real_step_that_starts_on_the_previous_steps_backlog(backlog_table):
    table = backlog_table
    g = build_graph(table, 551)
    s = g.summary
    assert (s["carry_in_gpu_ops"], s["carry_in_anchored"], s["unlaunched_gpu_ops"]) == (880, 35, {})
    carry = np.flatnonzero((g.kind == 1) & ~g.in_step)
    launch_ts = dict(zip(table.corr[table.cat == 2].tolist(), table.ts[table.cat == 2].tolist()))
    w0 = s["window_us"][0]
    assert all(launch_ts[int(c)] < w0 for c in table.corr[g.event[carry]])   # all launched in step 550
    assert g.end[carry].max() - w0 == 161841.0
    r = replay_graph(g, engine="reference")
    assert r.measured.as_dict() == {"iteration_us": 216483.0, "exposed_compute_us": 43412.0, "overlapped_us": 656.0,
                                    "exposed_comm_us": 36194.0, "other_us": 136221.0, "gpu_span_us": 375129.0,
                                    "step_period_us": 216483.0}
    # every task where it was measured (before the clock-skew lags, 2735 tasks replayed up to 2 us
    # late behind edges whose source ended 1 us after their destination began: 216484 us)
    assert r.replayed.as_dict() == r.measured.as_dict()
    assert np.array_equal(r.schedule.start, g.ts) and s["violations"] == 0


def test_a_real_step_that_starts_on_ops_launched_before_the_profiler(backlog_table):
    g = build_graph(backlog_table, 550)
    s = g.summary
    assert (s["carry_in_gpu_ops"], s["carry_in_anchored"], s["unlaunched_gpu_ops"]) == (872, 32, {"before_profiler": 872})
    assert s["unlaunched_note"] == ("872 GPU ops with no launch call in the trace (872 launched before the profiler "
                                    "started; first: 'Memset (Unknown)' on stream 7, correlation 815091, at +0.989 ms "
                                    "from the window's start): kept on their streams from their measured start, not "
                                    "tied to the host")
    r = replay_graph(g, engine="reference")
    assert r.measured.iteration_us == r.replayed.iteration_us == 209748.0


def test_the_cpu_two_steps_ahead():
    """Step 2's window is 100..200; its kernel queues behind two kernels step 1 launched.

        thread   |launch a|launch b|      (step 2)  |launch c|
        stream 7         |------ a ------|------ b ------|--- c ---|
        time     0  5        40          120             170       200
    """
    t = TraceBuilder(step=None)
    t.events.append({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 100, "tid": 100,
                     "ts": 0.0, "dur": 100.0, "args": {}})
    t.events.append({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#2", "pid": 100, "tid": 100,
                     "ts": 100.0, "dur": 100.0, "args": {}})
    t.launch("a", 0, 5, 40, 80)          # 40..120
    t.launch("b", 10, 5, 120, 50)        # 120..170: queued behind a
    t.launch("c", 110, 5, 170, 30)       # step 2's own: 170..200, queued behind b
    g = build_graph(t.table(), 2)
    assert g.summary["carry_in_gpu_ops"] == 2 and g.summary["carry_in_anchored"] == 1
    assert [str(n) for n in g.name[(g.kind == 1) & ~g.in_step]] == ["a", "b"]
    assert all_edges(g) == [("intra_stream", "a", "b", 0.0), ("intra_stream", "b", "c", 0.0),
                            ("launch", "cudaLaunchKernel", "c", 0.0)]
    r = replay_exact(g)
    assert r.measured.iteration_us == 30.0       # the GPU span of step 2's own work: c
    # the backlog 40 us shorter: c starts 40 us sooner
    g.dur[task(g, "b")] -= 40.0
    s = simulate(g, engine="reference")
    assert s.start[task(g, "c")] == 130.0
