"""Sampled replays (prediction intervals): the duration model, the Monte Carlo loop, coverage, the CLI."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lumos.analysis.replay import replay_graph, replayed_breakdown
from lumos.analysis.spread import FitGroup, fit_spread, lag_keys, task_keys
from lumos.analysis.uncertainty import (LEVELS, METRICS, FastBreakdown, coverage_by_level, monte_carlo,
                                        other_iterations, summarize)
from lumos.cli import main
from lumos.graph import build_graph
from lumos.sim.sampling import draws, sample_compiled, sample_reference
from lumos.sim.synthetic import synthetic_graph
from lumos.trace import load_trace

from ..conftest import DLRM, REAL, TRAINING_TRACES

NCCL = REAL / "hta" / "nccl_parser_config__nccl_data.json.gz"  # 3 profiled steps, NCCL on its own streams


@pytest.fixture(scope="module")
def nccl():
    table = load_trace(NCCL)
    return table, build_graph(table)


def _fitted(graph, table=None):
    keys, lags = task_keys(graph, table), lag_keys(graph)
    spread = fit_spread([FitGroup(graph, keys, lags)])
    return spread, spread.model(graph, keys, lags)


def _flatten(graph, table=None):
    """The graph with every class at one value (its median): a trace with zero spread."""
    g = graph.copy()
    for keys, values in ((task_keys(g, table), g.dur), (lag_keys(g), g.lag)):
        labels = np.array(["" if k is None else k for k in keys], dtype=object)
        for key in set(labels) - {""}:
            at = labels == key
            values[at] = np.median(values[at])
    return g


# -- zero spread: the interval is the point -------------------------------------------------------
@pytest.mark.parametrize("path", [DLRM / "worker0_step_12.1694128201545.pt.trace.json.gz", NCCL],
                         ids=["dlrm_rank0", "nccl_3_steps"])
def test_zero_spread_collapses_onto_the_point_replay(path):
    table = load_trace(path)
    g = _flatten(build_graph(table), table)
    point = replay_graph(g).replayed
    spread, model = _fitted(g, table)
    assert set(np.unique(model.pool_val)) == {0.0, 1.0} or set(np.unique(model.pool_val)) == {1.0}
    assert all(s == 0.0 for s in spread.sigma.values())
    samples = monte_carlo(g, model, 20, seed=3)
    assert np.array_equal(samples, np.tile([getattr(point, m) for m in METRICS], (20, 1)))
    doc = summarize(samples, 3)
    for m in METRICS:
        v = round(getattr(point, m), 3)
        assert doc[m]["median"] == v
        assert all(doc[m][k] == [v, v] for k in ("50", "90", "95"))


# -- reproducible per seed ------------------------------------------------------------------------
def test_same_seed_same_samples_other_seed_other_samples(nccl):
    table, g = nccl
    _, model = _fitted(g, table)
    a, b = monte_carlo(g, model, 30, seed=7), monte_carlo(g, model, 30, seed=7)
    assert np.array_equal(a, b)
    c = monte_carlo(g, model, 30, seed=8)
    assert not np.array_equal(a, c)
    assert np.unique(a[:, 0]).size > 20  # the samples do differ from one another


def test_interval_nests_and_holds_the_point(nccl):
    table, g = nccl
    _, model = _fitted(g, table)
    doc = summarize(monte_carlo(g, model, 400, seed=0), 0)
    assert doc["samples"] == 400 and doc["seed"] == 0
    for m in METRICS:
        r = doc[m]
        (l50, h50), (l90, h90), (l95, h95) = r["50"], r["90"], r["95"]
        assert l95 <= l90 <= l50 <= r["median"] <= h50 <= h90 <= h95
    lo, hi = doc["iteration_us"]["90"]
    assert hi > lo  # a trace with spread has a proper interval


# -- the compiled sampler against the plain one ---------------------------------------------------
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(20, 300), seed=st.integers(0, 2**31), ranks=st.integers(1, 2), ints=st.booleans(),
       sigma=st.floats(0.0, 0.3), mc_seed=st.integers(0, 2**31))
def test_compiled_sampler_equals_reference(n, seed, ranks, ints, sigma, mc_seed):
    g = synthetic_graph(n, seed=seed, n_ranks=ranks, integer_times=ints, stream_sync_rate=0.05)
    spread, _ = _fitted(g)
    spread.sigma = {"compute": sigma, "host": sigma / 2}
    model = spread.model(g)
    u, f = draws(np.random.default_rng(mc_seed), model)
    for x, y in zip(sample_compiled(model, u, f), sample_reference(model, u, f)):
        assert np.array_equal(x, y)
    a = monte_carlo(g, model, 3, seed=mc_seed, iteration="gpu")
    b = monte_carlo(g, model, 3, seed=mc_seed, iteration="gpu", engine="reference")
    assert np.array_equal(a, b)


@pytest.mark.parametrize("path", TRAINING_TRACES, ids=lambda p: p.name[:30])
@pytest.mark.parametrize("iteration", ["step", "gpu"])
def test_fast_breakdown_equals_breakdown(path, iteration):
    table = load_trace(path)
    g = build_graph(table)
    r = replay_graph(g)
    fast = FastBreakdown(g, iteration)
    assert fast(r.schedule.start, r.schedule.end) == replayed_breakdown(g, r.schedule, iteration)
    # shuffled starts (a stream out of start order) take the plain union and still agree
    start = r.schedule.start + np.where(np.arange(g.n_tasks) % 3 == 0, 5.0, 0.0)
    sched = replace(r.schedule, start=start)
    assert fast(start, r.schedule.end) == replayed_breakdown(g, sched, iteration)


def test_collective_instance_shares_its_draw():
    g = synthetic_graph(400, seed=5, n_ranks=2)
    spread, _ = _fitted(g)
    comm = np.flatnonzero(g.comm)[:4]
    model = spread.model(g, instances=[comm])
    assert len(set(model.task_u[comm])) == 1
    assert model.n_uniform == spread.model(g).n_uniform - 3


def test_fit_counts_steps_and_speed(nccl):
    from lumos.analysis.uncertainty import fit_tables
    table, _ = nccl
    s = fit_tables([table]).summary()
    assert s["groups"] == 3 and s["ranks"] == 1  # steps 4, 5, 6
    # Kineto rounds to whole microseconds: most kernel classes have the same median in all
    # three steps, so the median shift of each step is 0 and so is the speed spread
    assert s["rank_speed_sigma"]["compute"] == 0.0
    resnet = fit_tables([load_trace(REAL / "param" / "resnet_1gpu" / "resnet_kineto.json.gz")]).summary()
    assert resnet["groups"] == 30 and 0.01 < resnet["rank_speed_sigma"]["compute"] < 0.2


# -- coverage arithmetic --------------------------------------------------------------------------
def test_coverage_by_level_hand_made():
    def doc(lo50, hi50, lo90, hi90, lo95, hi95):
        return {"iteration_us": {"median": 0.0, "50": [lo50, hi50], "90": [lo90, hi90], "95": [lo95, hi95]}}
    docs = [doc(4, 6, 2, 8, 1, 9)] * 4
    # 5: inside all; 7: inside 90 and 95; 8.5: only 95; 10: none
    cov = coverage_by_level([5.0, 7.0, 8.5, 10.0], docs)
    assert cov == {"50": 0.25, "90": 0.5, "95": 0.75}
    assert coverage_by_level([8.0, 1.0], [doc(4, 6, 2, 8, 1, 9)] * 2) == {"50": 0.0, "90": 0.5, "95": 1.0}
    assert [f"{round(100 * x)}" for x in LEVELS] == list(cov)


def test_other_iterations_on_a_real_trace(nccl):
    table, _ = nccl
    r = other_iterations(table, samples=200, seed=0)
    assert r["steps"] == [4, 5, 6] and r["step"] == 5
    assert len(r["others_us"]) == 2
    assert r["inside_90"] in (0.0, 0.5, 1.0)
    assert r["width_pct_90"] > 0


# -- the CLI --------------------------------------------------------------------------------------
INTERVAL_KEYS = {"iteration_us", "exposed_compute_us", "overlapped_us", "exposed_comm_us", "other_us",
                 "samples", "seed"}


def test_replay_cli_samples_json(capsys):
    assert main(["replay", str(NCCL), "--samples", "40", "--seed", "2", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    iv = doc["interval"]
    assert set(iv) == INTERVAL_KEYS and iv["samples"] == 40 and iv["seed"] == 2
    assert set(iv["iteration_us"]) == {"median", "50", "90", "95"}
    assert main(["replay", str(NCCL), "--format", "json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert "interval" not in plain and "interval_model" not in plain
    assert {k: v for k, v in doc.items() if not k.startswith("interval")} == plain


def test_replay_cli_samples_table_and_ranks(capsys):
    assert main(["replay", str(DLRM), "--samples", "20"]) == 0
    out = capsys.readouterr().out
    assert "interval (20 sampled replays, seed 0)" in out and "rank 7:" in out
    assert main(["replay", str(DLRM), "--samples", "20", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["interval_model"]["groups"] == 8 and doc["interval_model"]["ranks"] == 8
    assert all(set(r["interval"]) == INTERVAL_KEYS for r in doc["ranks"])
    crit = next(r for r in doc["ranks"] if r["rank"] == doc["critical_rank"])
    assert doc["interval"] == crit["interval"]


# -- classes: the launching op, and modes by size -------------------------------------------------
def test_kernel_class_names_the_op_that_launched_it(nccl):
    table, graph = nccl
    keys = task_keys(graph, table)
    nchw = [k for k in keys if k.startswith("compute|void cudnn::ops::nchwToNhwcKernel")]
    # one kernel name, two classes: launched by the forward and by the backward convolution (the ops
    # carry no Input Dims in this trace)
    ops = [tuple(k.rsplit("|", 2)[1:]) for k in nchw]
    assert ops.count(("aten::convolution_backward", "")) == 110 and ops.count(("aten::cudnn_convolution", "")) == 48
    assert len(ops) == 158
    assert sum(k == "compute|Memcpy DtoD (Device -> Device)|aten::copy_|" for k in keys) == 320


def test_modes_split_a_class_at_a_jump_in_size():
    from lumos.analysis.spread import _breaks, mode_keys

    body = [4.0, 4.4, 3.8, 4.1, 4.2, 3.9]                 # 6 short gaps
    block = [3000.0, 3100.0, 2900.0, 3050.0, 2950.0]     # 5 Python blocks before the same launch
    tail = [20000.0, 90000.0]                            # two scattered long ones (a 4.5x jump between them)
    values = np.array(body + block + tail + [1.0, 1.1, 0.9])
    keys = np.array(["gap|intra_thread|op"] * 13 + ["host|y"] * 3 + [None], dtype=object)
    breaks = {"gap|intra_thread|op": _breaks(values[:13]), "host|y": _breaks(values[13:])}
    # cuts at both jumps next to a mode of 5+; none between the two tail values (both small)
    assert breaks["gap|intra_thread|op"] == pytest.approx([np.sqrt(4.4 * 2900.0), np.sqrt(3100.0 * 20000.0)])
    assert len(breaks["host|y"]) == 0
    moded = mode_keys(keys, np.append(values, 7.0), breaks)
    assert list(moded) == (["gap|intra_thread|op#0"] * 6 + ["gap|intra_thread|op#1"] * 5 + ["gap|intra_thread|op#2"] * 2
                           + ["host|y"] * 3 + [None])
    # a predicted task finds the mode nearest its own size
    assert list(mode_keys(np.array(["gap|intra_thread|op"] * 3, dtype=object), np.array([10.0, 2000.0, 1e6]),
                          breaks)) == ["gap|intra_thread|op#0", "gap|intra_thread|op#1", "gap|intra_thread|op#2"]
    # two small modes side by side are one, unless they are more than a factor 10 apart (four op
    # gaps and two 16 ms Python blocks before the same call, in the emulated 15B base run)
    assert len(_breaks(np.array([1.0, 1.1, 10.0, 11.0]))) == 0
    assert _breaks(np.array([16.0, 11.5, 15505.0, 16189.0, 12.4, 20.1])) == pytest.approx([np.sqrt(20.1 * 15505.0)])
    # ... or one step holds both: the gaps before a launch after a sync on two ranks of the emulated
    # 15B base (ranks 0 and 8; ms): rank 8's four forward-step blocks and its optimizer block are two
    # events of one step and split; rank 0's lone 1.7 ms gap and rank 8's blocks are not and join
    gaps = np.array([1.71, 8.05, 8.41, 8.43, 8.93, 31.6, 34.56]) * 1e3
    assert len(_breaks(gaps)) == 0
    assert _breaks(gaps, np.array([0, 8, 8, 8, 8, 0, 8])) == pytest.approx([np.sqrt(8.93e3 * 31.6e3)])
    # the scattered tail of the test above, one value per step: still one mode
    assert len(_breaks(np.array([20000.0, 90000.0]), np.array([3, 4]))) == 0
