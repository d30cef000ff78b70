"""Megatron's grad-norm all-reduce over the model-parallel group (TP x PP ranks) in a rebuilt pipeline, and the
rank whose breakdown stands for the run when the stages end together (EMULATED tiny runs)."""

from __future__ import annotations

import pytest

from lumos.analysis.breakdown import Breakdown
from lumos.predict.prediction import predict, simulate_plan
from lumos.analysis.run_replay import critical_rank
from lumos.cli import main as lumos_main
from lumos.trace import load_run
from lumos.transform.plan import mp_group
from lumos.predict.whatif import base_plan, transform

MP_NORM = "++training.emulator.schedule.grad_norm_group=model_parallel"
# the long python blocks without their jitter: at the H100 fit's 33 ms of optimizer python, 5% of jitter moves
# one stage's end by 1.6 ms (1%) after the rendezvous, more than the tie these tests read
STILL = "emulator.host.block_jitter_sigma=0"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("mp_norm")
    out = {}
    for name, pp in (("base", 2), ("pp4", 4)):
        out[name] = root / name
        assert lumos_main(["emulate", "model=tiny", "parallel.tp=2", f"parallel.pp={pp}", "parallel.dp=2", "seed=0",
                           f"out={out[name]}", "progress=false", MP_NORM, STILL, "--quiet"]) == 0
    return out


def test_mp_group_is_the_tp_ranks_of_every_stage():
    assert mp_group(0, 2, 2, 2) == (0, 1, 4, 5)
    assert mp_group(3, 2, 4, 2) == (2, 3, 6, 7, 10, 11, 14, 15)   # dp index 1
    assert mp_group(5, 1, 3, 4) == (1, 5, 9)                       # TP 1: one rank a stage


def test_the_norm_all_reduce_meets_every_new_stage(runs):
    """The base (PP 2) all-reduces its grad norm over ranks 0, 1, 4, 5; at PP 4 each of the four stages' copy
    takes the new group (0, 1, 4, 5, 8, 9, 12, 13) and the four copies meet in one rendezvous, so no stage's
    GPU ends before the others' (before: each kept the old group and ran alone, and the last stage's
    iteration came out 5-15% shorter than the first's where the emulated stages end together)."""
    plan = base_plan(load_run(runs["base"]))
    norm = [t for t in range(plan.graph.n_tasks) if plan.role[t] == "mp"]
    assert len(norm) == 2 and {tuple(plan.st.group[t]) for t in norm} == {(0, 1, 4, 5)}
    out = transform(plan, pp=4)
    mp = [t for t in range(out.graph.n_tasks) if out.role[t] == "mp"]
    assert sorted(int(out.graph.rank[t]) for t in mp) == [0, 4, 8, 12]
    assert {tuple(out.st.group[t]) for t in mp} == {(0, 1, 4, 5, 8, 9, 12, 13)}
    meets = [g for g in out.pairs if len(g) == 4]
    assert len(meets) == 1 and sorted(meets[0]) == sorted(mp)
    _, _, bd = simulate_plan(out)
    ends = [b.gpu_span_us for b in bd.per_rank.values()]
    assert max(ends) - min(ends) < 0.005 * max(ends)


def test_a_near_tie_of_stage_spans_is_read_on_the_first_stage(runs):
    def b(span):
        return Breakdown(span, span, 0.0, 0.0, 0.0, gpu_span_us=span)
    assert critical_rank({0: b(1000.0), 8: b(1004.0), 16: b(990.0)}) == 0      # within 0.5% of the longest
    assert critical_rank({0: b(1000.0), 8: b(1010.0)}) == 8                    # 1% longer: it is the critical one
    doc = predict(load_run(runs["base"]), {"pp": 4}, actual_tables=load_run(runs["pp4"]))
    assert doc["critical_stage_rank"] == 0 and doc["measured"]["iteration_us"] > 0
    assert abs(doc["error_pct"]) < 3.0
