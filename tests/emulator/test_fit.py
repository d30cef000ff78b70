"""Calibration as code: the fitter's objective, its bounded search and how it records values."""

from __future__ import annotations

import math

import pytest

from lumos.emulator import fit as fitmod
from lumos.emulator.fit import Knob, _from_unit, _overrides, _to_unit, objective, record
from lumos.emulator.measured import Point


def test_objective_is_mean_abs_log_error_plus_share_points():
    rows = [{"measured_ms": 100.0, "emulated_ms": 110.0}, {"measured_ms": 200.0, "emulated_ms": 180.0}]
    assert objective(rows, parts=False) == pytest.approx((math.log(1.1) + abs(math.log(0.9))) / 2)
    row = {"measured_ms": 100.0, "emulated_ms": 100.0, "emulated_breakdown_total_ms": 100.0}
    for p, (m, e) in zip(fitmod.PARTS, ((50, 55), (10, 10), (35, 30), (5, 5))):
        row[f"measured_{p}_ms"], row[f"emulated_{p}_ms"] = m, e
    # 0 log error, share errors 0.05, 0, 0.05, 0 -> mean of five terms, plus 10 x (0.01 + 0.01) over the bound
    assert objective([row], parts=True) == pytest.approx(0.1 / 5 + 10 * 0.02)


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
