"""A base emulated with vTrain's training setup (EMULATED): full activation recomputation, whose
`layer_{L}/recompute/mb{i}` ranges sit inside the layer's backward, and unfused attention, whose
score bmms, softmax and dropout fold batch and heads into one leading dim ([b x heads, s, s]).

Before: the recomputed forwards became blocks of their own (classified as DP all-reduces, so a
micro-batch change dropped them), the heads were guessed as hidden / 128, and a micro-batch
change left the attention-score kernels at the base's size.
"""

from __future__ import annotations

import pytest

from lumos.predict.options import PredictOptions
from lumos.predict.prediction import predict
from lumos.cli import main as lumos_main
from lumos.emulator.actuals import emulate_actuals
from lumos.graph.run_graph import build_run_graph
from lumos.trace import load_run
from lumos.transform.shapes import rewrite_batch
from lumos.model.structure import find_structure
from lumos.predict.whatif import trace_sms

VTRAIN = ["cluster=a100_vtrain", "training=vtrain", "model=tiny", "model.num_heads=4", "model.head_dim=16",
          "model.hidden=64", "model.ffn_hidden=256", "model.seq_length=128"]


def _overrides(tp, pp, dp, mbs, gbs):
    return VTRAIN + [f"model.micro_batch_size={mbs}", f"model.global_batch_size={gbs}", f"parallel.tp={tp}",
                     f"parallel.pp={pp}", f"parallel.dp={dp}"]


@pytest.fixture(scope="module")
def vtrain_base(tmp_path_factory):
    out = tmp_path_factory.mktemp("vtrain") / "base"
    assert lumos_main(["emulate", *_overrides(2, 2, 2, 2, 16), "seed=0", f"out={out}", "progress=false",
                       "--quiet"]) == 0
    return load_run(out)


def test_recompute_is_part_of_the_layer_backward(vtrain_base):
    st = find_structure(build_run_graph(vtrain_base), vtrain_base)
    kinds = {b.kind for b in st.blocks}
    assert "dp" in kinds    # the one gradient all-reduce after the backward (dp_allreduce: after_backward)
    per_rank = {r: sum(b.kind == "dp" for b in st.blocks if b.rank == r) for r in st.stage_of_rank}
    assert set(per_rank.values()) == {1}
    assert (st.shape.heads, st.shape.tp, st.shape.micro_batch) == (4, 2, 2)   # from the score bmm


def test_a100_sms_come_from_the_trace(vtrain_base):
    assert trace_sms(vtrain_base, {"num_sms": 132}) == 108


def test_folded_attention_dims_scale_with_the_micro_batch():
    # b = 2, 4 heads per rank, s = 128, head dim 16: scores [8, 128, 128]
    assert rewrite_batch("aten::bmm", ((8, 128, 16), (8, 16, 128)), 2, 256, 2.0, frozenset(), heads_per_rank=4) == \
        ((16, 128, 16), (16, 16, 128))
    assert rewrite_batch("aten::_softmax", ((8, 128, 128), (), ()), 2, 256, 2.0, frozenset(), heads_per_rank=4) == \
        ((16, 128, 128), (), ())
    assert rewrite_batch("aten::_softmax", ((8, 128, 128), (), ()), 2, 256, 2.0, frozenset()) is None


@pytest.mark.parametrize("target", [(2, 2, 2, 2, 8), (2, 2, 2, 4, 32), (2, 1, 2, 2, 16)])
def test_micro_batch_and_layout_changes_match_the_emulated_actual(vtrain_base, target):
    tp, pp, dp, mbs, gbs = target
    actual = emulate_actuals(_overrides(*target), [0])[0]["iteration_us"]
    got = predict(vtrain_base, {"tp": tp, "pp": pp, "dp": dp}, PredictOptions(global_batch=gbs, micro_batch=mbs))
    err = 100 * (got["predicted"]["iteration_us"] / actual - 1)
    assert abs(err) < 6.0, err
