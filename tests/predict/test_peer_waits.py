"""Peer waits replayed as arrivals (`lumos predict --peer-waits anchored`, lumos/predict/peer_waits.py).

On the emulated `tiny` model (EMULATED) with 0.2 M-parameter gradient buckets, so that each rank's
DP all-reduces form classes of 5 or more; seed 0 fixes every number below.
"""

import json

import numpy as np
import pytest

from lumos.predict.peer_waits import read_peer_waits
from lumos.predict.options import PredictOptions
from lumos.predict.prediction import predict, simulate_plan
from lumos.cli import main as lumos_main
from lumos.graph.model import TaskKind
from lumos.trace import load_run
from lumos.durations import CollectiveSpec
from lumos.predict.whatif import base_plan


def _emulate(root, dp):
    out = root / f"tiny_2x2x{dp}"
    assert lumos_main(["emulate", "model=tiny", "parallel.tp=2", "parallel.pp=2", f"parallel.dp={dp}", "seed=0",
                       "emulator.comm.bucket_mparams=0.2", f"out={out}", "progress=false", "--quiet"]) == 0
    return out


@pytest.fixture(scope="module")
def small_buckets(tmp_path_factory):
    root = tmp_path_factory.mktemp("small_buckets")
    base, dp4 = _emulate(root, 2), _emulate(root, 4)
    tables = load_run(base)
    return {"base": base, "dp4": dp4, "tables": tables, "plan": base_plan(tables)}


def test_the_base_splits_into_transfer_and_wait_and_anchors_the_waits(small_buckets):
    plan = small_buckets["plan"]
    g = plan.graph
    _, sched, _ = simulate_plan(plan)
    w = read_peer_waits(plan, sched.start, sched.end)
    assert w.as_dict() == {"collectives": 54, "anchored": 26, "wait_ms": 0.094, "anchored_wait_ms": 0.094}
    model = np.array([plan.collectives.time_us(CollectiveSpec(plan.st.coll[t], plan.st.nbytes[t], plan.st.group[t]))
                      for t in w.tasks])
    assert np.all(plan.role[w.tasks] == "dp")
    np.testing.assert_allclose(model * w.transfer + w.wait_us, g.dur[w.tasks], rtol=0, atol=1e-9)
    assert np.all(w.wait_us >= 0)
    # the transfer part is at most the class median: no occurrence's transfer exceeds it
    ratio = g.dur[w.tasks] / model
    for r, n in {(int(g.rank[t]), float(plan.st.nbytes[t])) for t in w.tasks}:
        m = (g.rank[w.tasks] == r) & (plan.st.nbytes[w.tasks] == n)
        assert w.transfer[m].max() == pytest.approx(np.median(ratio[m]))
    src, dst = np.asarray(g.src), np.asarray(g.dst)
    for t, a, off, wait in zip(w.tasks, w.anchors, w.offsets, w.wait_us):
        if a < 0:
            assert wait == 0.0   # a collective that did not wait needs no arrival
            continue
        assert np.any((src == a) & (dst == t)) and g.kind[a] == TaskKind.GPU and g.proc[a] != g.proc[t]
        assert off == pytest.approx(sched.start[t] + wait - sched.end[a])


def test_an_unchanged_target_replays_exactly_as_the_base(small_buckets):
    tables, plan = small_buckets["tables"], small_buckets["plan"]
    additive = predict(tables, {}, plan=plan)["predicted"]["iteration_us"]
    anchored = predict(tables, {}, PredictOptions(peer_waits="anchored"), plan=plan)
    assert anchored["predicted"]["iteration_us"] == additive == 92111.325
    assert plan.graph.finish_floor is None   # the base's graph was not touched


def test_a_dp_change_floors_the_waiting_collectives_at_their_peers_arrival(small_buckets):
    tables, plan = small_buckets["tables"], small_buckets["plan"]
    actual = load_run(small_buckets["dp4"])
    additive = predict(tables, {"dp": 4}, plan=plan, actual_tables=actual)
    anchored = predict(tables, {"dp": 4}, PredictOptions(peer_waits="anchored"), plan=plan, actual_tables=actual)
    assert additive["predicted"]["iteration_us"] == 92946.504
    assert anchored["predicted"]["iteration_us"] == 92710.326
    assert anchored["peer_waits"] == {"mode": "anchored", "asked": "anchored", "collectives": 54, "anchored": 26,
                                      "wait_ms": 0.094, "anchored_wait_ms": 0.094, "rounds": 1}
    # an all-reduce base's default is additive
    assert predict(tables, {"dp": 4}, plan=plan)["predicted"] == additive["predicted"]
    assert "peer_waits" not in additive
    assert any(n.startswith("peer waits anchored: 0.094 ms that 26 of the base's 54") for n in anchored["notes"])


def test_settled_floors_hold_and_some_bind(small_buckets):
    from lumos.predict.peer_waits import apply_peer_waits, settle
    from lumos.predict.whatif import transform

    plan = small_buckets["plan"]
    _, sched, _ = simulate_plan(plan)
    w = read_peer_waits(plan, sched.start, sched.end)
    out = transform(plan, dp=4)
    apply_peer_waits(plan, out, w)
    graph, s, _, rounds = settle(out, w, simulate_plan)
    a = w.anchors >= 0
    t, anc, off = w.tasks[a], w.anchors[a], w.offsets[a]
    arrival_end = s.end[anc] + off + graph.dur[t]
    assert np.all(s.end[t] >= arrival_end - 0.5)               # within the settling tolerance
    bound = s.end[t] > s.start[t] + graph.dur[t] + 1e-6        # ended later than its own start allowed
    assert bound.sum() >= 1 and np.all(np.abs(s.end[t][bound] - arrival_end[bound]) <= 0.5)


def test_anchored_refuses_a_target_that_rebuilds_the_graph(small_buckets):
    with pytest.raises(ValueError, match="rebuilds the graph"):
        predict(small_buckets["tables"], {"pp": 4}, PredictOptions(peer_waits="anchored"), plan=small_buckets["plan"])
    with pytest.raises(ValueError, match="peer_waits must be one of auto, additive, anchored"):
        predict(small_buckets["tables"], {"dp": 4}, PredictOptions(peer_waits="floor"), plan=small_buckets["plan"])


def test_cli_flag(small_buckets, capsys):
    assert lumos_main(["predict", str(small_buckets["base"]), "--dp", "4", "--peer-waits", "anchored",
                       "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["peer_waits"]["anchored"] == 26 and doc["predicted"]["iteration_us"] == 92710.326


def test_a_sample_with_the_point_durations_settles_to_the_point_replay(small_buckets):
    """An interval's sample settles its own arrivals (`monte_carlo`'s `arrivals`): with the point's
    durations and none of the point's floors, the settled sample is the point's schedule."""
    from dataclasses import replace

    from lumos.predict.peer_waits import apply_peer_waits, settle
    from lumos.analysis.uncertainty import _settle_arrivals
    from lumos.sim import prepare
    from lumos.sim.reference import simulate_reference
    from lumos.predict.whatif import transform

    plan = small_buckets["plan"]
    _, sched, _ = simulate_plan(plan)
    w = read_peer_waits(plan, sched.start, sched.end)
    out = transform(plan, dp=4)
    apply_peer_waits(plan, out, w)
    graph, point, _, _ = settle(out, w, simulate_plan)
    tasks, anchors, offsets = w.arrivals()
    arrays = prepare(graph)
    bare = replace(arrays, floor=None)
    first = simulate_reference(bare)[:3]
    assert np.max(np.abs(first[1] - point.end)) > 1.0      # without the arrivals the schedule differs
    start, end, done = _settle_arrivals(simulate_reference, bare, (tasks, anchors, offsets), first[1], first)
    assert done.all()
    np.testing.assert_allclose(end, point.end, rtol=0, atol=1.0)


def test_an_anchored_interval_is_centred_on_its_point(small_buckets):
    doc = predict(small_buckets["tables"], {"dp": 4}, PredictOptions(peer_waits="anchored", samples=40, seed=0),
                  plan=small_buckets["plan"])
    iv = doc["interval"]["iteration_us"]
    assert iv["90"][0] < doc["predicted"]["iteration_us"] < iv["90"][1]


@pytest.fixture(scope="module")
def fsdp_base(tmp_path_factory):
    root = tmp_path_factory.mktemp("fsdp")
    out = {}
    for dp in (4, 8):
        d = root / f"dp{dp}"
        assert lumos_main(["emulate", "model=tiny", "parallel.tp=2", "parallel.pp=2", f"parallel.dp={dp}", "seed=0",
                           "training.dp_sharding=fsdp", f"out={d}", "progress=false", "--quiet"]) == 0
        out[dp] = load_run(d)
    return out


def test_auto_anchors_a_sharded_base_on_a_dp_change_and_keeps_the_waits_where_the_target_rebuilds(fsdp_base):
    tables = fsdp_base[4]
    plan = base_plan(tables)
    auto = predict(tables, {"dp": 8}, plan=plan)
    anchored = predict(tables, {"dp": 8}, PredictOptions(peer_waits="anchored"), plan=plan)
    assert auto["peer_waits"] == {**anchored["peer_waits"], "asked": "auto"}
    assert auto["predicted"] == anchored["predicted"]
    assert auto["peer_waits"]["mode"] == "anchored" and auto["peer_waits"]["collectives"] > 0
    rebuilt = predict(tables, {"pp": 4}, plan=plan)
    assert "peer_waits" not in rebuilt
    assert rebuilt["predicted"] == predict(tables, {"pp": 4}, PredictOptions(peer_waits="additive"), plan=plan)["predicted"]
    assert any(n.startswith("peer waits additive: auto anchors a sharded base's waits only") for n in rebuilt["notes"])


def test_a_shape_cap_takes_the_transfer_from_the_least_waiting_class_of_the_same_shape(tmp_path):
    """cap='shape' (the default; studies/peer_waits/wait_split.py): a class's transfer part is at most the lowest class
    median of its (rank, message, group size). Every reduce-scatter of one shape made to wait 500 us
    more: by class, the wait hides in the class median and the transfer part grows; by shape, the
    transfer stays at the all-gathers' of that shape and the 500 us are wait. 12 layers: 6
    reduce-scatters of a layer's shape per rank, enough for a class."""
    assert lumos_main(["emulate", "model=tiny", "model.num_layers=12", "parallel.tp=2", "parallel.pp=2",
                       "parallel.dp=4", "seed=0", "training.dp_sharding=fsdp", f"out={tmp_path}", "progress=false",
                       "--quiet"]) == 0
    plan = base_plan(load_run(tmp_path))
    g = plan.graph
    t = np.flatnonzero((plan.role == "dp") & g.comm)
    keys = [(int(g.rank[x]), plan.st.coll[x], float(plan.st.nbytes[x]), len(plan.st.group[x])) for x in t]
    shapes = {}
    for k in set(keys):
        shapes.setdefault((k[0], k[2], k[3]), set()).add(k[1])
    shape = next(sh for sh, kinds in sorted(shapes.items()) if {"allgather", "reduce_scatter"} <= kinds)
    rs = t[[k == (shape[0], "reduce_scatter", shape[1], shape[2]) for k in keys]]
    ag = t[[k == (shape[0], "allgather", shape[1], shape[2]) for k in keys]]
    assert len(rs) >= 5 and len(ag) >= 5
    _, sched, _ = simulate_plan(plan)
    before = read_peer_waits(plan, sched.start, sched.end)
    g.dur[rs] += 500.0
    _, sched, _ = simulate_plan(plan)
    by_class = read_peer_waits(plan, sched.start, sched.end, cap="class")
    by_shape = read_peer_waits(plan, sched.start, sched.end)   # the default
    model = np.array([plan.collectives.time_us(CollectiveSpec(plan.st.coll[x], plan.st.nbytes[x], plan.st.group[x]))
                      for x in by_shape.tasks])
    np.testing.assert_allclose(model * by_shape.transfer + by_shape.wait_us, g.dur[by_shape.tasks], rtol=0, atol=1e-9)
    at = np.isin(by_shape.tasks, rs)
    ag_median = np.median(g.dur[ag] / model[np.isin(by_shape.tasks, ag)])
    assert np.all(by_shape.transfer[at] <= ag_median + 1e-12)
    assert by_class.transfer[at].max() > 1.5 * ag_median        # the class median carries the wait
    np.testing.assert_allclose(by_shape.wait_us[at] - before.wait_us[np.isin(before.tasks, rs)], 500.0, atol=1e-6)
    np.testing.assert_allclose(by_shape.wait_us[~at], before.wait_us[~np.isin(before.tasks, rs)], rtol=0, atol=1e-9)
    with pytest.raises(ValueError, match="cap must be one of class, shape"):
        read_peer_waits(plan, sched.start, sched.end, cap="kind")
