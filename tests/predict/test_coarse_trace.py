"""The predictor on traces whose element-wise kernels are fused into their GEMM / attention kernels.

`emulator.granularity=coarse` (what `granularity=auto` picks for a large run, e.g. the 175B vTrain
base at 8x8x8 with 96 micro-batches) drops the CPU ops of the layer norms, copies, GeLU and
bias-dropout-add: their time is in the neighbouring GEMM's kernel. A coarse layer forward holds
the four GEMMs (QKV, projection, FC1, FC2) and attention, nothing else; the shape reader must get
the fine trace's shape from those (EMULATED runs, seed 0).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from lumos.predict.options import PredictOptions
from lumos.predict.prediction import predict
from lumos.cli import main as lumos_main
from lumos.graph.run_graph import build_run_graph
from lumos.trace import load_run
from lumos.model.structure import (EMBEDDING_OPS, LAYER_NORM_OPS, Block, ModelShape, ShapeError, find_structure,
                                       infer_shape)

# tiny at micro-batch 2: T = b*s = 1024 tokens, so sequence and micro-batch cannot be read off T alone
TINY_MB2 = ModelShape(hidden=512, ffn=2048, seq=512, micro_batch=2, vocab=8192, heads=4, tp=2)


def _emulate(out, *overrides):
    assert lumos_main(["emulate", *overrides, "seed=0", f"out={out}", "progress=false", "--quiet"]) == 0
    return out


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """tiny 2x2x2, micro-batch 2, flash and unfused attention, fine and coarse."""
    root = tmp_path_factory.mktemp("coarse_tiny")
    return {(att, g): _emulate(root / f"{att}_{g}", "model=tiny", "model.micro_batch_size=2",
                               f"training.attention={att}", "parallel.tp=2", "parallel.pp=2", "parallel.dp=2",
                               f"emulator.granularity={g}")
            for att in ("flash", "unfused") for g in ("fine", "coarse")}


@pytest.fixture(scope="module")
def gpt15(tmp_path_factory):
    """GPT-3 15B shapes with 4 layers at 2x2x2, fine and coarse: GPU-bound, unlike tiny."""
    root = tmp_path_factory.mktemp("coarse_15b")
    return {g: _emulate(root / g, "model=gpt3_15b", "model.num_layers=4", "parallel.tp=2", "parallel.pp=2",
                        "parallel.dp=2", f"emulator.granularity={g}")
            for g in ("fine", "coarse")}


def _structure(path):
    tables = load_run(path)
    return find_structure(build_run_graph(tables), tables)


def _layer_ops(st) -> list[str]:
    fwd = next(b for b in st.blocks if b.kind == "layer" and b.phase == "forward")
    return [str(st.op_name[t]) for t in fwd.tasks if st.op_name[t] is not None]


@pytest.mark.parametrize("attention", ["flash", "unfused"])
def test_coarse_trace_gives_the_fine_traces_shape(tiny, attention):
    fine, coarse = _structure(tiny[attention, "fine"]), _structure(tiny[attention, "coarse"])
    # the premise: the coarse layer has no layer norm (nor any other element-wise op) left to read
    assert set(LAYER_NORM_OPS) & set(_layer_ops(fine))
    assert not set(LAYER_NORM_OPS) & set(_layer_ops(coarse))
    assert "aten::gelu" in _layer_ops(fine) and "aten::gelu" not in _layer_ops(coarse)
    # the embedding block has no GEMM to fold into, so its lookup stays (the next test reads the vocabulary
    # from the head's logits GEMM where a fused trace has no lookup either)
    assert "aten::embedding" in {str(n) for n in coarse.op_name}
    assert fine.shape == coarse.shape == TINY_MB2
    assert (coarse.tp, coarse.pp, coarse.dp, coarse.layers, coarse.microbatches) == (2, 2, 2, 4, 4)


def test_gemms_and_attention_alone_give_the_layer_norms_shape(tiny):
    """On the fine trace, hiding the layer-norm and embedding ops (as a fused trace would) changes
    nothing: the GEMMs and attention say the same shape, the head's logits GEMM the same vocabulary."""
    for attention in ("flash", "unfused"):
        st = _structure(tiny[attention, "fine"])
        hidden = np.array([None if n in LAYER_NORM_OPS + EMBEDDING_OPS else n for n in st.op_name], dtype=object)
        assert infer_shape(st.blocks, hidden, st.op_dims) == infer_shape(st.blocks, st.op_name, st.op_dims) \
            == TINY_MB2


def _layer(ops: list[tuple]) -> tuple:
    n = len(ops)
    block = Block(kind="layer", phase="forward", layer=3, mb=0, rank=4, tasks=np.arange(n))
    names = np.array([o[0] for o in ops], dtype=object)
    dims = np.empty(n, dtype=object)
    dims[:] = [o[1] for o in ops]
    return [block], names, dims


GEMMS = [("aten::mm", ((1024, 512), (512, 768))), ("aten::mm", ((1024, 256), (256, 512))),
         ("aten::mm", ((1024, 512), (512, 1024))), ("aten::mm", ((1024, 1024), (1024, 512)))]


def test_a_layer_with_gemms_only_is_refused_naming_the_file():
    blocks, names, dims = _layer(GEMMS)
    with pytest.raises(ShapeError) as err:
        infer_shape(blocks, names, dims, paths={4: "base/rank4.json.gz"})
    msg = str(err.value)
    assert "layer 3 forward, micro-batch 0 of base/rank4.json.gz" in msg
    assert "no attention op whose batch x sequence is the QKV GEMM's 1024 tokens" in msg
    assert "layer norm: no, attention: no, 4 GEMMs" in msg
    # with flash attention's (b, s, heads/t, d) the same GEMMs are a shape
    blocks, names, dims = _layer(GEMMS[:1] + [("aten::_flash_attention_forward", ((2, 512, 2, 128),) * 3)]
                                 + GEMMS[1:])
    assert infer_shape(blocks, names, dims) == ModelShape(hidden=512, ffn=2048, seq=512, micro_batch=2, vocab=0,
                                                          heads=4, tp=2)


def test_a_layer_with_too_few_gemms_is_refused():
    blocks, names, dims = _layer(GEMMS[:3])
    with pytest.raises(ShapeError, match=r"needs 4 GEMMs .* found 3 in layer 3 forward, micro-batch 0 of rank 4"):
        infer_shape(blocks, names, dims)


def _relative(path, target: dict, **kw) -> float:
    """Predicted iteration over the base's own emulated iteration."""
    base = json.loads((path / "manifest.json").read_text())["iteration_us"]
    return predict(load_run(path), target, PredictOptions(**kw))["predicted"]["iteration_us"] / base


def test_a_coarse_base_predicts_what_the_fine_base_does(gpt15):
    """Each base predicts relative to its own iteration (the two emulations differ by 1.6%: the
    fine one runs 8x more host ops). Measured (seed 0), predicted / base iteration, fine vs coarse:
    PP 2 -> 4 1.672 vs 1.664, DP 2 -> 4 1.0105 vs 1.0107, micro-batch 1 -> 2 1.349 vs 1.353,
    TP 2 -> 4 1.439 vs 1.404."""
    for target, kw, tol in (({"pp": 4}, {}, 0.01), ({"dp": 4}, {}, 0.01), ({}, {"micro_batch": 2}, 0.01),
                            ({"tp": 4}, {}, 0.04)):
        fine, coarse = _relative(gpt15["fine"], target, **kw), _relative(gpt15["coarse"], target, **kw)
        assert abs(coarse / fine - 1) < tol, (target, kw, fine, coarse)
    # TP: the layer norms and residual adds folded into a GEMM shrink with it, though every TP rank
    # repeats them in full: a coarse base under-predicts a TP increase (-2.4% here)
    assert _relative(gpt15["coarse"], {"tp": 4}) < _relative(gpt15["fine"], {"tp": 4})


def test_search_on_a_coarse_base(gpt15, capsys):
    """Used to stop with 'cannot read the model shape'; now ranks the same layouts as the fine base.

    Relative to each base's own iteration, coarse vs fine, measured: the layouts at the base's TP 2
    -0.9% to +0.5%; at a higher TP the coarse base is lower, by the replicated element-wise work
    that shrank with its GEMM (TP 4: -2.3% to -5.1%, TP 8: -5.2% and -8.6%; TP 1: -0.9% to +1.9%;
    docs/notes/2026-12-02-coarse-traces.md)."""
    rows = {}
    for g in ("fine", "coarse"):
        assert lumos_main(["search", str(gpt15[g]), "--gpus", "8", "--global-batch", "16", "--micro-batch", "1,2",
                           "--format", "json", "--workers", "1"]) == 0
        base = json.loads((gpt15[g] / "manifest.json").read_text())["iteration_us"]
        rows[g] = {(r["tp"], r["pp"], r["dp"], r["micro_batch"]): r["iteration_us"] / base
                   for r in json.loads(capsys.readouterr().out) if r["fits"]}
    assert rows["coarse"].keys() == rows["fine"].keys() and len(rows["fine"]) == 18
    for (tp, pp, dp, mbs), fine in rows["fine"].items():
        coarse = rows["coarse"][tp, pp, dp, mbs]
        if tp == 2:
            assert abs(coarse / fine - 1) < 0.015, ((tp, pp, dp, mbs), fine, coarse)
        elif tp > 2:
            assert 0.85 < coarse / fine < 1, ((tp, pp, dp, mbs), fine, coarse)
