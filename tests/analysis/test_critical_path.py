"""Critical path on a hand-built graph with a known answer, and path agreement."""

from __future__ import annotations

import numpy as np
import pytest

from lumos.analysis.critical_path import (compare_paths, critical_path, measured_critical_path,
                                          path_agreement)
from lumos.graph.model import EdgeClass, Graph, WaitKind
from lumos.sim import simulate

A, B, C, D, E, K1, K2, K3 = range(8)
#        A     B     C     D(sync) E     K1    K2    K3
TS = [0.0, 10.0, 20.0, 50.0, 51.0, 15.0, 40.0, 55.0]
DUR = [10.0, 10.0, 2.0, 1.0, 2.0, 25.0, 10.0, 5.0]
GPU = [0, 0, 0, 0, 0, 1, 1, 1]
EDGES = [  # src, dst, class, lag
    (A, B, EdgeClass.INTRA_THREAD, 0.0), (B, C, EdgeClass.INTRA_THREAD, 0.0),
    (C, D, EdgeClass.INTRA_THREAD, 0.0), (D, E, EdgeClass.INTRA_THREAD, 0.0),
    (A, K1, EdgeClass.LAUNCH, 5.0), (B, K2, EdgeClass.LAUNCH, 0.0), (E, K3, EdgeClass.LAUNCH, 2.0),
    (K1, K2, EdgeClass.INTRA_STREAM, 0.0), (K2, K3, EdgeClass.INTRA_STREAM, 0.0),
]


def tiny_graph(ts=TS, dur=DUR) -> Graph:
    """One thread (A B C D E) launching K1 K2 K3 onto one stream; D is a stream sync."""
    n = len(ts)
    kind = np.array(GPU, dtype=np.int8)
    release = np.full(n, -np.inf)
    release[A] = 0.0
    wait_kind = np.zeros(n, np.int8)
    wait_kind[D] = WaitKind.STREAM
    wait_target = np.full(n, -1, np.int32)
    wait_target[D] = 1
    src, dst, cls, lag = (np.array(x) for x in zip(*EDGES))
    name = np.empty(n, dtype=object)
    name[:] = ["A", "B", "C", "D", "E", "K1", "K2", "K3"]
    pname = np.empty(2, dtype=object)
    pname[:] = ["thread", "stream"]
    return Graph(name=name, kind=kind, proc=kind.astype(np.int32), dur=np.array(dur), ts=np.array(ts),
                 release=release, comm=np.zeros(n, bool), in_step=kind == 1, rank=np.zeros(n, np.int32),
                 stream_pos=np.array([-1] * 5 + [0, 1, 2], np.int32), wait_kind=wait_kind,
                 wait_target=wait_target, event=np.arange(n, dtype=np.int64), layer=np.full(n, -1, np.int32),
                 phase=np.full(n, -1, np.int8), proc_kind=np.array([0, 1], np.int8),
                 proc_rank=np.zeros(2, np.int32), proc_key=np.array([1, 2], np.int64), proc_name=pname,
                 src=src.astype(np.int64), dst=dst.astype(np.int64), cls=cls.astype(np.int8),
                 lag=lag.astype(float), inferred=np.zeros(len(EDGES), bool), summary={"window_us": [0.0, 60.0]})


def test_measured_path_goes_through_launch_lag_stream_order_and_the_sync_wait():
    g = tiny_graph()
    # K3 <- E (launch, 53 + 2) <- D (thread) <- K2 (the op D's stream sync waited for) <- K1 (stream)
    # <- A (launch, 10 + 5); B and C never bind
    assert measured_critical_path(g).tolist() == [A, K1, K2, D, E, K3]


def test_replayed_path_is_exactly_binding():
    g = tiny_graph()
    s = simulate(g, engine="reference")
    assert s.start.tolist() == TS
    assert critical_path(g, s.start, s.end).tolist() == [A, K1, K2, D, E, K3]


def test_measured_tolerance_is_one_microsecond():
    ts = list(TS)
    ts[K2], dur = 40.5, list(DUR)
    dur[K2] = 9.5                       # K2 starts 0.5 us after K1 ends, still ends at 50
    g = tiny_graph(ts, dur)
    assert critical_path(g, g.ts, g.end, tolerance_us=1.0).tolist() == [A, K1, K2, D, E, K3]
    assert critical_path(g, g.ts, g.end, tolerance_us=0.0).tolist() == [K2, D, E, K3]


def test_processor_order_binds_without_an_edge():
    g = tiny_graph()
    g = g.with_edges(g.cls != EdgeClass.INTRA_STREAM)   # K1 -> K2 now binds only as K2's stream predecessor
    assert measured_critical_path(g).tolist() == [A, K1, K2, D, E, K3]


def test_path_agreement_counts_shared_trace_rows():
    a = path_agreement(np.array([1, 2, 3, 4]), np.array([2, 3, 5]),
                       np.array([True, True, False, False]), np.array([True, False, True]))
    assert (a.precision, a.recall) == (0.5, pytest.approx(2 / 3))
    assert (a.gpu_precision, a.gpu_recall) == (0.5, 0.5)
    assert (a.predicted_len, a.measured_len) == (4, 3)


def test_compare_paths_maps_by_event_row():
    g = tiny_graph()
    sub = g.copy()
    sub.event = sub.event + 100           # same tasks under other trace rows share nothing
    path = np.array([A, K1, K2, D, E, K3])
    assert compare_paths(g, path, g, path).as_dict()["cp_recall"] == 1.0
    assert compare_paths(g, path, sub, path).as_dict()["cp_recall"] == 0.0


def test_compiled_walk_equals_the_reference_on_real_traces(real_tables, monkeypatch):
    # the compiled walk against the plain-Python definition, on the measured timeline (1 us
    # tolerance, run-time waits from real syncs) and on the replayed one (exact binding)
    from lumos.analysis.critical_path import critical_path_reference
    monkeypatch.setenv("LUMOS_JIT", "always")   # critical_path itself would take the reference here
    from lumos.graph import build_graph

    checked = 0
    for table in real_tables.values():
        g = build_graph(table)
        s = simulate(g)
        for start, end, tol in ((g.ts, g.end, 1.0), (s.start, s.end, 0.0)):
            got = critical_path(g, start, end, tol)
            assert got.tolist() == critical_path_reference(g, start, end, tol).tolist()
            checked += len(got)
    assert checked > 1000
