"""Algorithm 1 invariants on random graphs, run-time syncs, and graphs that cannot finish."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lumos.graph import EdgeClass, TaskKind, WaitKind
from lumos.sim import SimulationError, simulate

from ..graphgen import graph_of


@st.composite
def random_dags(draw):
    n = draw(st.integers(2, 40))
    n_procs = draw(st.integers(1, 4))
    proc = draw(st.lists(st.integers(0, n_procs - 1), min_size=n, max_size=n))
    dur = draw(st.lists(st.floats(0, 50, allow_nan=False), min_size=n, max_size=n))
    pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n))
    edges = [(min(a, b), max(a, b), EdgeClass.INTRA_THREAD, draw(st.floats(0, 10, allow_nan=False)))
             for a, b in pairs if a != b]
    return graph_of([TaskKind.CPU] * n, proc, dur, edges, [TaskKind.CPU] * n_procs)


@settings(max_examples=150, deadline=None)
@given(g=random_dags())
def test_replay_respects_edges_and_one_task_per_processor(g):
    s = simulate(g, engine="reference")
    np.testing.assert_allclose(s.end - s.start, g.dur, atol=1e-9)
    assert np.all(s.start[g.dst] >= s.end[g.src] + g.lag - 1e-9)
    for p in np.unique(g.proc):
        idx = np.flatnonzero(g.proc == p)
        order = idx[np.argsort(s.start[idx], kind="stable")]
        assert np.all(s.start[order[1:]] >= s.end[order[:-1]] - 1e-9)


def test_cycle_raises_naming_stuck_tasks_instead_of_hanging():
    g = graph_of([TaskKind.CPU] * 3, [0, 0, 1], [1, 1, 1],
                   [(0, 1, EdgeClass.INTRA_THREAD), (1, 0, EdgeClass.INTER_THREAD)], [TaskKind.CPU, TaskKind.CPU])
    with pytest.raises(SimulationError, match=r"2 of 3 tasks are stuck.*#0 t0, #1 t1"):
        simulate(g, engine="reference")


def test_stream_sync_waits_for_what_is_last_on_its_stream_when_it_starts():
    # thread 0: launch A (t0), launch B (t1), sync (t2), after (t3); stream 1: A (t4), B (t5)
    kind = [TaskKind.CPU] * 4 + [TaskKind.GPU] * 2
    edges = [(0, 1, EdgeClass.INTRA_THREAD), (1, 2, EdgeClass.INTRA_THREAD), (2, 3, EdgeClass.INTRA_THREAD),
             (0, 4, EdgeClass.LAUNCH), (1, 5, EdgeClass.LAUNCH), (4, 5, EdgeClass.INTRA_STREAM)]
    g = graph_of(kind, [0, 0, 0, 0, 1, 1], [2, 2, 1, 1, 10, 30], edges, [TaskKind.CPU, TaskKind.GPU],
                   wait_kind=[0, 0, WaitKind.STREAM, 0, 0, 0], wait_target=[-1, -1, 1, -1, -1, -1])
    s = simulate(g, engine="reference")
    assert s.start[4] == 2 and s.end[5] == 42
    assert s.start[2] == 42 and s.start[3] == 43


def test_stream_sync_does_not_wait_for_work_launched_after_it_started():
    # the second launch happens on another thread after the sync began: not waited for
    kind = [TaskKind.CPU] * 3 + [TaskKind.GPU] * 2
    edges = [(0, 1, EdgeClass.INTRA_THREAD), (0, 3, EdgeClass.LAUNCH), (2, 4, EdgeClass.LAUNCH),
             (3, 4, EdgeClass.INTRA_STREAM)]
    release = [0.0, -np.inf, 5.0, -np.inf, -np.inf]
    g = graph_of(kind, [0, 0, 1, 2, 2], [1, 1, 1, 10, 100], edges, [TaskKind.CPU, TaskKind.CPU, TaskKind.GPU],
                   release=release, wait_kind=[0, WaitKind.STREAM, 0, 0, 0], wait_target=[-1, 2, -1, -1, -1])
    s = simulate(g, engine="reference")
    assert s.start[1] == 11.0  # waits for op 3 (ends 11), not op 4 (ends 111)
    assert s.end[4] == 111.0


def test_device_sync_waits_for_every_stream_of_its_rank():
    kind = [TaskKind.CPU] * 3 + [TaskKind.GPU] * 2
    edges = [(0, 1, EdgeClass.INTRA_THREAD), (1, 2, EdgeClass.INTRA_THREAD), (0, 3, EdgeClass.LAUNCH),
             (1, 4, EdgeClass.LAUNCH)]
    g = graph_of(kind, [0, 0, 0, 1, 2], [1, 1, 1, 50, 20], edges, [TaskKind.CPU, TaskKind.GPU, TaskKind.GPU],
                   wait_kind=[0, 0, WaitKind.DEVICE, 0, 0], wait_target=[-1, -1, 0, -1, -1])
    s = simulate(g, engine="reference")
    assert s.start[2] == 51.0
