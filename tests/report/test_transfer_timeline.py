"""The Fig. 6 transfer panel's data on a real trace: the same numbers as the transfer itself.

The panel must draw the transfer the table reports, not a second computation of it: each
curve's iteration is the `transfer_pair` value for the same steps, and the measured curve
holds exactly the measured busy time of step k+1.
"""

import numpy as np
import pandas as pd
import pytest

from lumos.analysis.replay import measured_breakdown
from lumos.analysis.transfer import transfer_pair
from lumos.graph import build_graph
from lumos.report import figures as Fg
from lumos.report.transfer_timeline import COLUMNS, step_pairs, transfer_timeline_frame
from lumos.trace import load_trace

from ..conftest import DLRM, REAL

NCCL = REAL / "hta" / "nccl_parser_config__nccl_data.json.gz"   # steps 4, 5, 6
BIN_US = 1000.0


@pytest.fixture(scope="module")
def nccl():
    return load_trace(NCCL)


@pytest.fixture(scope="module")
def frame(nccl):
    return transfer_timeline_frame(nccl, bin_us=BIN_US)


def curve(df, name):
    return df[df["curve"] == name]


def test_k_is_the_second_step_and_k1_the_next(nccl, frame):
    assert step_pairs(nccl) == [(5, 6)]   # warm-up step 4 left out
    assert list(frame.columns) == list(COLUMNS)
    assert set(frame["step"]) == {5} and set(frame["durations_from_step"]) == {6}
    assert list(dict.fromkeys(frame["curve"])) == ["measured", "lumos", "dpro"]


def test_iterations_are_the_transfer_s_own(nccl, frame):
    r = transfer_pair(nccl, 5, nccl, 6, iteration="gpu")   # the panel spans the GPU work
    first = frame.groupby("curve").first()
    assert first.loc["measured", "iteration_ms"] * 1e3 == pytest.approx(r.actual_us, abs=1e-6)
    assert first.loc["lumos", "iteration_ms"] * 1e3 == pytest.approx(r.predicted_us, abs=1e-6)
    assert first.loc["dpro", "iteration_ms"] * 1e3 == pytest.approx(r.baselines["dpro"], abs=1e-6)
    assert first.loc["lumos", "error_pct"] == pytest.approx(r.error_pct, abs=1e-9)
    assert first.loc["dpro", "error_pct"] == pytest.approx(r.baseline_errors()["dpro"], abs=1e-9)
    assert np.isnan(first.loc["measured", "error_pct"])


def test_each_curve_has_one_bin_per_ms_of_its_own_iteration(frame):
    for name, c in frame.groupby("curve"):
        n = int(np.ceil(c["iteration_ms"].iloc[0] * 1e3 / BIN_US))
        assert c["bin"].tolist() == list(range(n)), name
        assert c["t_ms"].iloc[0] == 0.0 and ((c["duty"] >= 0) & (c["duty"] <= 1 + 1e-12)).all(), name


def test_measured_bins_hold_the_measured_busy_time(nccl, frame):
    b = measured_breakdown(build_graph(nccl, step=6), "gpu")
    c = curve(frame, "measured")
    width = np.full(len(c), BIN_US)
    width[-1] = b.iteration_us - (len(c) - 1) * BIN_US   # the last bin ends with the iteration
    assert float(np.sum(c["duty"].to_numpy() * width)) == pytest.approx(b.iteration_us - b.other_us, abs=1e-6)


def test_a_one_step_trace_has_no_transfer():
    df = transfer_timeline_frame(load_trace(sorted(DLRM.glob("*.json.gz"))[0]))   # DLRM rank 0: step 10 only
    assert df.empty and list(df.columns) == list(COLUMNS)


def test_transfer_panel_says_what_it_shows(frame):
    real = pd.DataFrame({"label": "nccl", "rank": 0, "bin": np.arange(2), "t_ms": [0.0, 1.0],
                         "measured": [1.0, 0.5], "replayed": [1.0, 0.5]})
    fig = Fg.timeline_figure({"real": real, "transfer": frame.assign(label="nccl")})
    title = fig.axes[1].get_title()
    assert "nccl (real trace, measured on hardware), rank 0" in title
    assert "step 5's graph with step 6's durations vs step 6 measured" in title
    first = frame.groupby("curve").first()
    m, lu, dp = (first.loc[k] for k in ("measured", "lumos", "dpro"))
    assert [t.get_text() for t in fig.axes[1].get_legend().get_texts()] == [
        f"step 6 measured: {m['iteration_ms']:.2f} ms",
        f"Lumos transfer: {lu['iteration_ms']:.2f} ms ({lu['error_pct']:+.2f}%)",
        f"dPRO-style transfer: {dp['iteration_ms']:.2f} ms ({dp['error_pct']:+.2f}%)"]
    fig = Fg.timeline_figure({"real": real, "transfer": frame.iloc[:0]})
    assert "nccl: fewer than two replayable steps" in fig.axes[1].texts[0].get_text()
