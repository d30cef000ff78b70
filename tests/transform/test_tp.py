"""TP changes on the emulated `tiny` GPT (EMULATED; TP2 PP2 DP2, hidden 512, FFN 2048, 4 heads,
vocabulary 8192): exact re-sharding, collectives, the GEMM wave model, and a prediction against the
emulated TP 4 run."""

from __future__ import annotations

import numpy as np
import pytest

from lumos.predict.options import PredictOptions
from lumos.predict.prediction import predict
from lumos.trace.run import read_manifest
from lumos.cli import main as lumos_main
from lumos.graph.model import TaskKind
from lumos.trace import load_run
from lumos.transform.plan import stage_ranks
from lumos.durations import CollectiveSpec, ComputeSpec
from lumos.durations.compute import ComputeModel, gemm_tile, gemm_waves
from lumos.transform.tp import change_tp, rewrite_tp
from lumos.predict.whatif import transform


def _pairs(base, out, op):
    st0, st1 = base.st, out.st
    return {(st0.op_dims[t], st1.op_dims[t]) for t in range(base.graph.n_tasks)
            if str(st0.op_name[t]) == op and base.graph.kind[t] == TaskKind.GPU and st0.op_dims[t] is not None}


def test_tp4_reshards_gemms_heads_and_shard_wide_work(tiny_plan):
    out = change_tp(tiny_plan, 4)
    assert (out.tp, out.shape.tp, out.st.tp) == (4, 4, 4)
    # column-parallel QKV / FC1 (output 3h/t, f/t), row-parallel proj / FC2 (input h/t, f/t), their
    # gradients, the vocabulary-parallel head: the shard halves, the token count and h stay
    assert _pairs(tiny_plan, out, "aten::mm") == {
        (((512, 512), (512, 768)), ((512, 512), (512, 384))),      # QKV
        (((512, 256), (256, 512)), ((512, 128), (128, 512))),      # proj
        (((512, 512), (512, 1024)), ((512, 512), (512, 512))),     # FC1, FC2 dgrad
        (((512, 1024), (1024, 512)), ((512, 512), (512, 512))),    # FC2, FC1 dgrad
        (((1024, 512), (512, 512)), ((512, 512), (512, 512))),     # FC1 wgrad
        (((512, 512), (512, 256)), ((512, 512), (512, 128))),      # proj dgrad and wgrad
        (((512, 768), (768, 512)), ((512, 384), (384, 512))),      # QKV dgrad
        (((768, 512), (512, 512)), ((384, 512), (512, 512))),      # QKV wgrad
        (((512, 512), (512, 4096)), ((512, 512), (512, 2048))),    # head
        (((512, 4096), (4096, 512)), ((512, 2048), (2048, 512))),
        (((4096, 512), (512, 512)), ((2048, 512), (512, 512)))}
    assert _pairs(tiny_plan, out, "aten::_flash_attention_forward") == {
        (((1, 512, 2, 128),) * 3, ((1, 512, 1, 128),) * 3)}     # heads per rank 2 -> 1
    assert _pairs(tiny_plan, out, "aten::gelu") == {(((512, 1, 1024),), ((512, 1, 512),))}
    assert _pairs(tiny_plan, out, "aten::copy_") >= {(((512, 1, 768),), ((512, 1, 384),))}
    # replicated without sequence parallelism: LayerNorm and the residual adds keep their size
    assert _pairs(tiny_plan, out, "aten::layer_norm") == {(((512, 1, 512), (512,), (512,)),) * 2}
    assert _pairs(tiny_plan, out, "aten::add") == {(((512, 1, 512), (512, 1, 512)),) * 2}
    # every re-shaped kernel re-timed by the compute supplier from its old and new dims
    g0, g1, st0, st1 = tiny_plan.graph, out.graph, tiny_plan.st, out.st
    for t in range(g0.n_tasks):
        if g0.kind[t] == TaskKind.GPU and st0.coll[t] is None and st0.op_dims[t] != st1.op_dims[t]:
            op = str(st0.op_name[t])
            assert g1.dur[t] == tiny_plan.compute.retime(g0.dur[t], ComputeSpec(op, st0.op_dims[t]),
                                                         ComputeSpec(op, st1.op_dims[t]), g0.name[t])


def test_tp_collectives_regrouped_and_gone_at_tp1(tiny_plan):
    tp = np.flatnonzero(tiny_plan.role == "tp")
    assert len(tp) == 82
    for degree, host in ((4, "intra_host"), (16, "inter_host")):
        out = change_tp(tiny_plan, degree) if degree <= 4 else None
        if out is None:   # tiny has 4 heads: TP 16 cannot split it; check the supplier's level instead
            assert tiny_plan.collectives.time_us(CollectiveSpec("allreduce", 524288.0, tuple(range(16)))) > \
                tiny_plan.collectives.time_us(CollectiveSpec("allreduce", 524288.0, tuple(range(8))))
            continue
        for t in tp:
            old = CollectiveSpec(tiny_plan.st.coll[t], tiny_plan.st.nbytes[t], tiny_plan.st.group[t])
            new = CollectiveSpec(out.st.coll[t], out.st.nbytes[t], out.st.group[t])
            assert len(new.group) == degree and new.nbytes == old.nbytes
            assert out.graph.dur[t] == tiny_plan.collectives.retime(tiny_plan.graph.dur[t], old, new)
    one = change_tp(tiny_plan, 1)
    assert (one.graph.dur[tp] == 0.0).all()
    with pytest.raises(ValueError, match="TP 3 does not divide the model's heads 4"):
        change_tp(tiny_plan, 3)


def test_transform_rebuilds_the_pipeline_at_the_new_tp(tiny_plan):
    out = transform(tiny_plan, tp=4)
    assert out.ranks == stage_ranks(2, 4, 2) == [0, 8]
    assert out.microbatches == 8   # the paper's protocol: TP x PP
    tp = np.flatnonzero(out.role == "tp")
    assert len(tp) > 0 and {len(out.st.group[t]) for t in tp} == {4}
    dp = np.flatnonzero(out.role == "dp")
    assert {out.st.group[t] for t in dp if out.graph.rank[t] == 0} == {(0, 4)}   # stride TP


def test_rewrite_tp_sequence_parallel_and_unfused_attention():
    shards = {384: 192, 512: 256, 128: 64}   # 3h/t, f/t, h/t at h 256, f 1024, t 2 -> 4
    args = dict(shards=shards, hidden=256, tokens=512, head_dim=64, heads=2, new_heads=1, batch=1, seq=512,
                tp=(2, 4))
    # sequence parallel: LayerNorm on [s/t, b, h]
    assert rewrite_tp("aten::layer_norm", ((256, 1, 256), (256,), (256,)), sp=True, **args) == \
        ((128, 1, 256), (256,), (256,))
    assert rewrite_tp("aten::layer_norm", ((512, 1, 256), (256,), (256,)), sp=False, **args) is None
    # unfused attention: b x heads/t score matrices
    assert rewrite_tp("aten::baddbmm", ((2, 512, 64), (2, 64, 512)), sp=False, **args) == \
        ((1, 512, 64), (1, 64, 512))
    assert rewrite_tp("aten::_softmax", ((2, 512, 512),), sp=False, **args) == ((1, 512, 512),)


def test_gemm_wave_model():
    assert gemm_tile("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1") == (128, 256)
    assert gemm_tile("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NTN") == (256, 128)
    assert gemm_tile("ampere_sgemm_128x64_tn") == (128, 64)
    assert gemm_tile("void at::native::vectorized_elementwise_kernel<4>") is None
    assert gemm_waves((2048, 6144, 9216), (128, 256), 132) == 5      # 16 x 36 = 576 tiles
    assert gemm_waves((2048, 6144, 2304), (128, 256), 132) == 2      # 16 x 9 = 144 tiles
    m = ComputeModel(sms=132)
    name = "sm90_xmma_gemm_tilesize128x256x64"
    qkv2 = ComputeSpec("aten::mm", ((2048, 6144), (6144, 9216)))
    qkv8 = ComputeSpec("aten::mm", ((2048, 6144), (6144, 2304)))
    assert m.retime(500.0, qkv2, qkv8, name) == pytest.approx(500.0 * 2 / 5)   # FLOPs alone: 500 / 4
    assert ComputeModel().retime(500.0, qkv2, qkv8, name) == pytest.approx(125.0)
    assert m.retime(500.0, qkv2, qkv8, "a kernel without a tile") == pytest.approx(125.0)


def test_predict_tp4_against_the_emulated_tp4_run(tiny_runs):
    doc = predict(load_run(tiny_runs["base"]), {"tp": 4}, actual_tables=load_run(tiny_runs["tp4"]),
                  actual_manifest=read_manifest(tiny_runs["tp4"]))
    assert doc["target"]["tp"] == 4
    assert doc["microbatches"] == 8 == read_manifest(tiny_runs["tp4"])["num_microbatches"]
    assert abs(doc["error_pct"]) < 10.0
    assert doc["suppliers"]["gemm"] == {"model": "waves", "num_sms": 132}
    # tiny is host-bound: its GPU kernels are off the critical path, so the GEMM model does not move it
    flops = predict(load_run(tiny_runs["base"]), {"tp": 4}, PredictOptions(gemm_efficiency="flops"))
    assert flops["suppliers"]["gemm"]["model"] == "flops"


def test_cli_tp_errors(tiny_runs, capsys):
    assert lumos_main(["predict", str(tiny_runs["base"]), "--tp", "3"]) == 2
    assert "TP 3 does not divide the model's heads 4" in capsys.readouterr().err
