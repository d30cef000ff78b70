"""The emulator's routing draws (lumos/emulator/routing.py): invariants over any shape, and exact small cases."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from lumos.emulator.routing import Routing
from lumos.emulator.settings import MoEShape


def _routing(experts=4, k=2, tokens=10, ep=2, imbalance="dirichlet", param=1.0, cf=0.0, pad=False, seed=0):
    moe = MoEShape(experts=experts, top_k=k, ffn_hidden=8, imbalance=imbalance, imbalance_param=param,
                   capacity_factor=cf, pad_to_capacity=pad)
    return Routing(moe, tokens, ep, seed)


def test_uniform_gives_exact_shares():
    d = _routing(tokens=10, imbalance="uniform").draw(0, 0, 0)
    # 20 choices over 4 experts: 5 each, from both ranks
    assert d.counts.tolist() == [[5, 5, 5, 5], [5, 5, 5, 5]]
    assert d.local(1, 2).tolist() == [10, 10] and d.received(2).tolist() == [20, 20] and d.busiest(2) == 20


def test_draws_are_keyed_not_sequential():
    r = _routing()
    a, b = r.draw(0, 3, 1), r.draw(0, 3, 1)
    assert (a.counts == b.counts).all()                    # the backward sees the forward's routing
    assert not (r.draw(0, 3, 2).counts == a.counts).all()  # another micro-batch, another draw
    assert not (r.draw(1, 3, 1).counts == a.counts).all()  # another expert-parallel group routes its own tokens


@settings(max_examples=60, deadline=None)
@given(experts=st.sampled_from([2, 4, 8, 16]), k=st.integers(1, 2), tokens=st.integers(1, 300),
       ep=st.sampled_from([1, 2]), kind=st.sampled_from(["dirichlet", "zipf"]),
       param=st.floats(0.2, 20.0), cf=st.sampled_from([0.0, 0.5, 1.0, 1.5]), seed=st.integers(0, 50))
def test_invariants(experts, k, tokens, ep, kind, param, cf, seed):
    r = _routing(experts, k, tokens, ep, kind, param, cf, False, seed)
    d = r.draw(0, 1, 2)
    assert d.counts.shape == (ep, experts) and (d.counts >= 0).all()
    assert (d.counts <= tokens).all()                       # a token picks an expert at most once
    assert (d.sent() <= tokens * k).all()
    if cf:
        cap = int(np.ceil(tokens * k * cf / experts))
        assert (d.counts <= cap).all()
    assert d.received(ep).sum() == d.sent().sum() == sum(d.local(q, ep).sum() for q in range(ep))
    assert d.busiest(ep) >= d.sent().max()
    padded = _routing(experts, k, tokens, ep, kind, param, cf or 1.0, True, seed).draw(0, 1, 2)
    assert len(set(padded.counts.ravel().tolist())) == 1    # every expert exactly at capacity
