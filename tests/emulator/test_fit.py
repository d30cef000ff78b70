"""Calibration as code: the fitter's objective, its bounded search and how it records values."""

from __future__ import annotations

import math

import pytest

from lumos.emulator import fit as fitmod
from lumos.emulator.fit import Knob, _from_unit, _overrides, _to_unit, objective, record, scaling_errors
from lumos.emulator.measured import Point


def test_objective_is_mean_abs_log_error_plus_share_points():
    rows = [{"measured_ms": 100.0, "emulated_ms": 110.0}, {"measured_ms": 200.0, "emulated_ms": 180.0}]
    assert objective(rows, parts=False) == pytest.approx((math.log(1.1) + abs(math.log(0.9))) / 2)
    row = {"measured_ms": 100.0, "emulated_ms": 100.0, "emulated_breakdown_total_ms": 100.0}
    for p, (m, e) in zip(fitmod.PARTS, ((50, 55), (10, 10), (35, 30), (5, 5))):
        row[f"measured_{p}_ms"], row[f"emulated_{p}_ms"] = m, e
    # 0 log error, share errors 0.05, 0, 0.05, 0 -> mean of five terms, plus 10 x (0.01 + 0.01) over the bound
    assert objective([row], parts=True) == pytest.approx(0.1 / 5 + 10 * 0.02)


def test_scaling_error_scores_the_step_between_layouts_of_one_model_only():
    # both totals 5% off in opposite directions: the step 100 -> 200 measured is emulated 95 -> 210
    a = {"dataset": "fig7", "model": "15B", "measured_ms": 100.0, "emulated_ms": 95.0}
    b = {"dataset": "fig7", "model": "15B", "measured_ms": 200.0, "emulated_ms": 210.0}
    other = {"dataset": "fig7", "model": "175B", "measured_ms": 1000.0, "emulated_ms": 500.0}
    assert scaling_errors([a, b, other]) == pytest.approx([abs(math.log((95 / 210) / (100 / 200)))])
    # the same two totals both 5% slow: the step is right and scores nothing
    assert scaling_errors([dict(a, emulated_ms=105.0), b]) == pytest.approx([0.0])
    # with parts, the step is one more term beside the totals' mean
    assert objective([a, b], parts=True) == pytest.approx(
        (abs(math.log(0.95)) + math.log(1.05)) / 2 + scaling_errors([a, b])[0])


def test_knobs_stay_inside_their_range_and_override_where_recorded():
    k = Knob("cluster/a100_vtrain.yaml", "compute.gemm_eff_max", 0.5, 0.92)
    for v in (0.51, 0.7, 0.91):
        assert _from_unit(k, _to_unit(k, v)) == pytest.approx(v)
    assert 0.5 <= _from_unit(k, -50) < 0.5001 and 0.9199 < _from_unit(k, 50) <= 0.92
    assert _overrides([k], [0.75]) == ("++cluster.emulator.compute.gemm_eff_max=0.75",)


def test_fit_moves_a_knob_toward_the_measurement(monkeypatch):
    """With a stand-in emulator whose time is 1000 / gemm_eff_max, the fit finds 0.8 for 1250 ms."""
    def fake_run_points(points, extra, workers=None, log=None):
        eff = float(extra[0].split("=")[1])
        return [{"dataset": p.dataset, "measured_ms": p.total_ms, "emulated_ms": 1000.0 / eff} for p in points]

    monkeypatch.setattr(fitmod, "run_points", fake_run_points)
    monkeypatch.setattr(fitmod, "current", lambda knobs: [0.6])
    k = Knob("cluster/a100_vtrain.yaml", "compute.gemm_eff_max", 0.5, 0.92)
    best, hist = fitmod.fit([Point("x", "a", (), 1250.0)], [k], max_evals=40, parts=False, log=lambda s: None)
    assert best[0] == pytest.approx(0.8, abs=0.01)
    assert hist[0][1] == [pytest.approx(0.6)] and min(h[0] for h in hist) < 0.02


def test_record_rewrites_only_the_fitted_knobs_with_a_comment(tmp_path, monkeypatch):
    (tmp_path / "cluster").mkdir()
    f = tmp_path / "cluster" / "c.yaml"
    f.write_text("name: c\npeak: 1.0  # kept\nemulator:\n  granularity: auto\n  comm:\n    nic_eff: 0.1\n")
    monkeypatch.setattr(fitmod, "CONFIG", tmp_path)
    record([Knob("cluster/c.yaml", "comm.nic_eff", 0, 1), Knob("cluster/c.yaml", "comm.congestion", 0, 1)],
           [0.55561, 0.2], "fig7")
    text = f.read_text()
    assert text.startswith("name: c\npeak: 1.0  # kept\n# Fitted by `python -m lumos.emulator.fit fig7 --write`")
    from omegaconf import OmegaConf

    assert OmegaConf.to_container(OmegaConf.load(f))["emulator"] == {
        "granularity": "auto", "comm": {"nic_eff": 0.5556, "congestion": 0.2}}
    record([Knob("cluster/c.yaml", "comm.nic_eff", 0, 1)], [0.6], "fig7")   # again: one comment, one block
    assert f.read_text().count("# Fitted by") == 1 and "nic_eff: 0.6" in f.read_text()


def test_the_selene_fit_cannot_move_single_node_or_h100_points():
    """The Selene fit records the A100 network (NIC efficiency, congestion) in a100_vtrain.yaml and
    Selene's NVLink in a100_selene.yaml, so vTrain's single-node rows (no NIC crossed; a100_selene is not
    read) and the H100 points (h100_roce.yaml, not written) stay as they are; a run across hosts moves."""
    from lumos.emulator.measured import selene_overrides, vtrain_overrides
    from lumos.emulator.realism import emulate_point

    assert {k.file for k in fitmod.SELENE_KNOBS} == {"cluster/a100_selene.yaml", "cluster/a100_vtrain.yaml",
                                                     "training/megatron_sc21.yaml"}
    assert all(k.path.startswith("comm.nvlink") for k in fitmod.SELENE_KNOBS if k.file.endswith("selene.yaml"))
    network = [k for k in fitmod.SELENE_KNOBS if k.file.endswith("vtrain.yaml")]
    assert [k.path for k in network] == ["comm.nic_eff", "comm.congestion"]
    far = _overrides(network, [k.lo + 0.3 * (k.hi - k.lo) for k in network])
    single = Point("vtrain_single", "one node", vtrain_overrides(8, 2, 1024, 16, 2, 1024, 2, 2, 2), 1.0)
    assert emulate_point(single, far)["emulated_ms"] == emulate_point(single)["emulated_ms"]
    two_hosts = Point("x", "2 hosts", selene_overrides(2, 1024, 16, 8, 1, 2, 2, 1), 1.0)
    assert emulate_point(two_hosts, far)["emulated_ms"] > 1.01 * emulate_point(two_hosts)["emulated_ms"]


@pytest.mark.parametrize("which,fits", [("selene", ["selene"]), ("all", ["vtrain", "fig7", "selene"])])
def test_calibrate_command_fits_each_data_set_in_turn(monkeypatch, which, fits):
    """`lumos emulate --calibrate selene|all`: the fit (or every fit, vTrain first) with the flags passed on."""
    from lumos.cli import main

    seen = []
    monkeypatch.setattr(fitmod, "fit_one", lambda name, a: seen.append((name, a.max_evals, a.write)))
    assert main(["emulate", "--calibrate", which, "--max-evals", "3", "--write"]) == 0
    assert seen == [(n, 3, True) for n in fits]
    pts, knobs, parts = fitmod._points("selene", type("A", (), {"max_gpus": 1536, "max_microbatches": 400})())
    assert knobs == fitmod.SELENE_KNOBS and not parts
    # the rows the fit leaves out take a minute each to emulate; the realism table still scores them
    assert len(pts) == 13 and "1000B_8x64x1" not in {p.label for p in pts}


def test_record_names_every_fit_of_a_file_and_keeps_the_comments_above(tmp_path, monkeypatch):
    """a100_vtrain.yaml holds the vTrain fit and the Selene fit (its network knobs): both are named, the
    hand-written comments above the fitted block stay, and a switch keeps its YAML spelling."""
    (tmp_path / "cluster").mkdir()
    f = tmp_path / "cluster" / "a.yaml"
    f.write_text("name: a\n# kept: why the switch below is on\nemulator:\n  comm:\n    algorithm: nccl\n"
                 "    p2p: true\n")
    monkeypatch.setattr(fitmod, "CONFIG", tmp_path)
    record([Knob("cluster/a.yaml", "comm.nvlink_eff", 0, 1)], [0.85], "vtrain")
    record([Knob("cluster/a.yaml", "comm.nic_eff", 0, 1)], [0.7855], "selene")
    record([Knob("cluster/a.yaml", "comm.nic_eff", 0, 1)], [0.8], "selene")
    text = f.read_text()
    assert text.startswith("name: a\n# kept: why the switch below is on\n# Fitted by `python -m lumos.emulator.fit "
                           "vtrain --write`")
    assert [ln.split("`")[1] for ln in text.splitlines() if ln.startswith("# Fitted by")] == [
        "python -m lumos.emulator.fit vtrain --write", "python -m lumos.emulator.fit selene --write"]
    assert "    p2p: true\n" in text
    from omegaconf import OmegaConf

    assert OmegaConf.to_container(OmegaConf.load(f))["emulator"] == {
        "comm": {"algorithm": "nccl", "p2p": True, "nvlink_eff": 0.85, "nic_eff": 0.8}}
