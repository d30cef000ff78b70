"""MoE layers read right: experts, top-k, EP, expert width and the tokens each expert got.

Traces MEASURED ON THIS MACHINE: resources/traces/moe_cpu/ (studies/moe/record_cpu.py; its PROVENANCE.md),
the bundled MoE model (lumos/capture/moe.py) at EP 1, 2 and 4: 4 experts of width 256, top-2, hidden 128,
4 query heads, 2 KV heads, sequence 64, micro-batch 4, one micro-batch per rank (256 tokens).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lumos.cli import main as lumos_main
from lumos.model.moe import ExpertLayout, MoEDisagreement, read_moe, split_experts
from lumos.predict.whatif import structure_report
from lumos.trace import load_run

MOE = Path(__file__).resolve().parents[2] / "resources" / "traces" / "moe_cpu"
RUNS = [f"ep{ep}_r{r}" for ep in (1, 2, 4) for r in range(6)]   # r0, r1 unpinned; r2-r5 pinned


@pytest.fixture(scope="module")
def reports():
    return {}


def _report(reports, name):
    if name not in reports:
        reports[name] = structure_report(load_run(MOE / name))
    return reports[name]


@pytest.mark.parametrize("name", RUNS)
def test_every_capture_reads_experts_top_k_ep_and_the_attention(reports, name):
    ep = int(name[2])
    rep = _report(reports, name)
    sh, moe = rep["shape"], rep["moe"]
    assert (sh["hidden"], sh["heads"], sh["kv_heads"], sh["head_dim"], sh["tp"]) == (128, 4, 2, 32, 1)
    assert (sh["seq"], sh["micro_batch"], sh["norm"], sh["ffn"]) == (64, 4, "rmsnorm", 256)
    assert sh["evidence"]["MLP"].startswith("none (an MoE layer): a router (128 -> 4) and ")   # not called an MLP
    assert (moe["experts"], moe["experts_per_rank"], moe["top_k"], moe["ep"]) == (4, 4 // ep, 2, ep)
    assert (moe["expert_ffn"], moe["shared_expert_ffn"], moe["tokens"]) == (256, 0, 256)
    # every token's two picks, from every EP rank's 256 tokens, in each layer
    assert [(row["layer"], sum(row["tokens"])) for row in moe["tokens_per_expert"]] == [(0, 256 * ep * 2),
                                                                                       (1, 256 * ep * 2)]
    assert "disagreement" not in moe
    assert moe["evidence"]["EP"] == ("no all-to-all in the MoE layers: every expert on every rank" if ep == 1 else
                                     f"the all-to-alls' process group ({ep} ranks: the one process group "
                                     "distributedInfo lists; c10d::alltoall_base_ names none)")


def test_the_tokens_each_expert_got_at_ep_4(reports):
    moe = _report(reports, "ep4_r0")["moe"]
    # layer 0's expert e ran on rank e (one expert per rank): its GEMMs took these rows
    assert [row["tokens"] for row in moe["tokens_per_expert"]] == [[518, 502, 513, 515], [507, 485, 533, 523]]


def test_replay_structure_prints_the_moe_reading(capsys):
    assert lumos_main(["replay", str(MOE / "ep4_r0"), "--structure"]) == 0
    out = capsys.readouterr().out
    assert ("  shape: hidden 128, MoE experts' FFN 256 (SwiGLU), 4 query heads, 2 KV heads of 32, norm rmsnorm, "
            "vocabulary 1024, sequence 64, micro-batch 4, TP 1") in out
    assert ("  MoE layers: 4 experts (1 per rank), top-2, EP 4, expert FFN 256; 256 tokens per rank and "
            "micro-batch") in out
    assert "    top-k: the permutation's row copy (index_select of T x k rows): 2 x 256 tokens" in out
    assert "    tokens per expert, layer 0 micro-batch 0: 518 502 513 515 (sum 2048)" in out


# -- the reading's rules, on hand-made GEMM lists ((m, k, n) each) -----------------------------------
def test_a_dense_swiglu_is_no_moe():
    assert split_experts([(256, 128, 352), (256, 128, 352), (256, 352, 128)], 128, 256) is None


def test_router_then_experts_and_a_shared_expert():
    gemms = [(256, 128, 4)] + [g for rows in (300, 212) for g in ((rows, 128, 64), (rows, 128, 64), (rows, 64, 128))]
    gemms += [(256, 128, 96), (256, 128, 96), (256, 96, 128)]
    assert split_experts(gemms, 128, 256) == ExpertLayout(router=(256, 128, 4), rows=(300, 212), width=64,
                                                          fused=False, shared_width=96)


def _layouts(rows_by_rank):
    return {(r, 0, 0): ExpertLayout(router=(256, 128, 4), rows=tuple(rows), width=64, fused=False)
            for r, rows in enumerate(rows_by_rank)}


def test_token_counts_that_do_not_add_up_are_one_line_and_no_counts():
    a2a = {k: [(2, "its Process Group Ranks", 0)] * 3 for k in _layouts([[0, 0], [0, 0]])}
    got = read_moe(_layouts([[250, 250], [250, 200]]), {(0, 0, 0): 512, (1, 0, 0): 512}, a2a)
    assert got.tokens_per_expert == {} and got.top_k == 2 and got.ep == 2
    assert got.disagreement.startswith("the tokens per expert do not add up to tokens x top-k (256 x 2 ranks x 2 = "
                                       "1024) in 1 of 1 layer forwards (layer 0 micro-batch 0: 950)")


def test_top_k_readings_that_disagree_are_refused():
    # the row copy says 2 picks per token, the dispatch all-to-all sends 3 x 256 rows
    a2a = {(r, 0, 0): [(2, "its Process Group Ranks", 4), (2, "its Process Group Ranks", 768)] for r in (0, 1)}
    with pytest.raises(MoEDisagreement, match=r"the evidence on top-k disagrees: 2 \(the permutation's row copy .*\), "
                                              r"3 \(the dispatch all-to-all's T x k rows\)"):
        read_moe(_layouts([[256, 256], [256, 256]]), {(0, 0, 0): 512, (1, 0, 0): 512}, a2a)


def test_experts_that_do_not_match_the_router_are_refused():
    a2a = {(r, 0, 0): [(2, "its Process Group Ranks", 512)] for r in (0, 1)}
    lay = {k: ExpertLayout(router=(256, 128, 8), rows=(256, 256), width=64, fused=False) for k in a2a}
    with pytest.raises(MoEDisagreement, match=r"the router picks among 8 experts, but 2 experts per rank x EP 2 = 4"):
        read_moe(lay, {k: 512 for k in a2a}, a2a)
