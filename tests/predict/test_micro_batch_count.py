"""Micro-batches per iteration of a predicted target (`lumos/predict/micro_batch_count.py`): the paper's
TP x PP protocol when the base follows it, the base's count when it does not, `--global-batch` over both.

Bases (emulated, tiny, 2x2x2): `tiny_plan` follows the protocol (4 = 2 x 2 micro-batches); `off_rule`
was emulated with `model.num_microbatches=3`, a count of its own, like the H200 recordings (2 at 1 x 1).
"""

import json

import pytest

from lumos.cli import main as lumos_main
from lumos.trace import load_run
from lumos.predict.micro_batch_count import target_micro_batches
from lumos.predict.whatif import base_plan, transform


@pytest.fixture(scope="module")
def off_rule(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny_3mb")
    assert lumos_main(["emulate", "model=tiny", "parallel.tp=2", "parallel.pp=2", "parallel.dp=2",
                       "model.num_microbatches=3", "seed=0", f"out={out}", "progress=false", "--quiet"]) == 0
    return base_plan(load_run(out))


def test_pp_x2_on_a_protocol_base_runs_tp_x_pp(tiny_plan):
    assert tiny_plan.microbatches == 4
    out = transform(tiny_plan, pp=4)
    assert (out.pp, out.microbatches) == (4, 8)
    assert out.notes == ["micro-batches per iteration = TP x PP = 2 x 4 = 8 "
                         "(the paper's protocol; the base ran TP x PP = 4)"]
    # every stage runs 8 micro-batches: one forward and one backward layer block each (one layer per stage)
    assert sorted({b.mb for b in out.st.blocks if b.rank == out.ranks[3] and b.kind == "layer"}) == list(range(8))


def test_dp_change_keeps_each_replicas_work(tiny_plan):
    before = [(b.rank, b.kind, b.mb) for b in tiny_plan.st.blocks]
    out = transform(tiny_plan, dp=4)
    assert (out.dp, out.ranks, out.microbatches) == (4, [0, 8], 4)
    # the base is left as it was (its stage-1 blocks stay on rank 4), for the next target built from it
    assert [(b.rank, b.kind, b.mb) for b in tiny_plan.st.blocks] == before
    assert tiny_plan.notes == []


def test_keep_rule_keeps_the_base_count(tiny_plan):
    out = transform(tiny_plan, pp=4, microbatch_rule="keep")
    assert out.microbatches == 4
    assert out.notes == ["micro-batches per iteration kept at the base's 4 (--microbatch-rule keep; "
                         "the global batch grows with dp)"]


def test_base_off_the_rule_keeps_its_count_in_auto(off_rule):
    assert (off_rule.tp, off_rule.pp, off_rule.microbatches) == (2, 2, 3)
    out = transform(off_rule, pp=4)
    assert out.microbatches == 3
    assert out.notes == ["micro-batches per iteration kept at the base's 3 (the base does not follow the "
                         "paper's TP x PP rule: it ran 3 at TP x PP = 4; the global batch grows with dp)"]


def test_tp_x_pp_rule_can_be_forced_on_a_base_off_the_rule(off_rule):
    out = transform(off_rule, pp=4, microbatch_rule="tp_x_pp")
    assert out.microbatches == 8
    assert out.notes == ["micro-batches per iteration = TP x PP = 2 x 4 = 8 "
                         "(--microbatch-rule tp_x_pp; the base ran 3 at TP x PP = 4)"]


def test_global_batch_wins_over_the_rule():
    m, note = target_micro_batches(4, 2, 2, tp=2, pp=8, dp=4, micro_batch=2, global_batch=64)
    assert (m, note) == (8, "micro-batches per iteration = global batch 64 / (dp 4 x micro-batch 2) = 8")
    with pytest.raises(ValueError, match="--global-batch sets the micro-batch count; --microbatch-rule keep"):
        target_micro_batches(4, 2, 2, tp=2, pp=8, dp=4, micro_batch=1, global_batch=64, rule="keep")
    with pytest.raises(ValueError, match="not a multiple of dp\\*micro_batch = 8"):
        target_micro_batches(4, 2, 2, tp=2, pp=8, dp=4, micro_batch=2, global_batch=60)


def test_unknown_rule_is_named():
    with pytest.raises(ValueError, match="one of auto, tp_x_pp, keep, got 'pp'"):
        target_micro_batches(4, 2, 2, tp=2, pp=4, dp=2, micro_batch=1, rule="pp")


def test_cli_flag(tiny_runs, capsys):
    assert lumos_main(["predict", str(tiny_runs["base"]), "--pp", "4", "--microbatch-rule", "keep",
                       "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["target"]["pp"], doc["microbatches"], doc["base_config"]["microbatches"]) == (4, 4, 4)
    assert "--microbatch-rule keep" in doc["notes"][-1]
    assert lumos_main(["predict", str(tiny_runs["base"]), "--pp", "4", "--global-batch", "16",
                       "--microbatch-rule", "tp_x_pp"]) == 2
    assert "--microbatch-rule tp_x_pp cannot also set it" in capsys.readouterr().err
