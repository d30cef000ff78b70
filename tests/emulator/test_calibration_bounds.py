"""The recorded calibration still holds: the H100 profile against the paper's measured Fig. 1
and four shipped Fig. 7 breakdowns, the A100 profile against a sample of vTrain's single-node runs."""

from __future__ import annotations

from lumos.emulator.calibrate import calibrate_175b, calibrate_fig7
from lumos.emulator.measured import stratified, vtrain_points
from lumos.emulator.realism import run_points, score


def test_fig1_total_within_10pct_and_shares_within_5_points():
    lines = []
    assert calibrate_175b([], out=lines.append), "\n".join(lines)


def test_fig7_totals_within_10pct_and_shares_within_5_points():
    lines = []
    assert calibrate_fig7([], out=lines.append), "\n".join(lines)
    assert len([x for x in lines if x.startswith(("2x2x8", "2x2x16", "2x2x32", "2x4x4"))]) == 4


def test_vtrain_sample_error_and_rank_correlation():
    """36 rows, one per (TP, PP, DP, hidden) stratum, a different draw from the 72 the fit used."""
    rows = run_points(stratified(vtrain_points(), 36, seed=7), workers=1)
    s = score(rows)["vtrain_single"]
    assert s["n"] == 36
    assert s["mean_abs_err_pct"] <= 10.0 and s["spearman"] >= 0.9, s
