"""Which predictions table `endtoend` scores against hardware, and where they come from (endtoend_plan)."""

from pathlib import Path
from types import SimpleNamespace

import endtoend_plan as ep  # workflow/scripts/, on the path by conftest.py
import pipeline_config as pc
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.usefixtures("repo_config")


def load(name: str) -> dict:
    return yaml.safe_load((ROOT / "config" / name).read_text())


def seeds_of(config):
    return lambda run: list(range(int(config.get("seeds_per_run", {}).get(run, config["seeds"]))))


def test_the_default_fig7_data_set_scores_the_sweeps_own_predictions():
    config = load("config.yaml")
    plan, one_gpu, one_host, sc21, sc21_host, sc21_gpu = ep.plans(config, seeds_of(config))
    # Fig. 7 from a single-GPU and a single-host base: their own route, three seeds each
    assert [(p.name, p.base.name, p.from_sweep, p.own_base) for p in (one_gpu, one_host)] == [
        ("fig7_one_gpu", "gpt3_15b-1x1x1", False, False), ("fig7_one_host", "gpt3_15b-2x1x4", False, False)]
    assert len(one_gpu.prediction_jsons("results/default")) == 12
    assert (plan.name, plan.measured, plan.base.name, plan.from_sweep, plan.own_base) == (
        "fig7", "fig7", "gpt3_15b-2x2x4", True, False)
    assert [plan.shape(t) for t in plan.targets] == ["2x2x8", "2x2x16", "2x2x32", "2x4x4"]
    files = plan.prediction_jsons("results/default")
    assert len(files) == 40   # 4 targets x the sweep's 10 seeds
    assert files[0] == "results/default/predict/gpt3_15b-2x2x8/seed0.json"
    assert files[-1] == "results/default/predict/gpt3_15b-2x4x4/seed9.json"
    assert plan.peer["file"] == "resources/measurements/lumos_fig7/paper_prediction_errors.csv"
    # Narayanan et al. SC'21 Table 2: its own route, the base a measured layout emulated with that point's
    # overrides (Selene, the 2021 Megatron-LM stack), one seed, the batch held by a predict flag
    assert (sc21.name, sc21.measured, sc21.model, sc21.from_sweep, sc21.own_base, sc21.base_measured) == (
        "sc21_table2", "sc21_table2", "174.6B", False, True, True)
    assert sc21.base.name == "gpt3_175b-8x12x16" and sc21.predict_flags == ("--global-batch", "1536")
    assert "cluster=a100_selene" in sc21.base_overrides and "training=megatron_sc21" in sc21.base_overrides
    assert sc21.prediction_jsons("results/default") == [
        f"results/default/endtoend/sc21_table2/predict/gpt3_175b-8x12x{dp}/seed0.json" for dp in (8, 4)]
    # ... and from a single-host base: 8 of the 96 layers at TP 8 on one stage, emulated with the same Selene
    # profile; the layers, the batch and the A100 InfiniBand cluster profile (its inserted collectives) are flags
    assert (sc21_host.name, sc21_host.base.name, sc21_host.own_base, sc21_host.base_measured) == (
        "sc21_one_host", "gpt3_175b-8x1x1", True, False)
    assert {"cluster=a100_selene", "model.num_layers=8", "model.global_batch_size=8"} <= set(sc21_host.base_overrides)
    assert sc21_host.predict_flags == ("--global-batch", "1536", "--layers", "96", "--cluster", "a100_ib")
    assert [sc21_host.shape(t) for t in sc21_host.targets] == ["8x12x16", "8x12x8", "8x12x4"]
    # ... and from a single GPU: 2 layers, TP 1 (its TP all-reduces inserted by the prediction too)
    assert (sc21_gpu.name, sc21_gpu.base.name, sc21_gpu.predict_flags) == ("sc21_one_gpu", "gpt3_175b-1x1x1",
                                                                           sc21_host.predict_flags)
    assert "model.num_layers=2" in sc21_gpu.base_overrides and [sc21_gpu.shape(t) for t in sc21_gpu.targets] == [
        "8x12x16", "8x12x8", "8x12x4"]


def test_the_tiny_profile_runs_its_own_base_and_predictions():
    config = load("profile/tiny.yaml")
    (plan,) = ep.plans(config, seeds_of(config))
    assert not plan.from_sweep and plan.own_base   # its base is not the tiny sweep's, and a profile is named
    assert plan.base_overrides == ("model=gpt3_15b", "parallel.tp=2", "parallel.pp=2", "parallel.dp=4",
                                   "cluster=h100_roce", "training=megatron_lm")
    assert plan.base_dir("results/tiny", 0) == "results/tiny/endtoend/fig7/base/seed0"
    assert plan.prediction_jsons("results/tiny") == [
        f"results/tiny/endtoend/fig7/predict/gpt3_15b-{s}/seed0.json" for s in ("2x2x8", "2x2x16", "2x2x32", "2x4x4")]


def test_no_section_no_plan_and_a_plain_other_base_reuses_the_emulate_rule():
    config = load("config.yaml")
    assert ep.plans({k: v for k, v in config.items() if k != "endtoend"}, seeds_of(config)) == []
    config["endtoend"] = {"x": {"measured": "fig7", "base": "gpt3_15b-2x2x2", "targets": ["2x2x8"], "seeds": 2}}
    (plan,) = ep.plans(config, seeds_of(config))
    assert not plan.from_sweep and not plan.own_base and plan.seeds == {"gpt3_15b-2x2x8": (0, 1)}
    assert plan.base_dir("results/t", 1) == "results/t/emulated/gpt3_15b-2x2x2/seed1"
    assert plan.prediction_json("results/t", plan.targets[0], 1) == (
        "results/t/endtoend/x/predict/gpt3_15b-2x2x8/seed1.json")


def test_predict_flags_or_own_seeds_leave_the_sweep():
    config = load("config.yaml")
    spec = config["endtoend"]["fig7"]
    for extra in ({"predict_flags": ["--global-batch", "64"]}, {"seeds": 3}):
        config["endtoend"] = {"fig7": dict(spec, **extra)}
        (plan,) = ep.plans(config, seeds_of(config))
        assert not plan.from_sweep and not plan.own_base   # the sweep's emulated base, its own predictions


def test_a_measured_base_is_emulated_with_that_points_overrides():
    config = load("config.yaml")
    config["endtoend"] = {"m": {"measured": "fig7", "base": "2x2x8", "targets": ["2x2x16", "2x2x32"]}}
    (plan,) = ep.plans(config, seeds_of(config))
    assert plan.base == pc.Run("gpt3_15b", 2, 2, 8) and plan.own_base and plan.base_measured
    assert plan.base_overrides == ("model=gpt3_15b", "parallel.tp=2", "parallel.pp=2", "parallel.dp=8")
    config["endtoend"]["m"]["profile"] = ["cluster=h100_roce"]
    with pytest.raises(ValueError, match="carries its own profile"):
        ep.plans(config, seeds_of(config))


def test_a_target_the_data_set_did_not_measure_is_a_config_error():
    config = load("config.yaml")
    config["endtoend"]["fig7"]["targets"] = ["2x2x8", "2x2x64"]
    with pytest.raises(ValueError, match=r"endtoend.fig7: 'fig7' has no measurement of \['2x2x64'\]"):
        ep.plans(config, seeds_of(config))
    config["endtoend"]["fig7"].update(targets=["2x2x8"], base="2x2x4")   # a layout, but not a measured one
    with pytest.raises(ValueError, match="base 2x2x4 is not a measured layout"):
        ep.plans(config, seeds_of(config))


def test_two_points_of_one_layout_need_a_model():
    def points(_name):
        over = lambda m: (f"model={m}", "parallel.tp=8", "parallel.pp=12", "parallel.dp=4")  # noqa: E731
        return [SimpleNamespace(label="a", overrides=over("big"), total_ms=100.0, model="A"),
                SimpleNamespace(label="b", overrides=over("big"), total_ms=120.0, model="B")]

    spec = {"measured": "d", "base": "8x12x4", "targets": ["8x12x4"]}
    with pytest.raises(ValueError, match="two measured points"):
        ep.measured_points("d", spec, points)
    picked = ep.measured_points("d", dict(spec, model="B"), points)
    assert list(picked) == ["8x12x4"] and picked["8x12x4"].total_ms == 120.0
