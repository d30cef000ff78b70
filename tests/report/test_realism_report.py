"""The emulator-realism table, figure and README paste, on hand-made emulated-vs-measured rows."""

import pandas as pd
import pytest

from lumos.emulator.realism import score
from lumos.report import figures as Fg
from lumos.report import readme
from lumos.report import tables as T

PARTS = T.COMPONENT_PARTS


def rows() -> pd.DataFrame:
    fig7 = {"dataset": "fig7", "config": "2x2x8", "measured_ms": 797.0, "emulated_ms": 900.0,
            "emulated_breakdown_total_ms": 900.0}
    fig7.update({f"measured_{p}_ms": v for p, v in zip(PARTS, (353.0, 123.0, 291.0, 30.0))})
    fig7.update({f"emulated_{p}_ms": v for p, v in zip(PARTS, (450.0, 90.0, 342.0, 18.0))})
    vt = [{"dataset": "vtrain_single", "config": f"c{i}", "measured_ms": m, "emulated_ms": e}
          for i, (m, e) in enumerate(((100.0, 90.0), (200.0, 220.0), (300.0, 300.0)))]
    return pd.DataFrame([fig7] + vt)


def test_realism_table_summary_and_shares(tmp_path):
    r = rows()
    summary, configs = T.emulator_realism_table(r, score(r.to_dict("records")))
    assert list(summary["dataset"]) == ["fig7", "vtrain_single"] and list(summary["n"]) == [1, 3]
    vt = summary.set_index("dataset").loc["vtrain_single"]
    assert vt["mean_abs_error_pct"] == pytest.approx(20 / 3) and vt["worst_abs_error_pct"] == pytest.approx(10.0)
    assert vt["mean_error_pct"] == pytest.approx(0.0) and vt["spearman"] == pytest.approx(1.0)
    assert len(configs) == 1   # only fig7 has a measured breakdown
    c = configs.iloc[0]
    assert c["error_pct"] == pytest.approx(100 * 103 / 797)
    assert c["measured_exposed_comm_share_pct"] == pytest.approx(100 * 291 / 797)
    assert c["emulated_exposed_comm_share_pct"] == pytest.approx(38.0)
    assert c["exposed_comm_share_diff_pts"] == pytest.approx(38.0 - 100 * 291 / 797)
    T.write_realism_table(summary, configs, tmp_path / "t.csv", tmp_path / "t.md", "Realism, emulated vs measured")
    csv = pd.read_csv(tmp_path / "t.csv")
    assert list(csv["row"]) == ["summary", "summary", "configuration"]
    assert set(csv["source"]) == {"emulated vs measured (published)"}
    md = (tmp_path / "t.md").read_text()
    assert md.startswith("**Realism, emulated vs measured**") and md.count("\n**") == 1
    assert "| fig7 | 2x2x8 | 797.0 | 900.0 | +12.92 | 44.3 / 50.0 (+5.7) |" in md


def test_realism_figure_one_marker_per_dataset_with_scores_in_the_legend(tmp_path):
    r = rows()
    summary, _ = T.emulator_realism_table(r, score(r.to_dict("records")))
    fig = Fg.realism_figure(r, summary)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert "emulated vs measured (published measurements)" in ax.get_title()
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "vTrain single node (A100): n=3, MAE 6.7%, Spearman 1.00" in labels
    assert "Fig. 7 (15B, H100): n=1, MAE 12.9%, Spearman -" in labels
    assert [len(c.get_offsets()) for c in ax.collections[1:]] == [1, 3]   # after the +-10% band
    Fg.save_figure(fig, tmp_path / "f.png", tmp_path / "f.pdf")
    assert (tmp_path / "f.png").read_bytes()[:4] == b"\x89PNG"


def test_readme_pastes_the_realism_summary_between_its_markers(tmp_path):
    r = rows()
    tables = tmp_path / "tables"
    tables.mkdir()
    summary, configs = T.emulator_realism_table(r, score(r.to_dict("records")))
    T.write_realism_table(summary, configs, tables / "emulator_realism.csv", tables / "emulator_realism.md",
                          "Realism, emulated vs measured")
    md = tmp_path / "README.md"
    md.write_text("intro\n<!-- tables:begin -->\nold\n<!-- tables:end -->\n"
                  "## Is the emulator realistic?\n<!-- realism:begin -->\nplaceholder\n<!-- realism:end -->\nend\n")
    readme.paste(md, tables)
    text = md.read_text()
    realism = text.split("<!-- realism:begin -->\n", 1)[1].split("<!-- realism:end -->", 1)[0]
    assert realism.startswith("**Realism, emulated vs measured**") and "placeholder" not in realism
    assert "| vtrain_single | 3 |" in realism and "2x2x8" not in realism   # the summary block only
    tables_part = text.split("<!-- tables:begin -->", 1)[1].split("<!-- tables:end -->", 1)[0]
    assert "#### `emulator_realism`" in tables_part and "vtrain_single" not in tables_part   # linked there
    assert text.endswith("<!-- realism:end -->\nend\n")
