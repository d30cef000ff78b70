"""The paper-style figures: the bars and lines they draw, the emulated label, PNG and PDF files."""

import numpy as np
import pandas as pd
import pytest
from matplotlib.patches import Rectangle

from lumos.report import figures as Fg

PARTS = Fg.COMPONENT_PARTS


def replay_data():
    rows = []
    for seed in (0, 1):
        for sim, rep in (("lumos", (40, 10, 30, 5)), ("dpro", (30, 20, 20, 4))):
            row = {"run": "m-8x4x8", "seed": seed, "simulator": sim}
            row.update({f"measured_{p}_ms": v for p, v in zip(PARTS, (42 + seed, 9, 31, 6))})
            row.update({f"replayed_{p}_ms": v for p, v in zip(PARTS, rep)})
            rows.append(row)
    return pd.DataFrame(rows)


def bars(fig):
    return [p for ax in fig.axes for p in ax.patches if isinstance(p, Rectangle) and p.get_width() != 0]


def has_emulated_note(fig):
    return any(Fg.EMULATED_NOTE in t.get_text() for t in fig.texts)


def test_breakdown_bars_average_seeds_and_label_emulated(tmp_path):
    b = Fg.breakdown_bars(replay_data(), "m-8x4x8")
    assert list(b.index) == ["measured (emulated)", "Lumos replay", "dPRO-style replay"]
    assert b.loc["measured (emulated)", "exposed_compute"] == 42.5
    assert b.loc["dPRO-style replay", "overlapped"] == 20
    fig = Fg.breakdown_figure(replay_data(), "m-8x4x8")
    assert len(bars(fig)) == 12  # 3 rows x 4 components
    assert "emulated" in fig.axes[0].get_title() and has_emulated_note(fig)
    Fg.save_figure(fig, tmp_path / "f.png", tmp_path / "f.pdf")
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "f.pdf").read_bytes()[:5] == b"%PDF-"
    with pytest.raises(ValueError, match="no replay"):
        Fg.breakdown_bars(replay_data(), "other-1x1x1")


def prediction_table(n):
    rows = []
    for i in range(n):
        row = {"source": "emulated", "group": "DP", "label": f"2x2x{8 * (i + 1)}", "run": f"m-2x2x{8 * (i + 1)}",
               "n": 3, "error_pct_mean": 2.0 + i, "error_pct_lo": 1.0, "error_pct_hi": 3.0 + i}
        for who in ("actual", "predicted"):
            vals = dict(zip(PARTS, (50.0 + i, 10.0, 20.0, 5.0)))
            row.update({f"{who}_{p}_ms_mean": v for p, v in vals.items()})
            row[f"{who}_iteration_ms_mean"] = sum(vals.values())
        rows.append(row)
    return pd.DataFrame(rows)


def test_prediction_figure_has_actual_and_predicted_stacks():
    fig = Fg.prediction_figure(prediction_table(3), "nine")
    assert len(bars(fig)) == 3 * 2 * 4
    labels = [t.get_text() for t in fig.axes[0].texts]
    assert labels.count("A") == 3 and labels.count("P") == 3
    assert "+2.0%\n[+1.0, +3.0]" in labels
    assert has_emulated_note(fig)


def test_timeline_figure_panels():
    df = pd.DataFrame({"label": "t", "rank": 0, "bin": np.arange(4), "t_ms": np.arange(4.0),
                       "measured": [0.5, 1.0, 0.25, 0.0], "replayed": [0.5, 1.0, 0.25, np.nan]})
    fig = Fg.timeline_figure({"real": df, "emulated": df.assign(label="e")})
    assert len(fig.axes) == 2
    assert "(real trace)" in fig.axes[0].get_title() and "(emulated)" in fig.axes[1].get_title()
    assert "measured 0.438, Lumos 0.583 over" in fig.axes[0].get_title()
    assert has_emulated_note(fig)
    fig = Fg.timeline_figure({"real": df.assign(dpro=[0.5, 0.5, 0.5, 0.5])})
    assert "measured 0.438, Lumos 0.583, dPRO-style 0.500" in fig.axes[0].get_title()
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == \
        ["measured", "Lumos replay", "dPRO-style replay"]


def test_timeline_frame_on_a_real_trace():
    from tests.conftest import DLRM

    df = Fg.timeline_frame(sorted(DLRM.glob("*.json.gz"))[0], bin_us=1000.0)
    assert len(df) == 14  # the 13.0 ms iteration of DLRM rank 0
    assert np.allclose(df["measured"], df["replayed"])  # unchanged replay is exact on real traces
    assert ((df["measured"] >= 0) & (df["measured"] <= 1)).all()
    # the dPRO-style replay of the same iteration is a third line; on DLRM rank 0 it is exact too
    # (replay_real: dPRO-style error +0.00 there), so all three coincide
    assert np.allclose(df["dpro"], df["measured"])


def test_ablation_and_error_figures():
    abl = pd.DataFrame({"source": ["real", "real", "emulated"], "variant": ["lumos", "drop:sync", "lumos"],
                        "failed": [0, 0, 1], "abs_iteration_error_pct_mean": [0.0, 8.0, float("nan")],
                        "abs_iteration_error_pct_lo": [0.0, 7.0, float("nan")],
                        "abs_iteration_error_pct_hi": [0.0, 9.0, float("nan")]})
    fig = Fg.ablation_figure(abl)
    assert len(fig.axes) == 2
    assert "replay could not finish" in [t.get_text().strip() for t in fig.axes[1].texts]
    stats = pd.DataFrame({"experiment": ["predict (DP)"], "config": ["x"], "abs_error_pct_mean": [3.0],
                          "abs_error_pct_lo": [2.0], "abs_error_pct_hi": [4.0], "actual_iteration_cv_pct": [1.0]})
    fig = Fg.error_ci_figure(stats)
    assert "emulated" in fig.axes[0].get_title() and has_emulated_note(fig)


def test_h200_whatif_figure_says_measured_on_hardware():
    rows = []
    for base, preds in (("base_r0", (130.0, 190.0)), ("base_r1", (126.5, 188.0))):
        for target, flags, pred, mean, lo, hi in (("base", "(none)", preds[0], 128.3, 126.5, 131.4),
                                                    ("layers_1.5x", "--layers 18", preds[1], 196.6, 189.9, 208.6)):
            rows.append({"target": target, "flags": flags, "base": base, "predicted_iteration_ms": pred,
                         "measured_iteration_ms": mean, "measured_min_ms": lo, "measured_max_ms": hi,
                         "error_pct": 100 * (pred - mean) / mean})
    fig = Fg.h200_whatif_figure(pd.DataFrame(rows))
    ax = fig.axes[0]
    assert "measured on hardware" in ax.get_title() and "emulated" not in ax.get_title()
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "Lumos from base_r0", "Lumos from base_r1", "measured (mean of 2 recordings x 3 steps)", "measured min-max"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["base", "layers_1.5x\n--layers 18"]
    assert sorted(t.get_text() for t in ax.texts) == ["+1%", "-1%", "-3%", "-4%"]
