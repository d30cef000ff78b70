"""Llama-style layers read right: GQA, SwiGLU, RMSNorm, RoPE; separate or fused projections.

Traces MEASURED ON THIS MACHINE: the bundled Llama-style model (lumos/capture/llama.py) captured on
the CPU, 2 layers, hidden 64, FFN 176, 4 query heads of 16, sequence 16, micro-batch 3.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lumos.model.layer_shape import ShapeDisagreement, read_layer
from lumos.model.structure import ModelShape
from lumos.predict.whatif import base_plan, structure_report, transform
from lumos.trace import load_run

VARIANTS = {
    "separate GQA": dict(kv_heads=2),
    "fused GQA": dict(kv_heads=2, fused_qkv=True, fused_gate_up=True),
    "fused QKV, separate gate/up": dict(kv_heads=2, fused_qkv=True),
    "separate MHA": dict(kv_heads=4),
    "one KV head": dict(kv_heads=1, fused_gate_up=True),
}


@pytest.fixture(scope="module")
def captures(tmp_path_factory):
    pytest.importorskip("torch")
    from lumos.capture.llama import LlamaConfig, run_llama

    root = tmp_path_factory.mktemp("llama")
    return {name: run_llama(LlamaConfig(**kw), out_dir=root / name.replace(" ", "_").replace("/", "_"),
                            microbatches=2).parent for name, kw in VARIANTS.items()}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_the_shape_of_every_variant(captures, name):
    kv = VARIANTS[name]["kv_heads"]
    plan = base_plan(load_run(captures[name]))
    assert plan.shape == ModelShape(hidden=64, ffn=176, seq=16, micro_batch=3, vocab=256, heads=4, tp=1,
                                    kv_heads=0 if kv == 4 else kv, head_dim=0, gated=True)
    assert plan.shape.norm == "rmsnorm" and (plan.tp, plan.pp, plan.dp) == (1, 1, 1)
    ev = plan.shape.evidence
    assert ev["TP"] == "hidden 64 / the rank's query width 64" and ev["hidden"] == "the rmsnorm weight"
    assert ev["MLP"] == ("SwiGLU (gate and up fused)" if VARIANTS[name].get("fused_gate_up")
                         else "SwiGLU (gate and up separate)")


def test_structure_report_says_the_shape_and_what_is_not_changed(captures):
    rep = structure_report(load_run(captures["fused GQA"]))
    assert rep["tp"] == 1 and rep["shape"]["kv_heads"] == 2 and rep["shape"]["mlp"] == "swiglu"
    assert rep["shape"]["evidence"]["KV heads"] == "the QKV GEMMs' widths (fused: 128) less the queries"
    assert rep["what_if"] == "every transform"


def test_width_of_a_llama_base_keeps_its_kv_heads(captures):
    plan = base_plan(load_run(captures["separate GQA"]))
    out = transform(plan, hidden=128, ffn=352)
    assert (out.shape.heads, out.shape.kv, out.shape.dhead, out.shape.gated) == (8, 2, 16, True)
    assert transform(plan, kv_heads=4).shape.kv == 4
    with pytest.raises(ValueError, match="3 KV heads must divide the 4 query heads"):
        transform(plan, kv_heads=3)
    assert transform(plan, layers=4).layers == 4


def test_gpt_layers_keep_their_reading():
    # Megatron's GPT at TP 2 (fused QKV of 3h/2, projection h/2 -> h, FC1 h -> f/2, FC2 f/2 -> h)
    gemms = [(2048, 1024, 1536), (2048, 512, 1024), (2048, 1024, 2048), (2048, 2048, 1024)]
    got = read_layer(gemms, 1, (1, 2048, 8, 64), 1024, {2}, {"gelu"})
    assert (got.tp, got.heads_local, got.head_dim, got.kv_heads_local, got.ffn_local, got.gated) == (2, 8, 64, 8, 2048,
                                                                                                     False)


def test_disagreeing_evidence_is_refused():
    gemms = [(2048, 1024, 3072), (2048, 1024, 1024), (2048, 1024, 4096), (2048, 4096, 1024)]
    with pytest.raises(ShapeDisagreement, match=r"the evidence on TP disagrees in layer 0: the head counts say TP 1 "
                                                r"\(hidden 1024 over the rank's 1024-wide queries\), its TP "
                                                r"collectives' groups hold 4 ranks"):
        read_layer(gemms, 1, (1, 2048, 16, 64), 1024, {4}, {"gelu"}, where="layer 0")


def test_capture_llama_command(tmp_path, capsys):
    pytest.importorskip("torch")
    from lumos.cli import main as lumos_main

    assert lumos_main(["capture", "llama", "--layers", "2", "--hidden", "96", "--heads", "6", "--kv-heads", "3",
                       "--ffn", "160", "--fused-qkv", "--steps", "2", "--out", str(tmp_path / "run")]) == 0
    sh = base_plan(load_run(tmp_path / "run")).shape
    assert (sh.hidden, sh.ffn, sh.heads, sh.kv, sh.gated, sh.tp) == (96, 160, 6, 3, True, 1)
    assert lumos_main(["capture", "llama", "--kv-heads", "3", "--out", str(tmp_path / "bad")]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "lumos capture: error: heads 4 must divide hidden 64, kv_heads 3 must divide heads")


SHIPPED = Path(__file__).resolve().parents[2] / "resources" / "traces" / "llama_cpu"
SHIPPED_SHAPES = {"base": (128, 352, 4, 2, 2), "hidden_256": (256, 704, 8, 2, 2), "kv_heads_1": (128, 352, 4, 1, 2),
                  "kv_heads_4": (128, 352, 4, 4, 2), "layers_4": (128, 352, 4, 2, 4)}


@pytest.mark.parametrize("run", sorted(p.name for p in SHIPPED.iterdir() if p.is_dir()))
def test_every_shipped_llama_capture_reads_exactly(run):
    # MEASURED ON THIS MACHINE (resources/traces/llama_cpu/PROVENANCE.md): hidden, FFN, query heads, KV heads,
    # layers, and TP 1 read as 1
    hidden, ffn, heads, kv, layers = SHIPPED_SHAPES[run.rsplit("_r", 1)[0]]
    rep = structure_report(load_run(SHIPPED / run))
    sh = rep["shape"]
    assert (sh["hidden"], sh["ffn"], sh["heads"], sh["kv_heads"], rep["layers"], rep["tp"]) == (hidden, ffn, heads, kv,
                                                                                               layers, 1)
    assert (sh["head_dim"], sh["mlp"], sh["norm"], sh["seq"], sh["micro_batch"], sh["vocab"]) == (32, "swiglu",
                                                                                                 "rmsnorm", 64, 4, 1024)


def test_a_wider_llama_from_the_shipped_cpu_captures():
    # MEASURED ON THIS MACHINE: hidden 128 -> 256 (8 heads, FFN 704, 2 KV heads) from either base recording,
    # against the mean of both hidden-256 recordings' six steps (63.24 ms): +7.7% / +10.0% when recorded
    from lumos.predict.prediction import measured_steps, predict

    measured = np.mean([s["iteration_us"] for r in ("hidden_256_r0", "hidden_256_r1")
                        for s in measured_steps(SHIPPED / r)])
    for base in ("base_r0", "base_r1"):
        doc = predict(load_run(SHIPPED / base), {"hidden": 256, "ffn": 704})
        assert abs(doc["predicted"]["iteration_us"] / measured - 1) < 0.12
