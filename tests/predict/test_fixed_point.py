"""Schedule-dependent durations settled together (lumos.predict.fixed_point): a hand-made two-task
chain whose joint fixed point is known in closed form."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import pytest

from lumos.predict.fixed_point import Effect, replay_to_fixed_point


@dataclass
class Chain:                      # two tasks one after the other, which is all the loop needs of a graph
    dur: np.ndarray
    summary: dict = field(default_factory=dict)


def replay(g: Chain):
    start = np.array([0.0, g.dur[0]])
    return SimpleNamespace(start=start, end=start + g.dur)


def test_two_effects_that_read_each_others_schedule_settle_at_their_joint_fixed_point():
    # task 0 takes 10 + a quarter of when task 1 ends; task 1 takes 4 + a quarter of when it starts:
    # d0 = 10 + (d0 + d1) / 4, d1 = 4 + d0 / 4  ->  d0 = 16, d1 = 8
    g = Chain(np.array([10.0, 4.0]))
    first = Effect("first", np.array([0]), np.array([10.0]), lambda s: 10 + s.end[1:2] / 4,
                   lambda d: {"d": float(d[0])})
    second = Effect("second", np.array([1]), np.array([4.0]), lambda s: 4 + s.start[1:2] / 4,
                    lambda d: {"d": float(d[0])})
    out, sched = replay_to_fixed_point(g, replay(g), [first, None, second], replay)
    assert out.dur.tolist() == pytest.approx([16.0, 8.0], abs=0.5)
    assert sched.end[1] == pytest.approx(24.0, abs=1.0)
    assert out.summary["first"]["d"] == pytest.approx(16.0, abs=0.5) and out.summary["first"]["settled"]
    assert out.summary["second"]["replays"] == out.summary["first"]["replays"] > 2
    assert g.dur.tolist() == [10.0, 4.0] and g.summary == {}       # the input graph is left as it was


def test_effects_that_move_nothing_leave_the_replay_as_it_was():
    g = Chain(np.array([10.0, 4.0]))
    sched = replay(g)
    still = Effect("still", np.array([1]), np.array([4.0]), lambda s: np.array([4.2]), lambda d: {})
    assert replay_to_fixed_point(g, sched, [still], replay) == (g, sched)
    assert replay_to_fixed_point(g, sched, [None], replay) == (g, sched)
