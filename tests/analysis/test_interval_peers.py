"""Sampled replays of one rank: a collective's wait for its peers is not drawn; the peers'
arrival stays where the point replay put it, so a rank that arrives later waits less."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from lumos.analysis.spread import FitGroup, fit_spread, lag_keys, task_keys
from lumos.analysis.uncertainty import fit_tables, monte_carlo
from lumos.graph import build_graph
from lumos.graph.model import TaskKind
from lumos.sim import prepare
from lumos.sim.compiled import simulate_compiled
from lumos.sim.sampling import sample_compiled, sample_reference, with_peers

from ..tracegen import MAIN, PID, TraceBuilder

NCCL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"
WAITED = 3  # the fourth all-reduce waited 300 us for its peers; the others not at all


def one_rank(waits=(300.0,)):
    """Per step (2,000 us each), six (50 us kernel, all-reduce) pairs on one stream, launched
    well ahead: the GPU runs 100-1300 us into step 1. The all-reduces take 100 us, the fourth
    100 us + that step's wait."""
    t = TraceBuilder(step=(0.0, 2000.0))
    for k, wait in enumerate(waits):
        t0 = 2000.0 * k
        if k:
            t.events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k + 1}", "pid": PID,
                             "tid": MAIN, "ts": t0, "dur": 2000.0, "args": {}})
        call, at = t0 + 5.0, t0 + 100.0
        for i in range(6):
            for name, dur in (("k", 50.0), (NCCL, 100.0 + wait if i == WAITED else 100.0)):
                t.launch(name, call, 5.0, at, dur)
                call, at = call + 10.0, at + dur
    table = t.table()
    return table, build_graph(table, step=1)


def fixed(model):
    """The model with every draw switched off: each task takes its base, each lag its base."""
    return replace(model, task_pool=np.full_like(model.task_pool, -1), lag_pool=np.full_like(model.lag_pool, -1),
                   factor_sigma=np.zeros_like(model.factor_sigma))


@pytest.fixture(scope="module")
def rank():
    table, g = one_rank()
    keys, lags = task_keys(g, table), lag_keys(g)
    spread = fit_spread([FitGroup(g, keys, lags)])
    spread.sigma = {"compute": 0.1, "host": 0.0}  # one step has no speed spread; give it one to test
    return g, spread.model(g, keys, lags, own=True)


def _ids(g):
    on_gpu = np.flatnonzero(g.kind == TaskKind.GPU)
    on_gpu = on_gpu[np.argsort(g.ts[on_gpu])]
    return [int(i) for i in on_gpu if g.name[i] == "k"], [int(i) for i in on_gpu if g.name[i] == NCCL]


def test_wait_is_split_from_the_transfer(rank):
    g, model = rank
    k, ar = _ids(g)
    # transfer = the class's 10th percentile (100 us); the rest of the long one waited
    assert [model.base[i] for i in ar] == [100.0] * 6
    assert [model.wait[i] for i in ar] == [0.0, 0.0, 0.0, 300.0, 0.0, 0.0]
    assert model.peer_factor == 1  # after the rank's compute speed factor (host sigma 0: none)
    assert all(model.wait[i] == 0.0 for i in k)


def test_a_late_rank_waits_less(rank):
    g, model = rank
    k, ar = _ids(g)
    base = fixed(model)

    def iteration(delay_at=None, delay=0.0):
        b = base.base.copy()
        if delay_at is not None:
            b[delay_at] += delay
        return monte_carlo(g, replace(base, base=b), 1, seed=0, iteration="gpu")[0, 0]

    assert iteration() == 1200.0  # the point: the peers' wait kept
    assert iteration(k[WAITED], 200.0) == 1200.0  # the kernel before the long wait runs late: waits less
    assert iteration(k[WAITED], 400.0) == 1300.0  # later than the peers: 100 us past them
    assert iteration(k[1], 200.0) == 1200.0  # earlier, but the peers' wait still absorbs it
    assert iteration(k[4], 200.0) == 1400.0  # after the wait: nothing absorbs it


def test_peer_factor_moves_the_peers_by_the_compute_before(rank):
    g, model = rank
    k, ar = _ids(g)
    arrays = prepare(g)
    start, end = simulate_compiled(arrays)[:2]
    m = with_peers(fixed(model), start, end, (g.kind == TaskKind.GPU) & ~g.comm)
    # peers ready at the point start (100 + 4 x 50 + 3 x 100 = 600) + the 300 us wait; four
    # 50 us kernels ran before it
    assert m.peer_at[ar[WAITED]] == 900.0 and m.peer_lead[ar[WAITED]] == 200.0
    assert np.isneginf(np.delete(m.peer_at, ar[WAITED])).all()
    u, f = np.full(m.n_uniform, 0.5), np.array([1.0, 1.5])
    dur, lag, floor = sample_reference(m, u, f)
    assert floor[ar[WAITED]] == 900.0 + 0.5 * 200.0 + 100.0  # peers 50% slower: 100 us later
    for x, y in zip(sample_compiled(m, u, f), (dur, lag, floor)):
        assert np.array_equal(x, y)


def test_several_steps_lend_the_peers_their_timing():
    # step 2's peers came 200 us later for the fourth all-reduce: each sample of step 1 takes
    # the peers' timing of step 1 or of step 2
    table, g = one_rank(waits=(300.0, 500.0))
    spread = fit_tables([table])
    model = spread.model(g, task_keys(g, table), lag_keys(g), own=True)
    k, ar = _ids(g)
    assert model.peer_delta.shape == (2, 6) and model.peer_u >= 0
    # later by 200 us in step 2 from the fourth on (the last two: the rank itself came 200 us
    # later, and its own arrival stands for its peers')
    assert model.peer_delta[:, model.peer_slot[ar]].tolist() == [[0.0] * 6, [0.0] * 3 + [200.0] * 3]
    samples = monte_carlo(g, fixed(model), 40, seed=0, iteration="gpu")[:, 0]
    assert set(samples) == {1200.0, 1400.0}
