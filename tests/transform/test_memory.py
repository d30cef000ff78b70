"""The memory model's formulas (Korthikanti et al. 2022; Megatron-LM bytes per parameter; 1F1B)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lumos.transform.memory import (GIB, MemorySettings, activation_bytes_per_layer, param_bytes,
                                    plan_memory)
from lumos.transform.structure import ModelShape

S, B, H, A = 2048, 1, 12288, 96     # GPT-3 175B layer, as in Korthikanti et al.


@pytest.mark.parametrize("recompute,sp,flash,t,expect", [
    ("none", False, False, 8, S * B * H * (10 + 24 / 8 + 5 * A * S / (H * 8))),
    ("none", True, False, 8, S * B * H * (34 + 5 * A * S / H) / 8),
    ("selective", False, False, 8, S * B * H * (10 + 24 / 8)),
    ("selective", True, False, 8, S * B * H * 34 / 8),
    ("none", False, True, 8, S * B * H * (10 + 24 / 8)),       # fused attention stores no scores
    ("full", False, False, 8, 2 * S * B * H),
    ("none", False, False, 1, S * B * H * (34 + 5 * A * S / H)),
])
def test_activations_per_layer_follow_table_2(recompute, sp, flash, t, expect):
    m = MemorySettings(recompute=recompute, sequence_parallel=sp, flash_attention=flash)
    assert activation_bytes_per_layer(S, B, H, A, t, m) == pytest.approx(expect)


def test_bytes_per_parameter_with_and_without_the_distributed_optimizer():
    assert param_bytes(1e9, 8, MemorySettings(bytes_per_param=18)) == 18e9
    assert param_bytes(1e9, 8, MemorySettings(bytes_per_param=18, distributed_optimizer=True)) == \
        pytest.approx(1e9 * (6 + 12 / 8))


def test_first_stage_holds_pp_micro_batches_in_flight():
    shape = ModelShape(hidden=4096, ffn=16384, seq=2048, micro_batch=1, vocab=51200, heads=32, tp=2)
    m = MemorySettings(workspace_gib=0.0)
    out = plan_memory(shape, [8, 8, 8, 8], pp=4, dp=2, microbatches=8, m=m)
    assert [s["inflight_microbatches"] for s in out["per_stage"]] == [4, 3, 2, 1]
    act = activation_bytes_per_layer(2048, 1, 4096, 32, 2, m) * 8 / GIB
    assert out["per_stage"][0]["activations_gib"] == pytest.approx(4 * act, abs=2e-3)
    assert out["per_stage"][3]["logits_gib"] == pytest.approx(4 * 2048 * 51200 / 2 / GIB, abs=1e-3)
    assert out["memory_gib_per_gpu"] == max(s["total_gib"] for s in out["per_stage"])
    small = plan_memory(shape, [8, 8, 8, 8], 4, 2, 8, MemorySettings(gpu_memory_gib=1.0))
    assert small["fits"] is False


def test_h200_base_against_its_measured_peak():
    """Measured on hardware: torch.cuda.max_memory_allocated of the first H200 recording (a fresh
    process), 10.95 GiB; the model for a plain-bf16 AdamW GPT (8 bytes per parameter, no recompute,
    fused attention, one micro-batch in flight), without the workspace constant: within 3%."""
    from lumos.trace import load_run
    from lumos.transform.whatif import base_plan, memory_of

    root = Path(__file__).resolve().parents[2] / "resources" / "traces" / "h200"
    measured = next(r["max_memory_gib"] for r in json.loads((root / "summary.json").read_text())["runs"]
                    if r["config"] == "base" and r["rep"] == 0)
    assert measured == 10.95
    plan = base_plan(load_run(root / "base_r0"))
    mem = memory_of(plan, {"bytes_per_param": 8.0, "recompute": "none", "workspace_gib": 0.0})
    assert mem["memory_gib_per_gpu"] == pytest.approx(measured, rel=0.03)
