"""Run names, which overrides reach which job, and which Hydra group files a job reads."""

from pathlib import Path

import pipeline_config as pc  # workflow/scripts/, on the path by conftest.py
import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.usefixtures("repo_config")


def test_run_names_round_trip():
    run = pc.parse_run("gpt3_15b-2x2x4")
    assert (run.model, run.tp, run.pp, run.dp, run.gpus) == ("gpt3_15b", 2, 2, 4, 16)
    assert pc.with_parallel(run, "2x8x8").name == "gpt3_15b-2x8x8"
    assert run.emulate_overrides() == ["model=gpt3_15b", "parallel.tp=2", "parallel.pp=2", "parallel.dp=4"]
    with pytest.raises(ValueError, match="MODEL-TPxPPxDP"):
        pc.parse_run("gpt3_15b_2x2x4")


def test_an_interleaved_run_is_named_with_its_chunks():
    run = pc.parse_run("llama3_8b-2x8x4v2")
    assert (run.tp, run.pp, run.dp, run.vp, run.name) == (2, 8, 4, 2, "llama3_8b-2x8x4v2")
    assert run.emulate_overrides()[-1] == "parallel.vp=2"
    assert pc.parse_run("llama3_8b-2x8x4").vp == 1 and "parallel.vp" not in " ".join(
        pc.parse_run("llama3_8b-2x8x4").emulate_overrides())
    assert pc.predict_flags(pc.parse_run("llama3_8b-2x8x4"), run) == ["--tp", "2", "--pp", "8", "--dp", "4", "--vp", "2"]
    assert pc.predict_flags(run, pc.parse_run("llama3_8b-2x16x4v2")) == ["--tp", "2", "--pp", "16", "--dp", "4"]


def test_a_torchtitan_run_is_named_with_its_stack():
    run = pc.parse_run("llama3_8b-2x1x4-torchtitan")
    assert (run.training, run.name, run.gpus) == ("torchtitan", "llama3_8b-2x1x4-torchtitan", 8)
    assert run.emulate_overrides()[4:] == ["training=torchtitan", "ranks=all", "write_ranks=stage",
                                           "emulator.granularity=fine"]
    # torchtitan keeps the weights gathered under PP: from a PP 1 base, the strategy changes with it
    assert pc.predict_flags(run, pc.parse_run("llama3_8b-2x2x4-torchtitan")) == [
        "--tp", "2", "--pp", "2", "--dp", "4", "--fsdp-strategy", "shard_grad_op"]
    assert pc.predict_flags(run, pc.parse_run("llama3_8b-2x1x8-torchtitan")) == ["--tp", "2", "--pp", "1", "--dp", "8"]


def test_a_torchtitan_run_with_per_layer_selective_ac_is_named_with_its_stack():
    run = pc.parse_run("llama3_8b-2x1x4-torchtitan_sac2")
    assert (run.training, run.name) == ("torchtitan_sac2", "llama3_8b-2x1x4-torchtitan_sac2")
    assert run.emulate_overrides()[4:] == ["training=torchtitan", "ranks=all", "write_ranks=stage",
                                           "emulator.granularity=fine", "training.recompute=selective_layer",
                                           "training.ac_every=2"]
    assert pc.predict_flags(run, pc.parse_run("llama3_8b-2x2x4-torchtitan_sac2")) == [
        "--tp", "2", "--pp", "2", "--dp", "4", "--fsdp-strategy", "shard_grad_op"]
    assert pc.predict_flags(run, pc.parse_run("llama3_8b_l48-2x1x4-torchtitan_sac2")) == [
        "--tp", "2", "--pp", "1", "--dp", "4", "--layers", "48"]


def test_a_ring_cp_run_is_named_with_its_form():
    run = pc.parse_run("llama3_8b-2x2x2c2-ring")
    assert (run.cp, run.training, run.name, run.gpus) == (2, "ring", "llama3_8b-2x2x2c2-ring", 16)
    assert run.emulate_overrides()[4:] == ["parallel.cp=2", "training.cp_form=ring"]
    # to a run without context parallelism (whose form does not matter): --cp 1
    assert pc.predict_flags(run, pc.parse_run("llama3_8b-2x2x2")) == ["--tp", "2", "--pp", "2", "--dp", "2", "--cp", "1"]


def test_override_keys():
    assert pc.override_key("+model.hidden=1") == "model.hidden"
    assert pc.override_root("~trace") == "trace"
    assert pc.override_root("ablation@x=no_sync") == "ablation"


def test_overrides_reach_only_jobs_whose_config_has_the_key():
    overrides = ["ablation=no_inter_stream", "emulator.comm.congestion=0.1", "simulator.gap_threshold_us=30"]
    assert pc.overrides_for("emulate", overrides) == ["emulator.comm.congestion=0.1"]
    assert pc.overrides_for("experiment/replay", overrides) == ["ablation=no_inter_stream",
                                                                "simulator.gap_threshold_us=30"]
    assert pc.overrides_for("experiment/predict", overrides) == ["ablation=no_inter_stream"]


def test_hydra_inputs_name_the_chosen_group_files():
    assert pc.hydra_inputs("experiment/replay", ["simulator=dpro", "ablation=no_sync"]) == [
        "config/experiment/replay.yaml", "config/ablation/no_sync.yaml", "config/simulator/dpro.yaml"]
    emulate = pc.hydra_inputs("emulate", ["model=gpt3_175b", "parallel.tp=8", "seed=3"])
    assert emulate[0] == "config/emulate.yaml"
    assert "config/model/gpt3_175b.yaml" in emulate and "config/parallel/default.yaml" in emulate
    assert not any("simulator" in f or "ablation" in f for f in emulate)


def test_predict_flags_carry_the_layout_and_only_the_model_changes_the_target_has():
    base = pc.parse_run("gpt3_15b-2x2x4")
    assert pc.predict_flags(base, pc.parse_run("gpt3_15b-2x8x8")) == ["--tp", "2", "--pp", "8", "--dp", "8"]
    assert pc.predict_flags(base, pc.parse_run("gpt3_15b_v1-2x2x4")) == [
        "--tp", "2", "--pp", "2", "--dp", "4", "--layers", "64"]
    assert pc.predict_flags(base, pc.parse_run("gpt3_15b_v3-2x2x4")) == [
        "--tp", "2", "--pp", "2", "--dp", "4", "--hidden", "9216", "--ffn", "18432"]
