"""A Llama base emulated with its element-wise kernels fused into the GEMMs (`emulator.granularity=coarse`:
no SiLU, no RMSNorm op) reads as SwiGLU from the GEMM shapes and predicts; one emulated at `stage` (a
stage's layers one block per micro-batch) is refused with the way out (EMULATED)."""

from __future__ import annotations

import pytest

from lumos.cli import main as lumos_main
from lumos.emulator import emulate, write_result
from lumos.predict.whatif import base_plan
from lumos.trace import load_run

LLAMA = ["model=llama3_8b", "model.num_layers=4", "model.seq_length=1024", "parallel.tp=2", "parallel.pp=1",
         "parallel.dp=2"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("coarse_llama")
    out = {}
    for level in ("coarse", "stage"):
        write_result(emulate([*LLAMA, f"emulator.granularity={level}"], progress=False), root / level)
        out[level] = root / level
    return out


def test_coarse_llama_reads_swiglu_from_the_gemm_shapes(runs):
    shape = base_plan(load_run(runs["coarse"])).shape
    assert (shape.hidden, shape.ffn, shape.heads, shape.kv_heads, shape.tp, shape.gated) == (4096, 14336, 32, 8, 2, True)
    assert (shape.norm, shape.seq, shape.vocab) == ("", 1024, 128256)      # no norm op: fused into the GEMMs
    assert shape.evidence["MLP"] == ("SwiGLU (gate and up fused): no SiLU op in the layer (fused into its GEMMs), "
                                     "read from the GEMMs, FC1 twice as wide as the down projection's input")


def test_coarse_llama_base_predicts_a_dp_change(runs, capsys):
    assert lumos_main(["predict", str(runs["coarse"]), "--dp", "4"]) == 0
    assert "-> tp2 pp1 dp4 layers 4 hidden 4096 ffn 14336" in capsys.readouterr().out


def test_stage_granularity_base_is_refused_with_the_way_out(runs, capsys):
    assert lumos_main(["predict", str(runs["stage"]), "--dp", "4"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"lumos predict: error: {runs['stage'] / 'rank0.json.gz'}: emulated at "
                          "emulator.granularity=stage (each stage's layers one block per micro-batch)")
    assert "emulate the base with emulator.granularity=fine or coarse" in err
