"""MoE what-ifs (lumos/transform/moe.py, durations/routing.py, durations/experts.py) on an EMULATED Mixtral-style base:
what each flag re-times, exactly, and what is refused."""

from __future__ import annotations

import numpy as np
import pytest

from lumos.durations.experts import fit_expert_cost
from lumos.durations.routing import fit_routing
from lumos.emulator import emulate, write_result
from lumos.errors import UserError
from lumos.predict.options import PredictOptions
from lumos.predict.prediction import predict
from lumos.predict.whatif import base_plan, transform
from lumos.trace import load_run
from lumos.transform.moe import layer_parts

# Mixtral's layers (hidden 4096, 8 experts of 14336, top-2), 4 of them over 2 stages, EP 4 of DP 8, 8 micro-batches
BASE = ["model=mixtral_8x7b", "model.num_layers=4", "parallel.tp=1", "parallel.pp=2", "parallel.dp=8",
        "parallel.ep=4", "model.microbatch_rule=fixed", "model.num_microbatches=8", "emulator.granularity=coarse"]
T, K, H = 4096, 2, 4096


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    out = tmp_path_factory.mktemp("moe_base")
    write_result(emulate(BASE, progress=False), out)
    tables = load_run(out)
    return out, tables, base_plan(tables)


def test_the_base_reads_as_moe(base):
    _, _, plan = base
    m = plan.st.moe
    assert (m.experts, m.experts_local, m.top_k, m.ep, m.expert_ffn, m.tokens) == (8, 2, 2, 4, 14336, 4096)
    assert (plan.tp, plan.pp, plan.dp, plan.cp, plan.ep) == (1, 2, 8, 1, 4)
    roles = {(plan.role[t], plan.st.coll[t], tuple(plan.st.group[t])) for t in np.flatnonzero(plan.role != None)}  # noqa: E711
    assert {("ep", "all_to_all", (0, 1, 2, 3)), ("ep", "all_to_all", (8, 9, 10, 11)),
            ("ep", "allgather", (0, 1, 2, 3))} <= roles
    assert {("edp", "allreduce", (0, 4)), ("edp", "allreduce", (8, 12)), ("dp", "allreduce", tuple(range(8)))} <= roles
    # every layer forward's received tokens, 4 layers (2 per stage) x 8 micro-batches; the shares' mean about 1
    assert len(m.received) == 32
    assert 0.8 < np.mean(list(m.received.values())) / (T * K) < 1.2
    assert plan.routing.samples == 32 and 2.0 < plan.routing.alpha < 40.0
    assert plan.expert_cost is not None and plan.expert_cost.forward == 2 and len(plan.expert_cost.slopes) == 6


def test_ep_change_regroups_and_retimes_the_exchanges(base):
    _, _, plan = base
    out = transform(plan, ep=8)
    own, busiest, _ = plan.routing.expected(8, 8)
    exch = [t for t in np.flatnonzero(out.role == "ep") if out.st.coll[t] == "all_to_all"]
    assert len(exch) == 2 * 2 * 4 * 8   # dispatch and combine, forward and backward, 4 layers, 8 micro-batches
    assert {tuple(out.st.group[t]) for t in exch} == {tuple(range(8)), tuple(range(8, 16))}
    assert {round(out.st.nbytes[t]) for t in exch} == {round(max(1.0, busiest) * T * K * H * 2)}
    # EP 8 = TP x DP: each rank holds its own experts, nothing to reduce them over
    edp = np.flatnonzero(out.role == "edp")
    assert len(edp) and all(out.graph.dur[t] == 0.0 for t in edp) and {len(out.st.group[t]) for t in edp} == {1}
    assert out.ep == 8 and any("MoE: 8 -> 8 experts, top-2 -> top-2, EP 4 -> 8" in n for n in out.notes)


def test_the_experts_take_the_fitted_cost_of_the_targets_rows(base):
    _, _, plan = base
    out = transform(plan, top_k=4)
    cost, (own, _, _) = plan.expert_cost, plan.routing.expected(8, 4)
    b = next(b for b in plan.st.blocks if b.kind == "layer" and b.phase == "forward")
    _, gemms, _ = layer_parts(plan, b)   # the base's tasks (a clone keeps their ids)
    want = cost.times_us(False, own * T * 4, 2)
    assert [round(float(out.graph.dur[t]), 6) for t in gemms] == [round(w, 6) for w in want]


def test_an_expert_width_change_keeps_the_layers(base):
    """--expert-ffn re-times the experts in place: no rebuild (the base's tasks, and its exchanges, all kept)."""
    _, _, plan = base
    out = transform(plan, expert_ffn=7168)
    assert out.graph.n_tasks == plan.graph.n_tasks and out.shape.ffn == plan.shape.ffn == 14336
    assert out.moe_expert_ffn == 7168 and int(np.sum(out.role == "ep")) == int(np.sum(plan.role == "ep"))


def test_a_capacity_factor_caps_the_busiest_rank(base):
    _, _, plan = base
    dropless = transform(plan, ep=8)
    capped = transform(plan, ep=8, capacity_factor=1.0)
    exch = [t for t in np.flatnonzero(dropless.role == "ep") if dropless.st.coll[t] == "all_to_all"]
    # an expert takes at most its fair share: the busiest rank moves no more than T x k rows
    assert max(capped.st.nbytes[t] for t in exch) <= T * K * H * 2 + 1e-6 < min(dropless.st.nbytes[t] for t in exch)
    assert sum(capped.graph.dur[t] for t in exch) < sum(dropless.graph.dur[t] for t in exch)
    assert any("capacity factor 1" in n for n in capped.notes)


def test_dp_change_keeps_the_expert_groups_at_the_new_ranks(base):
    _, _, plan = base
    out = transform(plan, dp=16)
    ep = {tuple(out.st.group[t]) for t in np.flatnonzero(out.role == "ep")}
    edp = {tuple(out.st.group[t]) for t in np.flatnonzero(out.role == "edp")}
    # stage 1's ranks now start at 16 (TP x DP = 16 ranks a stage)
    assert ep == {(0, 1, 2, 3), (16, 17, 18, 19)} and edp == {(0, 4, 8, 12), (16, 20, 24, 28)}
    # EP checked against the target's DP: 16 experts over the 16 ranks of a stage at DP 16 (two hosts)
    wide = transform(plan, dp=16, ep=16, experts=16)
    assert {len(wide.st.group[t]) for t in np.flatnonzero(wide.role == "ep")} == {16}


@pytest.mark.parametrize("flags, message", [
    ({"ep": 3}, "must divide the experts"),
    ({"ep": 1}, "EP 1 puts every expert on every rank"),
    ({"top_k": 9}, "between 1 and 8 experts"),
    ({"pad_to_capacity": True}, "--pad-to-capacity needs one"),
    ({"tp": 2}, "the base's layers are mixture-of-experts"),
    ({"pp": 4}, "the base's layers are mixture-of-experts"),
    ({"layers": 8}, "the base's layers are mixture-of-experts"),
])
def test_refused(base, flags, message):
    with pytest.raises(UserError, match=message):
        transform(base[2], **flags)


def test_moe_flags_on_a_dense_base_are_refused(tmp_path):
    write_result(emulate(["model=tiny"], progress=False), tmp_path)
    with pytest.raises(UserError, match="the base has no mixture-of-experts layers"):
        transform(base_plan(load_run(tmp_path)), ep=2)


def test_ep_prediction_against_the_emulated_runs(base, tmp_path):
    """EP 4 -> 8 within 5% of the mean of three emulated runs of the target (the table moe has the full check)."""
    _, tables, plan = base
    doc = predict(tables, {"ep": 8}, PredictOptions(), plan=plan)
    runs = [emulate(BASE + ["parallel.ep=8", f"seed={s}"], progress=False).iteration_us for s in range(3)]
    assert abs(doc["predicted"]["iteration_us"] / np.mean(runs) - 1) < 0.05
    assert doc["target"]["moe"]["ep"] == 8 and doc["base_config"]["moe"]["ep"] == 4


def test_samples_give_an_interval_over_routing_draws(base):
    _, tables, plan = base
    doc = predict(tables, {"ep": 8}, PredictOptions(samples=20), plan=plan)
    r = doc["routing"]["iteration_us"]
    lo, hi = r["90"]
    assert doc["routing"]["samples"] == 20 and lo < r["median"] < hi


def test_fit_routing_solves_the_share_variance():
    # shares with variance v over EP 4 of 8 experts: alpha = ((ep - 1) / (v - noise) - 1) / E
    shares = {i: s for i, s in enumerate([0.8, 1.2, 0.9, 1.1, 1.0, 1.0])}
    tokens, k = 1000, 2
    fit = fit_routing({key: s * tokens * k for key, s in shares.items()}, tokens, k, 8, 4)
    v = np.var(list(shares.values()), ddof=1) - (1 - 1 / 4) / (tokens * k)
    assert fit.alpha == pytest.approx((3 / v - 1) / 8)
    assert fit_routing({0: 2000, 1: 2000, 2: 2000}, 1000, 2, 8, 4).alpha == float("inf")   # no spread: balanced
    own, busiest, sent = fit.draw(np.random.default_rng(0), 16, 4, 500)
    assert own.shape == busiest.shape == (500,) and (busiest >= own).all() and abs(own.mean() - 1) < 0.1
    assert np.allclose(sent, 1.0)   # dropless: every token's k picks leave
    # a capacity factor of 1: no expert takes more than 1 / 16 of the picks, the rest dropped; padded, all exactly
    own, busiest, sent = fit.draw(np.random.default_rng(0), 16, 4, 500, capacity=1.0)
    assert (busiest <= 1.0 + 1e-9).all() and (sent < 1.0).all()
    assert [x.tolist()[:2] for x in fit.draw(np.random.default_rng(0), 16, 4, 2, 1.5, pad=True)] == [[1.5, 1.5]] * 3


def test_fit_expert_cost_recovers_a_line_and_moves_its_intercept_per_expert():
    rows = [1000.0, 2000.0, 3000.0, 4000.0]
    samples = [(False, r, [10 + 0.5 * r, 20 + 0.25 * r]) for r in rows] \
        + [(True, r, [30 + 1.0 * r]) for r in rows]
    c = fit_expert_cost(samples, experts_local=2, fixed_us=4.0)
    assert c.intercepts == pytest.approx((10, 20, 30)) and c.slopes == pytest.approx((0.5, 0.25, 1.0))
    assert c.times_us(False, 1000, 2) == pytest.approx([510, 270])          # the base's L: the fitted line
    # 4 experts per rank: each expert's share of the intercept beyond one kernel start, twice over
    per = (10 + 4.0) / 2 - 4.0
    assert c.times_us(False, 1000, 4)[0] == pytest.approx(4.0 + 4 * per + 500)
    assert fit_expert_cost([(False, 10.0, [1.0]), (False, 10.0, [1.0, 2.0])], 2, 1.0) is None


def test_memory_holds_the_ranks_experts(base):
    _, _, plan = base
    from lumos.predict.whatif import memory_of, moe_shape

    sh = moe_shape(plan)
    assert (sh.moe_experts, sh.moe_local, sh.moe_top_k, sh.moe_edp, sh.ffn) == (8, 2, 2, 2, 14336)
    assert sh.expert_params() == 2 * 3 * 4096 * 14336
    # a stage's 2 layers x (EP 4 -> 8: 2 -> 1 expert of 3 x 4096 x 14336) x 18 bytes less
    gib = {ep: memory_of(transform(plan, ep=ep))["per_stage"][0]["parameters_gib"] for ep in (4, 8)}
    assert gib[4] - gib[8] == pytest.approx(2 * 3 * 4096 * 14336 * 18 / 2 ** 30, abs=2e-3)


def test_search_varies_ep_and_keeps_the_rest(base):
    from lumos.predict.search import candidates

    _, _, plan = base
    got = candidates(plan, 16, [1], None)
    assert {(c["tp"], c["pp"], c["dp"], c["ep"]) for c in got} == {(1, 2, 8, 2), (1, 2, 8, 4), (1, 2, 8, 8)}
