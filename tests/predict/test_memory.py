"""The memory model's formulas (Korthikanti et al. 2022; Megatron-LM bytes per parameter; 1F1B), 4-byte
activations, and the workspace constant calibrated from a trace's [memory] events."""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

import orjson
import pytest

from lumos.predict.memory import (GIB, MemorySettings, activation_bytes_per_layer, param_bytes,
                                    plan_memory, stage_memory)
from lumos.predict.memory_calibration import MeasuredPeak, calibrate, measured_peak, workspace_from_peak
from lumos.model.structure import ModelShape

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


@pytest.mark.parametrize("sharding,gb", [("none", 120.0), ("zero1", 31.4), ("zero2", 16.6), ("zero3", 1.88)])
def test_zero_stages_reproduce_the_zero_paper_figure_1(sharding, gb):
    # Rajbhandari et al. 2020, Fig. 1: 7.5B parameters, 64 data-parallel ranks, mixed-precision Adam
    # (K = 12, 16 bytes per parameter); the paper's GB are 1e9 bytes, rounded as printed
    assert param_bytes(7.5e9, 64, MemorySettings(bytes_per_param=16, sharding=sharding)) / 1e9 == \
        pytest.approx(gb, abs=0.05)


def test_zero3_adds_the_unsharded_layers_in_flight_and_zero1_is_the_distributed_optimizer():
    m = MemorySettings(bytes_per_param=18, sharding="zero3")
    # two gathered layers (computed + prefetched) of 16-bit parameters and one layer's fp32 gradient
    assert param_bytes(1e9, 8, m, layer_params=1e8) == pytest.approx(1e9 * 18 / 8 + 1e8 * (2 * 2 + 4))
    assert param_bytes(1e9, 8, MemorySettings(sharding="zero1")) == \
        param_bytes(1e9, 8, MemorySettings(distributed_optimizer=True))
    # one dtype throughout (lumos capture gpt's bf16 AdamW, 8 bytes): 2 + 2 + 4
    assert param_bytes(1e9, 4, MemorySettings(bytes_per_param=8, sharding="zero2")) == pytest.approx(1e9 * (2 + 6 / 4))
    with pytest.raises(ValueError, match="sharding must be one of none, zero1, zero2, zero3, got 'zero4'"):
        MemorySettings.from_profile({}, sharding="zero4")


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
    from lumos.predict.whatif import base_plan, memory_of

    root = Path(__file__).resolve().parents[2] / "resources" / "traces" / "h200"
    measured = next(r["max_memory_gib"] for r in json.loads((root / "summary.json").read_text())["runs"]
                    if r["config"] == "base" and r["rep"] == 0)
    assert measured == 10.95
    plan = base_plan(load_run(root / "base_r0"))
    mem = memory_of(plan, {"bytes_per_param": 8.0, "recompute": "none", "workspace_gib": 0.0})
    assert mem["memory_gib_per_gpu"] == pytest.approx(measured, rel=0.03)


@pytest.mark.parametrize("recompute,sp,flash,expect_2byte", [
    ("none", False, False, S * B * H * (10 + 24 / 8 + 5 * A * S / (H * 8))),
    ("selective", True, False, S * B * H * 34 / 8),
    ("full", False, False, 2 * S * B * H),
])
def test_four_byte_activations_double_every_term(recompute, sp, flash, expect_2byte):
    m = MemorySettings(recompute=recompute, sequence_parallel=sp, flash_attention=flash, activation_bytes=4.0)
    assert activation_bytes_per_layer(S, B, H, A, 8, m) == pytest.approx(2 * expect_2byte, rel=1e-12)


def test_four_byte_activations_leave_the_logits_and_parameters_alone():
    shape = ModelShape(hidden=256, ffn=1024, seq=256, micro_batch=2, vocab=1024, heads=4, tp=1)
    two = stage_memory(shape, 4, 0, 1, 1, 1, MemorySettings(recompute="none"), ndigits=None)
    four = stage_memory(shape, 4, 0, 1, 1, 1, MemorySettings(recompute="none", activation_bytes=4.0), ndigits=None)
    assert two["activations_gib"] * GIB == 4 * 34 * 256 * 2 * 256    # 4 layers of s b h (10 + 24): 17 MiB
    assert four["activations_gib"] * GIB == 34 << 20
    assert four["logits_gib"] * GIB == two["logits_gib"] * GIB == 4 * 256 * 2 * 1024       # fp32 logits: 2 MiB
    assert four["parameters_gib"] == two["parameters_gib"]
    with pytest.raises(ValueError, match="activation_bytes"):
        MemorySettings.from_profile(None, activation_bytes=0)


def test_workspace_is_what_the_measured_peak_holds_beyond_the_predicted_parts():
    parts = {"parameters_gib": 5.0, "activations_gib": 2.5, "logits_gib": 0.25, "workspace_gib": 1.0}
    assert workspace_from_peak(parts, 9.0) == 1.25          # the profile's 1.0 plays no part
    assert workspace_from_peak(parts, 7.0) == 0.0           # a peak below the prediction: floored


def test_calibration_takes_the_largest_stage_and_names_the_trace():
    shape = ModelShape(hidden=4096, ffn=16384, seq=2048, micro_batch=1, vocab=51200, heads=32, tp=2)
    m = MemorySettings(bytes_per_param=18.0, workspace_gib=1.0)
    pred = [stage_memory(shape, 8, s, 2, 4, 8, m, ndigits=None) for s in (0, 1)]
    nonconst = [p["parameters_gib"] + p["activations_gib"] + p["logits_gib"] for p in pred]
    peak = MeasuredPeak(gib_by_stage={0: nonconst[0] + 0.5, 1: nonconst[1] + 2.0}, shape=shape,
                        layers_per_stage=(8, 8), pp=2, dp=4, microbatches=8, source="base/rank4.json.gz cuda:0")
    out = calibrate(m, peak)
    assert out.workspace_gib == 2.0 and out.workspace_source == "trace: base/rank4.json.gz cuda:0"
    assert out.bytes_per_param == 18.0 and out.recompute == m.recompute
    cpu_only = calibrate(m, MeasuredPeak({}, shape, (8, 8), 2, 4, 8, "base/rank0.json.gz [memory] cpu"))
    assert cpu_only.workspace_gib == 1.0 and cpu_only.workspace_source.startswith("profile (not calibrated")



def test_calibration_reads_the_peak_under_the_sharding_the_base_ran_with():
    # an FSDP FULL_SHARD base (zero3) asked about SHARD_GRAD_OP (zero2): the constant is what the base's peak
    # holds beyond its own zero3 parts, and the target's whole parameters are added on top, not folded in
    shape = ModelShape(hidden=4096, ffn=16384, seq=2048, micro_batch=1, vocab=51200, heads=32, tp=2)
    base = MemorySettings(bytes_per_param=18.0, workspace_gib=1.0, sharding="zero3")
    measured = {s: stage_memory(shape, 8, s, 2, 4, 8, base, ndigits=None)["total_gib"] + 0.75 for s in (0, 1)}
    peak = MeasuredPeak(measured, shape, (8, 8), 2, 4, 8, "base/rank0.json.gz cuda:0", sharding="zero3")
    target = dataclasses.replace(base, sharding="zero2")
    out = calibrate(target, peak)
    assert out.workspace_gib == 1.75 and out.sharding == "zero2"
    # without the base's sharding, zero2's larger parameters (5.135 GiB against zero3's 4.601, both stages)
    # would be taken out of the constant: the target's peak would come out 0.533 GiB too small
    assert calibrate(target, dataclasses.replace(peak, sharding=None)).workspace_gib == 1.217

def _with_memory_events(src: Path, dst: Path, totals: list[int], device_type: int) -> Path:
    """A copy of a real trace as if recorded with profile_memory=True: [memory] events in its first step."""
    doc = orjson.loads(gzip.decompress(src.read_bytes()))
    step = next(e for e in doc["traceEvents"] if str(e.get("name")).startswith("ProfilerStep#"))
    doc["profile_memory"] = 1
    doc["traceEvents"] += [{"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1,
                            "ts": step["ts"] + 1 + i, "args": {"Total Reserved": 0, "Total Allocated": t, "Bytes": 512,
                                                                "Device Type": device_type,
                                                                "Device Id": 0 if device_type else -1, "Addr": 1}}
                           for i, t in enumerate(totals)]
    dst.mkdir()
    (dst / "rank0.json.gz").write_bytes(gzip.compress(orjson.dumps(doc), compresslevel=1))
    return dst


def test_a_base_trace_with_gpu_memory_events_calibrates_the_prediction(tmp_path):
    """The H200 base with CUDA [memory] events peaking at 12.5 GiB: the prediction's workspace is
    12.5 GiB less the base's predicted parameters, activations and logits, and says it came from there."""
    from lumos.trace import load_run
    from lumos.predict.whatif import base_plan, memory_of, transform

    src = Path(__file__).resolve().parents[2] / "resources" / "traces" / "h200" / "base_r0" / "rank0.json.gz"
    run = _with_memory_events(src, tmp_path / "gpu", [int(10 * GIB), int(12.5 * GIB), int(3 * GIB)], 1)
    plan = base_plan(load_run(run))
    settings = {"bytes_per_param": 8.0, "recompute": "none"}
    base = stage_memory(plan.shape, 12, 0, 1, 1, plan.microbatches, MemorySettings(**settings), ndigits=None)
    expect = round(12.5 - base["parameters_gib"] - base["activations_gib"] - base["logits_gib"], 3)
    assert 1.4 < expect < 1.6          # 12.5 GiB against the 11.0 predicted without the constant
    mem = memory_of(plan, settings)
    assert mem["assumptions"]["workspace_gib"] == expect
    assert mem["assumptions"]["workspace_source"] == f"trace: {run / 'rank0.json.gz'} [memory] cuda:0"
    assert mem["memory_gib_per_gpu"] == pytest.approx(12.5, abs=2e-3)   # the base itself: its measured peak
    wider = memory_of(transform(plan, micro_batch=8), settings)        # carried over to a target
    assert wider["per_stage"][0]["workspace_gib"] == expect
    assert memory_of(plan, dict(settings, workspace_gib=0.0))["assumptions"]["workspace_source"] == "profile"
    # CPU events leave out what was allocated before profiling: they calibrate nothing
    cpu = measured_peak(load_run(_with_memory_events(src, tmp_path / "cpu", [int(40 * GIB)], 0)),
                        plan.st.stage_of_rank, plan.shape, (12,), 1, 1, plan.microbatches)
    assert cpu.gib_by_stage == {} and calibrate(MemorySettings(), cpu).workspace_gib == 1.0


def test_predict_sharding_flag_shrinks_the_parameter_state_and_says_so(tiny_runs, capsys):
    from lumos.cli import main as lumos_main

    base = str(tiny_runs["base"])
    docs = {}
    for s in ("none", "zero3"):
        assert lumos_main(["predict", base, "--dp", "4", "--sharding", s, "--format", "json"]) == 0
        docs[s] = json.loads(capsys.readouterr().out)["memory"]
    assert docs["zero3"]["assumptions"]["sharding"] == "zero3"
    none, z3 = docs["none"]["per_stage"][0], docs["zero3"]["per_stage"][0]
    assert z3["parameters_gib"] < none["parameters_gib"] / 2
    assert z3["activations_gib"] == none["activations_gib"]
    assert lumos_main(["predict", base, "--dp", "4", "--sharding", "zero2"]) == 0
    assert "(with zero2 sharding of the DP state; the time assumes all-reduce DP)" in capsys.readouterr().out


def test_llama_activations_by_korthikantis_accounting():
    # Llama 3 8B at TP 2: r = 8 / 32 KV heads per head, SwiGLU with f = 3.5 h: of Table 2's 24 s b h held as
    # 1/t, 4 + 4 r + 6 f / h = 4 + 1 + 21 = 26; GPT (r = 1, GELU, f = 4h) keeps Table 2's 24
    from lumos.model.structure import ModelShape

    llama = ModelShape(hidden=4096, ffn=14336, seq=8192, micro_batch=1, vocab=128256, heads=32, tp=2, kv_heads=8,
                       gated=True)
    m = MemorySettings(recompute="selective")
    sbh = 8192 * 1 * 4096
    assert activation_bytes_per_layer(8192, 1, 4096, 32, 2, m, llama) == pytest.approx(sbh * (10 + 26 / 2))
    gpt = ModelShape(hidden=4096, ffn=8192, seq=8192, micro_batch=1, vocab=51200, heads=32, tp=2)
    assert activation_bytes_per_layer(8192, 1, 4096, 32, 2, m, gpt) == activation_bytes_per_layer(8192, 1, 4096, 32,
                                                                                                    2, m)
