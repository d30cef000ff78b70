"""FSDP2 over gloo from one rank to two (lumos.model.dp_hooks, lumos.durations.dp_host,
lumos.transform.dp_host.from_one_rank,
`lumos predict --dp 2 --dp-calibration`), on the CPU captures MEASURED ON THIS MACHINE in
resources/traces/fsdp_cpu_sizes: three model sizes, each at one and two ranks, three interleaved rounds."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lumos.cli import main
from lumos.graph import build_graph
from lumos.graph.model import TaskKind
from lumos.sim import simulate
from lumos.trace import load_run
from lumos.trace.steps import select_step
from lumos.model.dp_hooks import hook_ranges, outside_hooks_us
from lumos.transform.dp_host import from_one_rank
from lumos.durations.dp_host import HookCost, HostCollectiveCosts, fit_host_collective_costs

SIZES = Path(__file__).resolve().parents[2] / "resources" / "traces" / "fsdp_cpu_sizes"


def _pairs(*sizes):
    return [(load_run(SIZES / f"{s}_2rank_r{r}"), load_run(SIZES / f"{s}_1rank_r{r}")) for s in sizes for r in range(3)]


def _span(graph) -> float:
    s = simulate(graph)
    return float(s.end.max() - s.start.min())


@pytest.fixture(scope="module")
def costs():
    return fit_host_collective_costs(_pairs("h32", "h128"))


@pytest.fixture(scope="module")
def base():
    table = load_run(SIZES / "h64_1rank_r0")[0]
    return table, build_graph(table, step=3)


def test_hook_ranges_of_a_step_at_one_rank_and_at_two(base):
    """2 layers, 2 micro-batches: 43 hooks, in the same order at one rank and at two; a hook's self time
    leaves out the hooks nested in it (the root's pre_backward holds the prefetch of blocks.1)."""
    table, _ = base
    step = select_step(table, 3)
    hooks = hook_ranges(table, step)
    assert len(hooks) == 43
    counts = {w: sum(h.what == w for h in hooks) for w in {h.what for h in hooks}}
    assert counts == {"pre_forward": 6, "post_forward": 6, "pre_backward": 6, "post_backward_accumulate": 6,
                      "post_backward_reshard": 6, "backward_prefetch": 4, "post_backward_reduce": 3,
                      "root_pre_forward": 2, "root_post_backward_callback": 2, "post_backward_rs_wait": 2}
    pb = next(h for h in hooks if h.name == "FSDP::pre_backward")
    nested = next(h for h in hooks if h.name == "FSDP::backward_prefetch for blocks.1")
    assert pb.unit == "root" and pb.role == ("pre_backward", True)
    assert pb.start < nested.start and nested.end < pb.end
    assert pb.self_us == pytest.approx(pb.end - pb.start - (nested.end - nested.start), abs=1e-6)
    assert pb.self_us == pytest.approx(164.324, abs=1e-3)
    assert outside_hooks_us(hooks, step) == pytest.approx(13214.688, abs=1e-3)
    two = load_run(SIZES / "h64_2rank_r0")[0]
    assert [h.key for h in hook_ranges(two, select_step(two, 3))] == [h.key for h in hooks]


def test_calibration_fits_a_line_per_hook_over_the_two_sizes(costs):
    """Measured here: an all-gather before a block's forward adds 1.24 ms + 11.2 ns per parameter at two
    ranks; what outside the hooks runs 1.115x slower with two processes on the two cores."""
    assert costs.dp == 2 and costs.sharding == "fsdp_full" and len(costs.hooks) == 17 and len(costs.recordings) == 6
    pre = costs.hooks[("pre_forward", False)]
    assert pre.elements == (12704, 198272) and pre.points == 36   # 3 blocks x 2 micro-batches x 6 pairs
    assert pre.intercept_us == pytest.approx(1240.562, abs=1e-3)
    assert pre.at(49984) == pytest.approx(1802.064, abs=1e-3)
    assert costs.hooks[("post_backward_reduce", False)].at(49984) == pytest.approx(2246.634, abs=1e-3)
    assert costs.hooks[("pre_forward", True)].elements == (17472, 69888)
    assert costs.outside_scale == pytest.approx(1.11534, abs=1e-5)


def test_calibration_refuses_what_is_not_one_program_at_two_degrees():
    with pytest.raises(ValueError, match=r"second recording of a calibration pair must be one rank"):
        fit_host_collective_costs([(load_run(SIZES / "h32_1rank_r0"), load_run(SIZES / "h32_2rank_r0"))])
    with pytest.raises(ValueError, match=r"h32_2rank_r0/rank0\.json\.gz vs .*h128_1rank_r0/rank0\.json\.gz: the two "
                                         r"recordings train different models"):
        fit_host_collective_costs([(load_run(SIZES / "h32_2rank_r0"), load_run(SIZES / "h128_1rank_r0"))])
    with pytest.raises(ValueError, match=r"no calibration recording"):
        fit_host_collective_costs([])
    cpu = SIZES.parent / "fsdp_cpu"   # the first captures: FULL_SHARD and SHARD_GRAD_OP at two ranks
    with pytest.raises(ValueError, match=r"grad_op_2rank_r0/rank0\.json\.gz vs .*: calibration recordings of fsdp_full "
                                         r"and fsdp_grad_op: one strategy at a time"):
        fit_host_collective_costs([(load_run(cpu / "full_2rank_r0"), load_run(cpu / "full_1rank_r0")),
                                   (load_run(cpu / "grad_op_2rank_r0"), load_run(cpu / "full_1rank_r0"))])


def test_each_hook_gets_its_time_before_its_first_op_and_the_rest_is_scaled(base, costs):
    table, graph = base
    out, added, notes = from_one_rank(graph, table, costs)
    assert out.n_tasks == graph.n_tasks and out.n_edges == graph.n_edges
    assert sum(added.values()) == pytest.approx(27509.4, abs=0.1)
    hooks = hook_ranges(table, select_step(table, 3))
    expected = sum(costs.cost(h.role, {"root": 34944}.get(h.unit, 49984), "") for h in hooks)
    assert sum(added.values()) == pytest.approx(expected, abs=1e-6)
    cpu = (graph.kind == TaskKind.CPU) & (graph.event >= 0)
    ts = table.ts[graph.event]
    inside = np.zeros(graph.n_tasks, dtype=bool)
    for h in hooks:
        inside |= cpu & (ts >= h.start) & (ts < h.end)
    # the model's ops outside the hooks run x outside_scale; the ops FSDP2 runs in its hooks keep their
    # time, but the step's first (the root's pre-forward hook, a leaf at one rank: nothing before it to
    # carry a lag), which takes its hook's added time on its own
    first = np.bincount(graph.dst, minlength=graph.n_tasks) == 0
    assert np.flatnonzero(first & inside).tolist() == [int(np.argmin(np.where(cpu, ts, np.inf)))]
    assert graph.name[first & inside].tolist() == ["FSDP::root_pre_forward"]
    assert np.array_equal(out.dur[inside & ~first], graph.dur[inside & ~first])
    assert np.allclose(out.dur[cpu & ~inside], graph.dur[cpu & ~inside] * costs.outside_scale)
    # every other added microsecond is a lag into the first op at or after a hook's start
    scaled = np.where(~inside[graph.dst], graph.lag * costs.outside_scale, graph.lag)
    on_first = float((out.dur - graph.dur)[first & inside].sum())
    assert on_first == pytest.approx(costs.cost(("root_pre_forward", True), 34944, ""), abs=1e-6)
    assert (out.lag - scaled).sum() + on_first == pytest.approx(expected, abs=1e-3)
    assert notes[0].startswith("DP 1 -> 2 on host collectives (gloo): 43 FSDP2 hook ranges")
    assert len(notes) == 1      # the target's units lie between the two calibration sizes


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(0, 5000), min_size=17, max_size=17), st.floats(1.0, 2.0))
def test_added_time_never_shortens_the_step(base, costs, intercepts, scale):
    """Max-plus replay: non-negative time added before ops and a scale >= 1 on the rest can only end the
    step later; none added and scale 1 replays the base exactly."""
    table, graph = base
    roles = sorted(costs.hooks)
    some = HostCollectiveCosts(2, "fsdp_full", {r: HookCost(x, 0.0, (1, 10**9), 1) for r, x in zip(roles, intercepts)},
                               scale, [])
    none = HostCollectiveCosts(2, "fsdp_full", {r: HookCost(0.0, 0.0, (1, 10**9), 1) for r in roles}, 1.0, [])
    assert _span(from_one_rank(graph, table, none)[0]) == pytest.approx(_span(graph), abs=1e-6)
    assert _span(from_one_rank(graph, table, some)[0]) >= _span(graph) - 1e-6


def test_predict_two_ranks_from_one_with_calibration(capsys):
    """Measured on this machine: from h64_1rank_r0 with the three 1-rank recordings' host work and both
    calibration sizes, 53.696 ms at two ranks; its partner recording's step 3 ran 55.917 ms (the table
    fsdp_cpu_whatif compares with every step of every rank of the three 2-rank recordings)."""
    cal = [x for s in ("h32", "h128") for r in range(3)
           for x in ("--dp-calibration", str(SIZES / f"{s}_2rank_r{r}"), str(SIZES / f"{s}_1rank_r{r}"))]
    assert main(["predict", str(SIZES / "h64_1rank_r0"), "--dp", "2", *cal, "--other-recordings",
                 str(SIZES / "h64_1rank_r1"), str(SIZES / "h64_1rank_r2"), "--actual", str(SIZES / "h64_2rank_r0"),
                 "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["predicted"]["iteration_us"] == pytest.approx(53695.867, abs=0.01)
    assert doc["measured"]["iteration_us"] == pytest.approx(55916.654, abs=0.01)
    assert doc["target"]["dp"] == 2 and doc["target"]["dp_sharding"] == "fsdp_full"
    assert doc["base_config"]["dp"] == 1 and doc["graph"]["added_us"] == pytest.approx(27509.4, abs=0.1)
    assert len(doc["host"]["steps"]["0"]) == 9 and doc["calibration"]["dp"] == 2
    assert len(doc["calibration"]["recordings"]) == 6


@pytest.mark.parametrize("flags, message", [
    (["--dp", "2"], "a one-rank FSDP2 capture has FSDP2's hooks but none of the work 2 ranks do in them"),
    (["--dp", "1"], "the base runs at DP 1 already (a one-rank FSDP2 capture)"),
    (["--dp", "4", "--dp-calibration", str(SIZES / "h32_2rank_r0"), str(SIZES / "h32_1rank_r0")],
     "--dp 4 asked, but the calibration recordings ran at DP 2"),
    (["--dp", "2", "--layers", "4", "--dp-calibration", str(SIZES / "h32_2rank_r0"), str(SIZES / "h32_1rank_r0")],
     "only --dp N (with --dp-calibration) is predicted, not --layers"),
])
def test_predict_from_one_rank_says_what_it_needs(capsys, flags, message):
    assert main(["predict", str(SIZES / "h64_1rank_r0"), *flags]) == 2
    err = capsys.readouterr().err
    assert "h64_1rank_r0/rank0.json.gz" in err and message in err
