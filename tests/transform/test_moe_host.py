"""EP changes of the MoE CPU captures over gloo (lumos/transform/moe_host.py): what a step holds that an EP
change moves (lumos/model/moe_host.py), the calibration (lumos/durations/moe_host.py), the change and the
prediction (lumos/predict/moe_host.py), on the shipped recordings (resources/traces/moe_cpu)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lumos.durations.moe_host import fit_host_moe_costs
from lumos.model.moe_host import dense_forward_us, read_host_moe_step, shared_host_us
from lumos.trace import load_run
from lumos.trace.steps import select_step
from lumos.transform.moe_host import stands_for

MOE = Path(__file__).resolve().parents[2] / "resources" / "traces" / "moe_cpu"


@pytest.fixture(scope="module")
def runs():
    return {name: load_run(MOE / name) for name in ("ep1_r0", "ep2_r0", "ep4_r0", "ep2_r1", "ep4_r1")}


def test_a_step_holds_each_exchange_and_each_experts_layer_pass(runs):
    t = runs["ep2_r0"][0]
    step = select_step(t, 3)
    r = read_host_moe_step(t, step, ((256, 128), (128, 256)))
    # per layer forward: the counts, the dispatch, the combine; per layer backward two token exchanges and the
    # layer's gradient bucket; after the backward the rest bucket (embedding, head, final norm)
    assert [(x.kind, x.phase, x.layer, x.order) for x in r.exchanges] == [
        ("counts", "forward", 0, 0), ("tokens", "forward", 0, 0), ("tokens", "forward", 0, 1),
        ("counts", "forward", 1, 0), ("tokens", "forward", 1, 0), ("tokens", "forward", 1, 1),
        ("tokens", "backward", 1, 0), ("tokens", "backward", 1, 1), ("all_reduce", "backward", 1, 0),
        ("tokens", "backward", 0, 0), ("tokens", "backward", 0, 1), ("all_reduce", "backward", 0, 0),
        ("all_reduce", "after", -1, 0)]
    assert [x.elements for x in r.exchanges if x.kind == "all_reduce"] == [49920, 49920, 262272]
    assert {x.kind: x.elements for x in r.exchanges if x.kind == "counts"} == {"counts": 4}
    # every worker range is a gloo collective of the issuing op's kind, on another thread
    names = [(str(t.name[x.row]), str(t.name[x.worker])) for x in r.exchanges]
    assert set(names) == {("c10d::alltoall_base_", "gloo:all_to_all"), ("c10d::allreduce_", "gloo:all_reduce")}
    assert all(t.tid[x.worker] != step.tid for x in r.exchanges)
    # rank 0 holds experts 0 and 1: each layer's forward range and the backward of its ops, with its rows
    assert sorted((x.expert, x.layer, x.phase) for x in r.experts) == sorted(
        (e, layer, phase) for e in (0, 1) for layer in (0, 1) for phase in ("forward", "backward"))
    fwd = {(x.expert, x.layer): x.rows for x in r.experts if x.phase == "forward"}
    assert fwd == {(0, 0): 273, (1, 0): 238, (0, 1): 227, (1, 1): 285}
    assert all(x.hi > x.lo for x in r.experts)
    # 2 layers x 2 experts x 3 weights: one optimizer stretch each
    assert len(r.optimizer_spans) == 12


def test_the_slowdown_measures_work_every_ep_runs_alike(runs):
    t = runs["ep2_r0"][0]
    step = select_step(t, 3)
    assert dense_forward_us(t, step) == pytest.approx(30728.2, abs=0.1)
    assert shared_host_us(t, step) == pytest.approx(76215.0, abs=0.1)
    with pytest.raises(ValueError, match="no forward block range"):
        from dataclasses import replace
        dense_forward_us(t, replace(step, start=step.end - 1.0))


def test_each_base_expert_stands_for_whole_target_experts():
    assert stands_for(0, 2, 1) == [0] and stands_for(1, 2, 1) == []        # EP 2 -> 4 over 4 experts
    assert stands_for(0, 1, 2) == [0, 1]                                     # EP 4 -> 2
    assert stands_for(1, 2, 4) == [1, 3]


def test_calibration_pairs_one_program_at_two_eps(runs):
    costs = fit_host_moe_costs([(runs["ep2_r0"], runs["ep4_r0"])])
    assert (costs.base_ep, costs.target_ep) == (2, 4)
    assert costs.slowdown == pytest.approx(10153.361 / 11090.957, abs=1e-5)   # unpinned EP 2 ran slow
    assert costs.counts[("counts", 4)] == 24 and costs.counts[("tokens", "forward", 0)] == 24
    assert costs.counts[("all_reduce", 262272)] == 12
    with pytest.raises(ValueError, match="both recordings run at EP 2"):
        fit_host_moe_costs([(runs["ep2_r0"], runs["ep2_r1"])])
    with pytest.raises(ValueError, match="one change at a time"):
        fit_host_moe_costs([(runs["ep2_r0"], runs["ep4_r0"]), (runs["ep4_r1"], runs["ep2_r1"])])
    with pytest.raises(ValueError, match="EP 1 exchanges no tokens"):
        fit_host_moe_costs([(runs["ep1_r0"], runs["ep4_r0"])])
    with pytest.raises(ValueError, match="1 of the run's 4 ranks"):
        fit_host_moe_costs([(runs["ep2_r0"], runs["ep4_r0"][:1])])
    with pytest.raises(ValueError, match="no calibration recording"):
        fit_host_moe_costs([])
