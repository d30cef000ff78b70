"""The compiled core gives the reference's schedule bit for bit: real traces, synthetic and chaotic graphs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lumos.graph import ALL_EDGE_CLASSES, EdgeClass, Graph, TaskKind, WaitKind, build_graph
from lumos.graph.ablate import drop_classes, drop_random, release_orphans
from lumos.sim import SimulationError, prepare, simulate
from lumos.sim.compiled import longest_path_bound, simulate_compiled
from lumos.sim.reference import simulate_reference
from lumos.sim.synthetic import synthetic_graph

from ..conftest import ALL_TRACES
from ..graphgen import graph_of

CPU, GPU = TaskKind.CPU, TaskKind.GPU


def assert_same_schedule(graph: Graph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Both engines on the same arrays: identical start, end (NaN where a task never ran), done,
    and the same count of syncs let go."""
    arrays = prepare(graph)
    ref = simulate_reference(arrays)
    comp = simulate_compiled(arrays)
    assert ref[3] == comp[3]
    for name, r, c in zip(("start", "end", "done"), ref[:3], comp[:3]):
        assert r.dtype == c.dtype, name
        assert np.array_equal(r, c, equal_nan=True), (name, np.flatnonzero(~((r == c) | (np.isnan(r) & np.isnan(c)))
                                                                         if r.dtype.kind == "f" else r != c)[:10])
    return comp[:3]


# --- hand-made graphs with known schedules ---------------------------------------------------

def test_stream_sync_parks_until_the_op_visible_when_it_starts_ends():
    # thread 0: launch (t0), stream sync (t1), after (t2); stream 1: kernel (t3), launched with lag 1
    g = graph_of([CPU, CPU, CPU, GPU], [0, 0, 0, 1], [2, 1, 1, 10],
                 [(0, 1, EdgeClass.INTRA_THREAD), (1, 2, EdgeClass.INTRA_THREAD), (0, 3, EdgeClass.LAUNCH, 1.0)],
                 [CPU, GPU], wait_kind=[0, WaitKind.STREAM, 0, 0], wait_target=[-1, 1, -1, -1])
    start, end, done = assert_same_schedule(g)
    assert done.all()
    assert start.tolist() == [0.0, 13.0, 14.0, 3.0]
    assert end.tolist() == [2.0, 14.0, 15.0, 13.0]


def test_finish_floor_holds_a_task_until_its_peers_let_it_end():
    # stream: a collective (t0, 2 us) then a kernel (t1); the collective may not end before 10
    g = graph_of([GPU, GPU], [0, 0], [2, 3], [(0, 1, EdgeClass.INTRA_STREAM)], [GPU])
    g.finish_floor = np.array([10.0, -np.inf])
    start, end, done = assert_same_schedule(g)
    assert start.tolist() == [0.0, 10.0] and end.tolist() == [10.0, 13.0]
    g.finish_floor = np.array([1.0, -np.inf])  # a floor already passed changes nothing
    start, end, done = assert_same_schedule(g)
    assert end.tolist() == [2.0, 5.0]
    assert longest_path_bound(prepare(g)).tolist() == [2.0, 5.0]


def test_device_sync_ignores_ops_launched_after_it_started():
    # thread 0: launch A (t0), device sync (t1); thread 1 (released at 5): launch B (t2);
    # streams 2, 3: A (t3, 50 us), B (t4, 100 us). The sync starts at 1, when only A is enqueued.
    g = graph_of([CPU, CPU, CPU, GPU, GPU], [0, 0, 1, 2, 3], [1, 1, 1, 50, 100],
                 [(0, 1, EdgeClass.INTRA_THREAD), (0, 3, EdgeClass.LAUNCH), (2, 4, EdgeClass.LAUNCH)],
                 [CPU, CPU, GPU, GPU], release=[0.0, -np.inf, 5.0, -np.inf, -np.inf],
                 wait_kind=[0, WaitKind.DEVICE, 0, 0, 0], wait_target=[-1, 0, -1, -1, -1])
    start, end, _ = assert_same_schedule(g)
    assert start.tolist() == [0.0, 51.0, 5.0, 1.0, 6.0]
    assert end[4] == 106.0


def test_equal_keys_are_broken_by_measured_start_then_index():
    # three independent tasks on one thread, all free at 0: order by ts (2, 1, 1) then index
    g = graph_of([CPU, CPU, CPU], [0, 0, 0], [5, 7, 11], [], [CPU], ts=[2.0, 1.0, 1.0])
    start, end, _ = assert_same_schedule(g)
    assert start.tolist() == [18.0, 0.0, 7.0]
    assert end.tolist() == [23.0, 7.0, 18.0]


def test_stuck_tasks_are_reported_by_the_compiled_engine():
    # a cycle (t0 <-> t1) and a sync waiting on an op whose launcher is stuck in it
    g = graph_of([CPU, CPU, CPU, GPU], [0, 0, 1, 2], [1, 1, 1, 1],
                 [(0, 1, EdgeClass.INTRA_THREAD), (1, 0, EdgeClass.INTER_THREAD), (1, 3, EdgeClass.LAUNCH)],
                 [CPU, CPU, GPU], wait_kind=[0, 0, WaitKind.STREAM, 0], wait_target=[-1, -1, 2, -1])
    start, _, done = assert_same_schedule(g)
    assert done.tolist() == [False, False, True, False]  # op 3 was never enqueued: the sync does not wait
    assert start[2] == 0.0
    g.wait_target[2] = 2
    g.release[3] = -np.inf
    with pytest.raises(SimulationError, match=r"3 of 4 tasks are stuck.*#0 t0, #1 t1, #3 t3"):
        simulate(g, engine="compiled")


def test_a_sync_parked_on_work_that_needs_it_is_let_go():
    # sync (t0) waits on the op (t2) visible on its stream, but t2 needs t1, which runs after t0
    g = graph_of([CPU, CPU, GPU], [0, 0, 1], [1, 2, 5],
                 [(0, 1, EdgeClass.INTRA_THREAD), (1, 2, EdgeClass.INTER_THREAD)], [CPU, GPU],
                 wait_kind=[WaitKind.STREAM, 0, 0], wait_target=[1, -1, -1])
    start, end, done = assert_same_schedule(g)
    assert start.tolist() == [0.0, 1.0, 3.0] and end.tolist() == [1.0, 3.0, 8.0]
    assert simulate_compiled(prepare(g))[3] == 1
    assert simulate(g, engine="compiled").abandoned_waits == 1


def test_longest_path_bound_ignores_processors():
    # two 10 us tasks on one thread, then a task after both: the bound overlaps them, the replay does not
    g = graph_of([CPU, CPU, CPU], [0, 0, 0], [10, 10, 1],
                 [(0, 2, EdgeClass.INTRA_THREAD), (1, 2, EdgeClass.INTER_THREAD, 2.0)], [CPU])
    bound = longest_path_bound(prepare(g))
    assert bound.tolist() == [10.0, 10.0, 13.0]
    assert simulate(g, engine="compiled").end.tolist() == [10.0, 20.0, 23.0]


@pytest.mark.parametrize("mode, compiled_calls", [("always", 1), ("never", 0)])
def test_auto_engine_takes_the_compiled_core_where_it_pays(monkeypatch, mode, compiled_calls):
    import lumos.sim.compiled as compiled
    calls = []
    original = compiled.simulate_compiled
    monkeypatch.setattr(compiled, "simulate_compiled", lambda a: calls.append(a.n) or original(a))
    monkeypatch.setenv("LUMOS_JIT", mode)
    g = synthetic_graph(200, seed=3)
    assert simulate(g, engine="auto").end.tolist() == simulate(g, engine="reference").end.tolist()
    assert calls == [g.n_tasks] * compiled_calls


# --- every shipped real trace -----------------------------------------------------------------

@pytest.mark.parametrize("path", ALL_TRACES, ids=[p.name[:40] for p in ALL_TRACES])
@pytest.mark.parametrize("variant", ["all", "no_sync_no_inter_stream", "no_intra_thread", "drop_10pct"])
def test_real_traces_replay_identically(real_tables, path, variant):
    if variant == "no_sync_no_inter_stream":
        graph = build_graph(real_tables[path], edge_classes=ALL_EDGE_CLASSES - {EdgeClass.SYNC, EdgeClass.INTER_STREAM})
    else:
        graph = build_graph(real_tables[path])
        if variant == "no_intra_thread":  # program order gone: many ready tasks per thread
            graph = drop_classes(graph, [EdgeClass.INTRA_THREAD])
        elif variant == "drop_10pct":  # some syncs are then let go
            graph = drop_random(graph, 0.1, seed=3)
    _, _, done = assert_same_schedule(graph)
    assert done.all()


# --- random graphs ----------------------------------------------------------------------------

@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(10, 600), seed=st.integers(0, 2**31), ranks=st.integers(1, 3), ints=st.booleans(),
       ssync=st.floats(0, 0.3), dsync=st.floats(0, 0.1), esync=st.floats(0, 0.2), inter=st.floats(0, 0.6),
       segment=st.floats(2, 50))
def test_synthetic_graphs_replay_identically_and_finish(n, seed, ranks, ints, ssync, dsync, esync, inter, segment):
    g = synthetic_graph(n, seed=seed, n_ranks=ranks, integer_times=ints, stream_sync_rate=ssync,
                        device_sync_rate=dsync, event_sync_rate=esync, inter_stream_rate=inter, segment=segment)
    _, end, done = assert_same_schedule(g)
    assert done.all()  # the generator only makes graphs a real program could run
    assert np.all(end >= longest_path_bound(prepare(g)))  # processors and syncs only ever delay


@st.composite
def chaotic_graphs(draw):
    """Arbitrary graphs: any edges (cycles, self-loops, duplicates), any lags, any waits and releases."""
    n = draw(st.integers(1, 30))
    n_ranks = draw(st.integers(1, 2))
    proc_kind = draw(st.lists(st.sampled_from([CPU, GPU]), min_size=1, max_size=5))
    n_procs = len(proc_kind)
    proc_rank = draw(st.lists(st.integers(0, n_ranks - 1), min_size=n_procs, max_size=n_procs))
    proc = draw(st.lists(st.integers(0, n_procs - 1), min_size=n, max_size=n))
    kind = [proc_kind[p] for p in proc]
    small = st.integers(0, 4).map(float)
    dur = draw(st.lists(small, min_size=n, max_size=n))
    ts = draw(st.lists(st.integers(0, 3).map(float), min_size=n, max_size=n))
    release = draw(st.lists(st.one_of(st.just(-np.inf), small), min_size=n, max_size=n))
    cls = st.sampled_from(list(EdgeClass))
    edges = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1), cls,
                                    st.integers(-2, 3).map(float)), max_size=3 * n))
    if draw(st.booleans()):  # mostly forward edges, so most tasks can run
        edges = [(min(a, b), max(a, b), c, lag) for a, b, c, lag in edges if a != b]
    wait_kind = [0] * n
    wait_target = [-1] * n
    for v in range(n):
        if kind[v] == CPU:
            w = draw(st.sampled_from([0, 0, WaitKind.STREAM, WaitKind.DEVICE]))
            wait_kind[v] = w
            if w == WaitKind.STREAM:
                wait_target[v] = draw(st.integers(-1, n_procs - 1))
            elif w == WaitKind.DEVICE:
                wait_target[v] = draw(st.integers(-1, n_ranks))
    rank = [proc_rank[p] for p in proc]
    g = graph_of(kind, proc, dur, edges, proc_kind, release=release, ts=ts, wait_kind=wait_kind,
                 wait_target=wait_target, proc_rank=proc_rank, rank=rank)
    if draw(st.booleans()):  # earliest ends (a collective whose absent peers come late)
        g.finish_floor = np.array(draw(st.lists(st.one_of(st.just(-np.inf), st.integers(0, 12).map(float)),
                                                min_size=n, max_size=n)))
    return g


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(g=chaotic_graphs())
def test_chaotic_graphs_replay_identically(g):
    assert_same_schedule(g)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(10, 400), seed=st.integers(0, 2**31), ranks=st.integers(1, 2), ints=st.booleans(),
       drop_class=st.sampled_from([None] + list(EdgeClass)), fraction=st.floats(0, 0.5))
def test_ablated_graphs_replay_identically(n, seed, ranks, ints, drop_class, fraction):
    # without program order a sync can park on work that only runs after it: the let-go path
    g = synthetic_graph(n, seed=seed, n_ranks=ranks, integer_times=ints, stream_sync_rate=0.2,
                        device_sync_rate=0.05)
    if drop_class is None:
        keep = np.random.default_rng(seed).random(g.n_edges) >= fraction
    else:
        keep = g.cls != drop_class
    assert_same_schedule(release_orphans(g.with_edges(keep), window_start=0.0))


def test_big_synthetic_graph_replays_identically():
    g = synthetic_graph(30000, seed=11, n_ranks=2, stream_sync_rate=0.02, device_sync_rate=0.005)
    start, _, done = assert_same_schedule(g)
    assert done.all()
    assert g.summary["sync_waits"]["stream"] > 100 and g.summary["sync_waits"]["device"] > 20


def test_synthetic_graphs_are_reproducible_and_carry_every_edge_class():
    a, b = synthetic_graph(20000, seed=5, n_ranks=2), synthetic_graph(20000, seed=5, n_ranks=2)
    for f in Graph.TASK_FIELDS + Graph.PROC_FIELDS + Graph.EDGE_FIELDS:
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    assert abs(a.n_tasks - 20000) < 400
    assert all(n > 0 for n in a.edge_counts().values()), a.edge_counts()
    assert a.n_procs == 14 and set(a.proc_rank.tolist()) == {0, 1}
    assert a.summary["sync_waits"]["stream"] > 0 and a.summary["sync_waits"]["device"] > 0
    assert np.all(a.src != a.dst)
    c = synthetic_graph(20000, seed=6, n_ranks=2)
    assert not np.array_equal(a.dur[:100], c.dur[:100])
