"""Prediction vs hardware (table `endtoend`): the errors, means and peer columns on hand-made inputs, the
shipped peer-errors file, the Markdown and the figure."""

import math
from pathlib import Path

import pandas as pd
import pytest

from lumos.report import endtoend as E
from lumos.report import figures as Fg

ROOT = Path(__file__).resolve().parents[2]
PARTS = ("exposed_compute", "overlapped", "exposed_comm", "other")
PEER = (E.PeerError("A", ("2x2x8", "2x2x16"), 0.5, 3.0),
        E.PeerError("wide", ("2x2x8", "2x2x16", "2x4x4", "2x8x4")),   # holds 2x2x8 too: the narrower A wins
        E.PeerError("B", ("2x4x4", "2x8x4"), abs_error_max_pct=7.0),
        E.PeerError("all", ("2x2x8", "2x2x16", "2x4x4", "2x8x4"), abs_error_mean_pct=3.3, scope="overall"))


def predictions(per_target: dict) -> pd.DataFrame:
    """target -> per-seed predicted parts (compute, overlapped, comm, other) in ms."""
    rows = []
    for target, seeds in per_target.items():
        for seed, parts in enumerate(seeds):
            row = {"target": target, "seed": seed, "predicted_iteration_ms": float(sum(parts))}
            row.update({f"predicted_{p}_ms": float(v) for p, v in zip(PARTS, parts)})
            rows.append(row)
    return pd.DataFrame(rows)


def dataset(name="d", peer=PEER) -> E.DataSet:
    measured = (E.Measurement("2x2x8", 100.0, dict(zip(PARTS, (50.0, 20.0, 25.0, 5.0)))),
                E.Measurement("2x4x4", 200.0, dict(zip(PARTS, (100.0, 40.0, 50.0, 10.0)))))
    # 2x2x8: 110 ms (+10%) and 100 ms (0%); 2x4x4: 190 ms (-5%) and 180 ms (-10%)
    preds = predictions({"2x2x8": [(55, 20, 30, 5), (50, 18, 25, 7)], "2x4x4": [(90, 40, 50, 10), (80, 40, 50, 10)]})
    return E.DataSet(name, "m-2x2x4", measured, preds, peer="the peer", peer_errors=peer, measured_by="paper")


def test_target_rows_score_each_seed_against_the_measurement():
    t = E.endtoend_table([dataset()])
    assert list(t["row"]) == ["target", "target", "summary"]
    a, b = t.iloc[0], t.iloc[1]
    assert (a["target"], a["n"], a["measured_iteration_ms"]) == ("2x2x8", 2, 100.0)
    assert a["predicted_iteration_ms_mean"] == 105.0
    assert a["error_pct_mean"] == pytest.approx(5.0) and a["abs_error_pct_mean"] == pytest.approx(5.0)
    assert b["error_pct_mean"] == pytest.approx(-7.5) and b["abs_error_pct_mean"] == pytest.approx(7.5)
    # points of the measured iteration: compute (+5, 0), overlapped (0, -2), comm (+5, 0), other (0, +2)
    assert [a[f"{p}_error_pts_mean"] for p in PARTS] == pytest.approx([2.5, -1.0, 2.5, 1.0])
    assert a["predicted_exposed_compute_ms_mean"] == 52.5 and a["measured_exposed_compute_ms"] == 50.0
    assert a["component_l1_pts_mean"] == pytest.approx(7.0)   # seeds: 10 and 4
    assert b["component_l1_pts_mean"] == pytest.approx(7.5)   # seeds: 5 and 10
    for r in (a, b):   # both sides' parts add up to their iteration, so the points add up to the error
        assert sum(r[f"{p}_error_pts_mean"] for p in PARTS) == pytest.approx(r["error_pct_mean"])
        assert r["error_pct_lo"] <= r["error_pct_mean"] <= r["error_pct_hi"]
    assert a["predicted_iteration_cv_pct"] == pytest.approx(100 * math.sqrt(50) / 105)   # sample std of 110, 100
    assert set(t["rests_on"]) == {"predicted from an EMULATED base vs MEASURED on hardware (paper)"}


def test_summary_row_is_the_mean_over_targets_beside_the_peer_overall():
    s = E.endtoend_table([dataset()]).iloc[2]
    assert (s["target"], s["n"]) == ("mean over 2 layouts", 2)
    assert s["abs_error_pct_mean"] == pytest.approx(6.25) and s["error_pct_mean"] == pytest.approx(-1.25)
    assert s["worst_abs_error_pct"] == pytest.approx(7.5) and s["component_l1_pts_mean"] == pytest.approx(7.25)
    assert s["peer_abs_error_mean_pct"] == 3.3 and s["peer_error"] == "all: 3.3% mean (4 layouts)"
    assert math.isnan(s["predicted_iteration_ms_mean"]) and math.isnan(s["exposed_compute_error_pts_mean"])


def test_each_target_gets_the_narrowest_published_group():
    t = E.endtoend_table([dataset()])
    a, b = t.iloc[0], t.iloc[1]
    assert (a["peer_group"], a["peer_abs_error_min_pct"], a["peer_abs_error_max_pct"]) == ("A", 0.5, 3.0)
    assert a["peer_error"] == "A: 0.5-3% (2 layouts)" and a["peer"] == "the peer"
    assert b["peer_error"] == "B: up to 7% (2 layouts)" and math.isnan(b["peer_abs_error_min_pct"])
    bare = E.endtoend_table([dataset(peer=())])
    assert set(bare["peer_error"]) == {"-"} and bare["peer_abs_error_max_pct"].isna().all()


def test_several_data_sets_end_with_one_summary_over_every_target():
    second = E.DataSet("e", "n-8x12x4", (E.Measurement("8x12x8", 400.0),),
                       predictions({"8x12x8": [(300, 0, 100, 20)]}), measured_by="paper")
    t = E.endtoend_table([dataset(), second])
    assert list(t["row"]) == ["target", "target", "summary", "target", "summary", "summary"]
    e = t.iloc[3]   # no breakdown measured: the iteration is scored, the parts are not
    assert e["error_pct_mean"] == pytest.approx(5.0) and math.isnan(e["error_pct_lo"])   # one seed: no interval
    assert math.isnan(e["exposed_compute_error_pts_mean"]) and math.isnan(e["component_l1_pts_mean"])
    every = t.iloc[5]
    assert (every["dataset"], every["n"]) == ("all", 3)
    assert every["abs_error_pct_mean"] == pytest.approx((5.0 + 7.5 + 5.0) / 3)
    assert every["worst_abs_error_pct"] == pytest.approx(7.5)


def test_layouts_are_ranked_by_per_gpu_throughput_with_the_measured_base():
    # a fixed batch of 64 sequences on 32, 16 and 8 GPUs (strong scaling): per-GPU throughput 64 / (T x G)
    measured = (E.Measurement("2x2x8", 100.0, sequences=64), E.Measurement("2x2x4", 190.0, sequences=64))
    preds = predictions({"2x2x8": [(100, 0, 0, 0)], "2x2x4": [(200, 0, 0, 0)]})
    base = E.Measurement("2x2x2", 360.0, sequences=64)
    # T x G measured: 3,200 / 3,040 / 2,880 GPU-ms a batch (ranks of throughput 1, 2, 3); predicted, the base
    # at its emulated 350 ms: 3,200 / 3,200 / 2,800 (ranks 1.5, 1.5, 3): Spearman 1.5 / sqrt(1.5 x 2)
    ds = E.DataSet("s", "m-2x2x2", measured, preds, base_measured=base, base_ms=(340.0, 360.0))
    rho, n = E.throughput_ranking(ds)
    assert n == 3 and rho == pytest.approx(0.8660254)
    s = E.endtoend_table([ds]).iloc[-1]
    assert (s["throughput_spearman"], s["throughput_layouts"]) == (pytest.approx(0.8660254), 3)
    # without the base, two layouts cannot be ranked; an unknown batch leaves a layout out
    rho, n = E.throughput_ranking(E.DataSet("s", "b", measured, preds))
    assert n == 2 and math.isnan(rho)
    assert E.throughput_ranking(dataset())[1] == 0


def test_a_target_without_predictions_is_an_error():
    ds = dataset()
    broken = E.DataSet(ds.name, ds.base, ds.measured + (E.Measurement("2x2x32", 90.0),), ds.predictions)
    with pytest.raises(ValueError, match="no prediction of target 2x2x32"):
        E.endtoend_table([broken])


def test_prediction_row_reads_a_predict_document():
    doc = {"predicted": {f"{p}_us": v for p, v in zip(("iteration",) + PARTS, (800e3, 350e3, 120e3, 300e3, 30e3))},
           "measured": {"iteration_us": 780e3}}
    row = E.prediction_row(doc, "2x2x8", 3)
    assert row == {"target": "2x2x8", "seed": 3, "predicted_iteration_ms": 800.0, "predicted_exposed_compute_ms": 350.0,
                   "predicted_overlapped_ms": 120.0, "predicted_exposed_comm_ms": 300.0, "predicted_other_ms": 30.0,
                   "emulated_iteration_ms": 780.0}
    assert math.isnan(E.prediction_row({"predicted": doc["predicted"]}, "2x2x8", 0)["emulated_iteration_ms"])


def test_a_predicted_runs_batch_is_micro_batch_size_times_count_times_dp():
    doc = {"target": {"tp": 8, "pp": 12, "dp": 8, "micro_batch": 2}, "microbatches": 96}
    assert E.sequences_of(doc) == 1536.0


def test_the_shipped_paper_errors_are_the_published_groups():
    shipped = ROOT / "resources" / "measurements" / "lumos_fig7" / "paper_prediction_errors.csv"
    errors = {e.group: e for e in E.read_peer_errors(shipped)}
    assert list(errors) == ["DP", "PP", "DP+PP", "all nine"]
    assert (errors["DP"].abs_error_min_pct, errors["DP"].abs_error_max_pct) == (0.62, 2.98)
    assert errors["DP"].targets == ("2x2x8", "2x2x16", "2x2x32")
    assert (errors["PP"].abs_error_min_pct, errors["PP"].abs_error_max_pct) == (2.88, 6.83)
    assert errors["DP+PP"].abs_error_max_pct == 7.76 and math.isnan(errors["DP+PP"].abs_error_min_pct)
    assert errors["all nine"].scope == "overall" and errors["all nine"].abs_error_mean_pct == 3.3
    assert len(errors["all nine"].targets) == 9


def test_a_bad_peer_file_names_itself(tmp_path):
    bad = tmp_path / "peer.csv"
    bad.write_text("# a comment\n" + ",".join(E.PEER_COLUMNS) + "\nDP,2x2x8,low,,,group,x\n")
    with pytest.raises(E.PeerErrorsError, match="peer.csv: data row 1"):
        E.read_peer_errors(bad)
    bad.write_text("group,targets\nDP,2x2x8\n")
    with pytest.raises(E.PeerErrorsError, match="header"):
        E.read_peer_errors(bad)


def test_markdown_folds_intervals_and_parts(tmp_path):
    t = E.endtoend_table([dataset()])
    E.write_endtoend_table(t, tmp_path / "t.csv", tmp_path / "t.md", "End to end")
    md = (tmp_path / "t.md").read_text().splitlines()
    assert md[0] == "**End to end**" and len(md) == len(t) + 4
    first = md[4].split(" | ")
    assert first[2:4] == ["2x2x8", "2"] and first[4].startswith("105.0 [") and first[5] == "100.0"
    assert "52.5 / 50.0 (+2.50)" in md[4] and "A: 0.5-3% (2 layouts), the peer" in md[4]
    assert md[-1].split(" | ")[2] == "mean over 2 layouts" and "all: 3.3% mean (4 layouts)" in md[-1]
    assert all("predicted from an EMULATED base vs MEASURED on hardware (paper)" in line for line in md[4:])
    back = pd.read_csv(tmp_path / "t.csv")
    assert list(back["row"]) == ["target", "target", "summary"] and back["error_pct_mean"].iloc[0] == pytest.approx(5)
    E.write_endtoend_table(E.endtoend_table([]), tmp_path / "e.csv", tmp_path / "e.md", "Nothing")
    assert "no data set configured" in (tmp_path / "e.md").read_text()


def test_figure_draws_measured_and_predicted_stacks(tmp_path):
    t = E.endtoend_table([dataset()])
    fig = Fg.endtoend_figure(t)
    from matplotlib.patches import Rectangle

    bars = [p for ax in fig.axes for p in ax.patches if isinstance(p, Rectangle) and p.get_height() != 0]
    assert len(bars) == 16   # 2 targets x (measured, predicted) x 4 parts
    title = fig.axes[0].get_title()
    assert "EMULATED base\nvs MEASURED on hardware" in title and "mean |error| ours 6.25% over 2 layouts" in title
    texts = [x.get_text() for x in fig.axes[0].texts]
    assert any(x.startswith("ours +5.0%") and "the peer A: 0.5-3%" in x for x in texts)
    assert any(Fg.ENDTOEND_NOTE in x.get_text() for x in fig.texts)
    Fg.save_figure(fig, tmp_path / "f.png", tmp_path / "f.pdf")
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_readme_pastes_the_table_between_its_markers(tmp_path):
    from lumos.report import readme

    tables = tmp_path / "tables"
    tables.mkdir()
    E.write_endtoend_table(E.endtoend_table([dataset()]), tables / "endtoend.csv", tables / "endtoend.md",
                           "Prediction vs hardware")
    md = tmp_path / "README.md"
    md.write_text("intro\n<!-- tables:begin -->\nold\n<!-- tables:end -->\n"
                  "## Prediction vs hardware\n<!-- endtoend:begin -->\nplaceholder\n<!-- endtoend:end -->\nend\n")
    readme.paste(md, tables)
    text = md.read_text()
    pasted = text.split("<!-- endtoend:begin -->\n", 1)[1].split("<!-- endtoend:end -->", 1)[0]
    assert pasted == (tables / "endtoend.md").read_text().strip() + "\n\n"
    tables_part = text.split("<!-- tables:begin -->", 1)[1].split("<!-- tables:end -->", 1)[0]
    assert "#### `endtoend`" in tables_part and "2x2x8" not in tables_part   # linked there, pasted below
