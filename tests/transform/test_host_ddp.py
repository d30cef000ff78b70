"""DDP over gloo, and FSDP2 at four ranks (lumos.model.dp_flavour, lumos.model.dp_hooks.ddp_ranges,
lumos.durations.dp_host, lumos.transform.dp_host, `lumos predict --dp N [--dp-calibration]`), on the CPU
captures MEASURED ON THIS MACHINE in resources/traces/dp_cpu_sizes: three model sizes, DDP at one, two
and four ranks, FSDP2 at one and four, three interleaved rounds, recorded on the otherwise idle machine
(its LOAD.txt)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from lumos.cli import main
from lumos.durations.dp_host import _fit, fit_host_collective_costs
from lumos.graph import build_graph
from lumos.model.dp_flavour import find_dp_flavour, host_dp_degree
from lumos.model.dp_hooks import dp_ranges
from lumos.predict.dp_host import host_collective_run, one_rank_dp_run
from lumos.trace import load_run
from lumos.trace.steps import select_step
from lumos.transform.dp_host import from_one_rank, to_one_rank

SIZES = Path(__file__).resolve().parents[2] / "resources" / "traces" / "dp_cpu_sizes"
H64_BUCKETS = [32960, 33408, 33216, 35328]     # DDP's 0.1 MiB buckets of the h64 model, in issue order


def _pairs(kind: str, dp: int, sizes=("h32", "h128")):
    return [(load_run(SIZES / f"{kind}_{s}_{dp}rank_r{k}"), load_run(SIZES / f"{kind}_{s}_1rank_r{k}"))
            for s in sizes for k in range(3)]


def _flags(kind: str, dp: int) -> list[str]:
    return [x for s in ("h32", "h128") for k in range(3)
            for x in ("--dp-calibration", str(SIZES / f"{kind}_{s}_{dp}rank_r{k}"), str(SIZES / f"{kind}_{s}_1rank_r{k}"))]


@pytest.fixture(scope="module")
def ddp_costs():
    return {dp: fit_host_collective_costs(_pairs("ddp", dp)) for dp in (2, 4)}


def test_ddp_is_read_as_all_reduce_dp_with_its_evidence():
    """torch's own ranges say DDP; its all-reduces are the buckets, issued in the backward and run on gloo's
    worker threads; the degree is the process group's size, 1 at one rank (DDP's all-reduces over a group of one)."""
    one, two, four = (load_run(SIZES / f"ddp_h64_{n}rank_r0") for n in (1, 2, 4))
    f = find_dp_flavour(two[0])
    assert f.kind == "allreduce" and f.ddp and [c.elements for c in f.collectives] == H64_BUCKETS
    assert {c.phase for c in f.collectives} == {"backward"}
    assert f.reason == ("torch's DistributedDataParallel ranges (DistributedDataParallel.forward, its reducer's "
                        "copy_bucket_to_grad); 4 all-reduces of gradient buckets (32960-35328 elements), 4 issued "
                        "during the backward by the reducer's autograd hooks, run on 2 gloo worker threads")
    assert sum(H64_BUCKETS) == 134912 == one[0].metadata["lumosCapture"]["parameters"]
    assert (host_dp_degree(one), host_dp_degree(two), host_dp_degree(four)) == (1, 2, 4)
    # a one-rank DDP capture is predicted from (1 -> N), a multi-rank one to one rank
    assert (host_collective_run(one), one_rank_dp_run(one)) == (False, True)
    assert (host_collective_run(two), one_rank_dp_run(two)) == (True, False)
    assert not find_dp_flavour(load_run(SIZES / "fsdp_h64_4rank_r0")[0]).ddp


def test_replay_structure_says_ddp(capsys):
    assert main(["replay", str(SIZES / "ddp_h64_2rank_r0"), "--structure"]) == 0
    out = capsys.readouterr().out
    assert "data parallel: all-reduce buckets (DDP, Megatron)\n  why: torch's DistributedDataParallel ranges" in out


def test_two_ranks_to_one_takes_out_the_bucket_all_reduces_and_the_waits():
    """Step 3 of rank 0: the four gloo worker ranges go, and the waits on them; the issuing ops stay (DDP
    issues its all-reduces over a group of one too), and so do the reducer's copies."""
    table = load_run(SIZES / "ddp_h64_2rank_r0")[0]
    graph = build_graph(table, step=3)
    out, found, notes = to_one_rank(graph, table)
    assert found.ranges == {"unshard": 0, "issuing": 0, "worker": 4}
    assert int(found.tasks.sum()) == 4 and int(found.waits.sum()) == 3
    issuing = np.array([str(table.name[e]) == "c10d::allreduce_" if e >= 0 else False for e in graph.event])
    assert int(issuing.sum()) == 4 and (out.dur[issuing] == graph.dur[issuing]).all() and (graph.dur[issuing] > 0).all()
    assert notes[0] == ("DP -> 1 from host collectives (gloo): 4 CPU ops taken out (4 gloo worker-thread all-reduces) "
                        "and 3 waits on them, as DDP's all-reduces over a group of one copy nothing and wait for no one")
    assert notes[1].startswith("kept as measured: the all-reduces' issuing ops (DDP still issues them over a group "
                               "of one), the reducer's copies into and out of its buckets")


def test_two_ranks_to_one_calibrated_runs_the_kept_work_as_one_rank_alone(tmp_path):
    """`lumos predict ddp_h64_2rank_r0 --dp 1` with the six 2-rank / 1-rank pairs of the other sizes: each pair's
    own prediction over its one-rank recording's mean iteration (0.72 to 2.15, mean 1.278) divides the kept
    host work: 16.883 -> 13.208 ms (the one-rank recordings' steps 10.4-12.8 ms, mean 11.36)."""
    plain, out = tmp_path / "plain.json", tmp_path / "p.json"
    assert main(["predict", str(SIZES / "ddp_h64_2rank_r0"), "--dp", "1", "--format", "json", "--out", str(plain)]) == 0
    assert main(["predict", str(SIZES / "ddp_h64_2rank_r0"), "--dp", "1", *_flags("ddp", 2), "--format", "json",
                 "--out", str(out)]) == 0
    before, doc = json.loads(plain.read_text()), json.loads(out.read_text())
    assert before["predicted"]["iteration_us"] == pytest.approx(16883.0, abs=1.0)
    assert doc["predicted"]["iteration_us"] == pytest.approx(13208.0, abs=1.0)
    cal = doc["calibration"]
    assert (cal["dp"], cal["sharding"], cal["slowdown"]) == (2, "allreduce", pytest.approx(1.278, abs=1e-3))
    assert cal["per_pair"] == [1.5967, 2.148, 1.0509, 0.9796, 1.1781, 0.7167]
    assert cal["recordings"][0] == "ddp_h32_2rank_r0 vs ddp_h32_1rank_r0"
    assert doc["notes"][-2].startswith("the kept host work / 1.278: the base's 2 ranks shared this host's cores")
    # the ops no longer keep "their time as they ran beside the other ranks": the note that said so is cut
    assert doc["notes"][1].endswith("the optimizer step (it then updates every parameter)")
    assert before["notes"][1].endswith("and every op's time as it ran beside the other ranks on this host")


def test_ddp_hook_range_is_the_finalize_holding_every_bucket():
    table = load_run(SIZES / "ddp_h64_1rank_r0")[0]
    step = select_step(table, 3)
    found = dp_ranges(table, step)
    assert found.kind == "ddp"
    assert found.elements == {**{f"bucket_{k}": e for k, e in enumerate(H64_BUCKETS)}, "buckets": 134912}
    (fin,) = found.hooks
    assert (fin.name, fin.what, fin.unit, fin.parts, fin.row) == ("DDP finalize_backward", "finalize_backward",
                                                                  "buckets", 4, -1)
    # from the end of the last c10d::allreduce_ to the end of the last copy_bucket_to_grad: 0.13 ms at one rank
    assert fin.start - step.start == pytest.approx(9493.903, abs=1e-3)
    assert fin.self_us == pytest.approx(132.878, abs=1e-3)


def test_fit_is_a_time_per_part_plus_a_time_per_element():
    """Points made from 1000 us per bucket + 0.02 us per element come back exactly; with one part per
    point it is the line of the FSDP2 hooks; one size gives a time per part alone."""
    pts = [(e, k, 1000.0 * k + 0.02 * e) for e, k in ((55584, 2), (664704, 11), (134912, 4))]
    c = _fit(pts)
    assert (c.intercept_us, c.slope_us_per_element) == (pytest.approx(1000.0), pytest.approx(0.02))
    assert c.at(134912, 4) == pytest.approx(4000.0 + 0.02 * 134912)
    line = _fit([(10, 1, 5.0), (30, 1, 9.0)])
    assert (line.intercept_us, line.slope_us_per_element, line.elements) == (pytest.approx(3.0), pytest.approx(0.2), (10, 30))
    flat = _fit([(100, 4, 40.0), (100, 4, 48.0)])
    assert (flat.intercept_us, flat.slope_us_per_element) == (11.0, 0.0)


def test_calibration_per_bucket_at_two_and_four_ranks(ddp_costs):
    """Fitted on the shipped h32 and h128 pairs (measured on this machine, otherwise idle): the finalize
    (the wait for the buckets) at 2 ranks 3.98 ms per bucket less 36.8 ns per element, at 4 ranks 10.20 ms
    less 66.2 ns; everything else x1.375 and x2.836 (the mean of the pairs' ratios, 0.86 to 2.00 at 2 ranks)."""
    two, four = ddp_costs[2], ddp_costs[4]
    assert (two.dp, two.sharding, four.dp, len(two.recordings)) == (2, "allreduce", 4, 6)
    fin = two.hooks[("finalize_backward", False)]
    assert set(two.hooks) == {("finalize_backward", False)} and fin.points == 6 and fin.elements == (55584, 664704)
    assert fin.intercept_us == pytest.approx(3975.58, abs=1e-2)
    assert fin.slope_us_per_element == pytest.approx(-0.036787, abs=1e-6)
    assert fin.at(134912, 4) == pytest.approx(10939.307, abs=1e-3)          # the h64 base's 4 buckets
    assert two.outside_scale == pytest.approx(1.3751, abs=1e-4)
    assert two.per_pair_outside == [1.5046, 1.9972, 1.2626, 1.0229, 1.6053, 0.8579]
    fin4 = four.hooks[("finalize_backward", False)]
    assert (fin4.intercept_us, fin4.slope_us_per_element) == (pytest.approx(10204.02, abs=1e-2),
                                                              pytest.approx(-0.066184, abs=1e-6))
    assert four.outside_scale == pytest.approx(2.8363, abs=1e-4)


def test_one_rank_ddp_to_two_ranks_adds_the_fitted_wait(ddp_costs):
    table = load_run(SIZES / "ddp_h64_1rank_r0")[0]
    graph = build_graph(table, step=3)
    _, added, notes = from_one_rank(graph, table, ddp_costs[2])
    assert added == {"finalize_backward": pytest.approx(10939.307, abs=1e-3)}
    assert notes[0].startswith("DP 1 -> 2 on host collectives (gloo): DDP's finalize after the backward, holding "
                               "the step's 4 buckets, given the time 2 ranks add inside it (10.939 ms in all)")


def test_predict_ddp_from_one_rank_to_four(tmp_path):
    """`lumos predict ddp_h64_1rank_r0 --dp 4` with the six pairs: 64.755 ms (the four-rank recordings'
    nine steps 45.9-97.8 ms, mean 64.54: table fsdp_cpu_whatif, target ddp_four_ranks)."""
    out = tmp_path / "p.json"
    assert main(["predict", str(SIZES / "ddp_h64_1rank_r0"), "--dp", "4", *_flags("ddp", 4), "--format", "json",
                 "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["predicted"]["iteration_us"] == pytest.approx(64755.0, abs=1.0)
    assert doc["target"]["dp"] == 4 and doc["target"]["dp_sharding"] == "allreduce"
    assert doc["base_config"]["dp_sharding"] == "allreduce" and doc["graph"]["added_us"] == pytest.approx(31887.1, abs=0.1)


def test_predict_fsdp_from_one_rank_to_four(tmp_path):
    """FSDP2 at four ranks: nothing in the calibration assumed two; an all-gather before a block's forward
    adds 8.86 ms less 1.5 ns per parameter (two processes on each core), the rest x1.905: 153.671 ms from
    fsdp_h64_1rank_r0 (the four-rank steps 112.3-197.7 ms, mean 146.26)."""
    costs = fit_host_collective_costs(_pairs("fsdp", 4))
    assert (costs.dp, costs.sharding, len(costs.hooks)) == (4, "fsdp_full", 17)
    assert costs.hooks[("pre_forward", False)].intercept_us == pytest.approx(8858.996, abs=1e-3)
    assert costs.outside_scale == pytest.approx(1.905009, abs=1e-6)
    out = tmp_path / "p.json"
    assert main(["predict", str(SIZES / "fsdp_h64_1rank_r0"), "--dp", "4", *_flags("fsdp", 4), "--format", "json",
                 "--out", str(out)]) == 0
    assert json.loads(out.read_text())["predicted"]["iteration_us"] == pytest.approx(153671.0, abs=1.0)


@pytest.mark.parametrize("flags, message", [
    (["--dp", "2"], "a one-rank DDP capture has DDP's bucket all-reduces over a group of one but none of the "
                    "waiting 2 ranks do in them"),
    (["--dp", "4", "--dp-calibration", str(SIZES / "fsdp_h32_4rank_r0"), str(SIZES / "fsdp_h32_1rank_r0")],
     "the base trains with allreduce, the calibration recordings with fsdp_full: give recordings "
     "of the base's program"),
    (["--dp", "2", "--dp-calibration", str(SIZES / "ddp_h32_2rank_r0"), str(SIZES / "fsdp_h32_1rank_r0")],
     "ddp at DP 2 and fsdp2 at one rank: a calibration pair is one program at two DP degrees"),
    (["--layers", "4"], "From a one-rank DDP capture on CPU, --dp N alone is predicted, with --dp-calibration"),
])
def test_predict_from_one_rank_ddp_says_what_it_needs(capsys, flags, message):
    assert main(["predict", str(SIZES / "ddp_h64_1rank_r0"), *flags]) == 2
    assert message in capsys.readouterr().err
