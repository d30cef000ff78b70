"""EP changes of the MoE CPU captures over gloo (lumos/transform/moe_host.py): what a step holds that an EP
change moves (lumos/model/moe_host.py), the calibration (lumos/durations/moe_host.py), the change and the
prediction (lumos/predict/moe_host.py), on the shipped recordings (resources/traces/moe_cpu)."""

from __future__ import annotations

import re
from pathlib import Path

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


@pytest.fixture(scope="module")
def pinned():
    return {name: load_run(MOE / name) for name in ("ep2_r2", "ep4_r2", "ep2_r3", "ep4_r3", "ep2_r4", "ep4_r4")}


def _pairs(runs, a, b):
    return [(runs[f"ep{a}_r{r}"], runs[f"ep{b}_r{r}"]) for r in (2, 3)]


def test_ep_2_to_4_on_the_shipped_recordings(pinned):
    from lumos.predict.moe_host import predict_host_ep

    doc = predict_host_ep(pinned["ep2_r4"], 4, _pairs(pinned, 2, 4))
    assert doc["predicted"]["iteration_us"] == pytest.approx(192028.893, abs=0.01)
    ch = doc["changed"]
    # the rank keeps 1 of its 2 experts, with both experts' rows: the second expert's per-call work goes
    assert ch["experts_us"] == [15181.5, 14289.1] and ch["expert_passes"] == 8
    assert ch["expert_optimizer_us"] == [1816.5, 908.3]            # 6 of its 12 expert parameters' updates
    assert ch["slowdown"] == pytest.approx(1.8841) and doc["calibration"]["per_pair_slowdown"] == [1.8434, 1.9249]
    assert ch["collectives_us"] == [56264.5, 61280.7] and ch["collectives"] == 13
    assert doc["target"]["moe"] == {"experts": 4, "top_k": 2, "expert_ffn": 256, "ep": 4}
    assert doc["target"]["dp"] == 4 and doc["base_config"]["moe"]["ep"] == 2
    assert doc["host"] == {"mode": "median", "steps": {"0": [3, 2, 4]}}
    # calibrated on r2 alone and on r3 alone: 8.6% apart, and the two-pair prediction between them
    pairs = doc["calibration_pairs"]
    assert pairs["iteration_us"] == [183762.795, 200294.936] and pairs["recordings"] == ["ep2_r2 vs ep4_r2",
                                                                                          "ep2_r3 vs ep4_r3"]
    assert pairs["lo_us"] < doc["predicted"]["iteration_us"] < pairs["hi_us"]
    assert doc["notes"][-2] == ("calibrated on each pair alone: 183.8, 200.3 ms (the rounds disagree by 8.6% of the "
                                "prediction; a recording of the target can land outside that)")


def test_ep_4_to_2_on_the_shipped_recordings(pinned):
    from lumos.predict.moe_host import predict_host_ep

    doc = predict_host_ep(pinned["ep4_r4"], 2, _pairs(pinned, 4, 2))
    assert doc["predicted"]["iteration_us"] == pytest.approx(102269.747, abs=0.01)
    ch = doc["changed"]
    # the rank's one expert stands for two, each with half its rows: one more pass of per-call work
    assert ch["experts_us"] == [25481.1, 25671.0] and ch["expert_passes"] == 4
    assert ch["expert_optimizer_us"] == [1394.2, 2788.3]
    assert ch["slowdown"] == pytest.approx(0.531)
    assert ch["collectives_us"] == [295088.3, 21113.3]


def test_a_lengthened_collective_holds_the_main_thread(pinned):
    """Each of the 13 collectives 10 ms longer: the iteration 130 ms longer, less the little slack some had
    (waited for inside the issuing op); without the edges to the op that waited, the base's short collectives
    would end unseen."""
    from lumos.durations import moe_host as costs
    from lumos.predict.moe_host import predict_host_ep

    base = predict_host_ep(pinned["ep2_r4"], 4, _pairs(pinned, 2, 4))["predicted"]["iteration_us"]
    fit = costs.fit_host_moe_costs

    def longer(pairs, slowdown_from="dense_forward"):
        c = fit(pairs, slowdown_from)
        c.exchanges = {k: v + 10_000.0 for k, v in c.exchanges.items()}
        return c

    import lumos.predict.moe_host as pm
    pm.fit_host_moe_costs = longer
    try:
        more = predict_host_ep(pinned["ep2_r4"], 4, _pairs(pinned, 2, 4))["predicted"]["iteration_us"]
    finally:
        pm.fit_host_moe_costs = fit
    assert 129_000 < more - base <= 130_000


def test_what_is_refused(pinned, runs):
    from lumos.predict.moe_host import predict_host_ep

    with pytest.raises(ValueError, match="the base runs at EP 2 already"):
        predict_host_ep(pinned["ep2_r4"], 2, _pairs(pinned, 2, 4))
    with pytest.raises(ValueError, match="EP 1 exchanges no tokens"):
        predict_host_ep(pinned["ep2_r4"], 1, _pairs(pinned, 2, 4))
    with pytest.raises(ValueError, match="EP 3 must divide the 4 experts"):
        predict_host_ep(pinned["ep2_r4"], 3, _pairs(pinned, 2, 4))
    with pytest.raises(ValueError, match="calibration recordings run at EP 4 and 2"):
        predict_host_ep(pinned["ep2_r4"], 4, _pairs(pinned, 4, 2))
    with pytest.raises(ValueError, match="1 of the base's 2 EP ranks"):
        predict_host_ep(pinned["ep2_r4"][:1], 4, _pairs(pinned, 2, 4))
    with pytest.raises(ValueError, match="not a CPU MoE capture"):
        predict_host_ep(runs["ep1_r0"], 2, _pairs(pinned, 2, 4))


def test_the_command(capsys):
    from lumos.cli import main

    m = str(MOE)
    assert main(["predict", f"{m}/ep4_r4", "--ep", "2", "--ep-calibration", f"{m}/ep4_r2", f"{m}/ep2_r2",
                 "--ep-calibration", f"{m}/ep4_r3", f"{m}/ep2_r3", "--actual", f"{m}/ep2_r4"]) == 0
    out = capsys.readouterr().out
    assert "ep4_r4 -> tp1 pp1 ep2 dp2 layers 2 hidden 128 ffn 256" in out
    assert "  iteration                102.270" in out
    assert "EP 4 -> 2 on host collectives (gloo), 4 experts: 1 -> 2 per rank" in out
    assert "every host op and gap x0.531: the forward's dense work at EP 2 over EP 4" in out
    for args, why in ((["--ep", "2"], "give --ep-calibration RUN_AT_BASE_EP RUN_AT_EP"),
                      (["--ep", "2", "--top-k", "1", "--ep-calibration", f"{m}/ep4_r2", f"{m}/ep2_r2"],
                       "only --ep N \\(with --ep-calibration\\) is predicted, not --top-k"),
                      (["--ep", "2", "--dp", "4", "--ep-calibration", f"{m}/ep4_r2", f"{m}/ep2_r2"],
                       "not --dp 4 \\(DP = EP"),
                      (["--ep-calibration", f"{m}/ep4_r2", f"{m}/ep2_r2"], "give --ep N")):
        assert main(["predict", f"{m}/ep4_r4", *args]) != 0
        err = capsys.readouterr().err
        assert re.search(why, err) and err.count("\n") == 1, err
