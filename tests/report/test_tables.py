"""Rows from result JSON, the presentation tables and their Markdown, on hand-made documents."""

import math

import pandas as pd
import pytest

from lumos.report import tables as T


def bd(it, ec, ov, cm, ot):
    return {"iteration_us": it, "exposed_compute_us": ec, "overlapped_us": ov, "exposed_comm_us": cm,
            "other_us": ot}


def rank_doc(rank, measured, replayed):
    return {"rank": rank, "measured": measured, "replayed": replayed, "error_pct": 0.0,
            "graph": {"rank": rank, "step": 7, "tasks": 100 + rank, "edges": {"launch": 10, "sync": 2},
                      "inferred_edges": 3, "violations": 0}}


def test_replay_rows_per_rank_with_errors():
    doc = {"measured": bd(1000, 500, 100, 300, 100), "replayed": bd(900, 500, 200, 100, 100),
           "ranks": [rank_doc(0, bd(1000, 500, 100, 300, 100), bd(900, 500, 200, 100, 100)),
                     rank_doc(1, bd(800, 400, 100, 200, 100), bd(800, 400, 100, 200, 100))]}
    rows = T.replay_rows(doc, {"trace": "t", "simulator": "lumos"})
    assert [r["rank"] for r in rows] == [0, 1]
    r0 = rows[0]
    assert (r0["trace"], r0["step"], r0["tasks"], r0["edges"], r0["inferred_edges"]) == ("t", 7, 100, 12, 3)
    assert r0["measured_iteration_ms"] == 1.0 and r0["replayed_iteration_ms"] == 0.9
    assert r0["error_pct"] == pytest.approx(-10.0)
    assert r0["overlapped_error_pct"] == pytest.approx(100.0)
    assert r0["exposed_comm_error_pct"] == pytest.approx(-200 / 3)
    assert r0["component_l1_pct"] == pytest.approx(30.0)  # |0| + |100| + |200| + |0| over 1000
    assert rows[1]["error_pct"] == 0.0
    run = T.run_replay_row(doc, {"run": "r"})
    assert run["ranks"] == 2 and run["error_pct"] == pytest.approx(-10.0)


def test_prediction_table_means_and_spread():
    rows = []
    for seed, (actual, pred) in enumerate([(1000, 1100), (1200, 1140)]):
        doc = {"base": "b", "target": "t", "measured": bd(actual, actual, 0, 0, 0), "predicted": bd(pred, pred, 0, 0, 0)}
        rows.append(T.prediction_row(doc, {"label": "2x2x8", "group": "DP", "run": "m-2x2x8", "seed": seed}))
    df = pd.DataFrame(rows)
    assert list(df["error_pct"]) == pytest.approx([10.0, -5.0])
    tab = T.prediction_table(df)
    assert len(tab) == 1
    row = tab.iloc[0]
    assert row["source"] == "emulated" and row["n"] == 2
    assert row["actual_iteration_ms_mean"] == pytest.approx(1.1)
    assert row["error_pct_mean"] == pytest.approx(2.5)
    assert row["abs_error_pct_mean"] == pytest.approx(7.5)
    # sample std of (1.0, 1.2) ms is 0.1414; CV = 12.86 %
    assert row["actual_iteration_cv_pct"] == pytest.approx(100 * math.sqrt(0.02) / 1.1)


def test_statistics_table_marks_errors_beyond_noise():
    rows = [{"group": "DP", "label": "a", "run": "m-a", "actual_iteration_ms": a, "error_pct": e}
            for a, e in [(100.0, 10.0), (101.0, 12.0), (99.0, 11.0)]]
    rows += [{"group": "DP", "label": "b", "run": "m-b", "actual_iteration_ms": a, "error_pct": e}
             for a, e in [(100.0, 0.5), (110.0, -0.5), (90.0, 0.2)]]
    st = T.statistics_table(None, [pd.DataFrame(rows)])
    assert list(st["config"]) == ["a m-a", "b m-b"]
    assert list(st["beyond_noise"]) == [True, False]  # 11% vs 2 x 1% CV; 0.4% vs 2 x 10% CV
    assert st.loc[0, "actual_iteration_ms_std"] == pytest.approx(1.0)
    assert st.loc[1, "actual_iteration_cv_pct"] == pytest.approx(10.0)
    assert st.loc[0, "abs_error_pct_lo"] <= 11.0 <= st.loc[0, "abs_error_pct_hi"]


def test_ablation_summary_counts_failures():
    df = pd.DataFrame({"source": ["a", "a", "a", "b"], "emulated": [False, False, False, True],
                       "variant": ["lumos", "random:0.05", "random:0.05", "lumos"],
                       "iteration_error_pct": [0.0, 4.0, float("nan"), -2.0], "component_l1_pct": [0.0, 5.0, 1.0, 3.0],
                       "cp_precision": [1.0, 0.5, 0.4, 1.0], "cp_recall": [1.0, 0.5, 0.4, 1.0]})
    out = T.ablation_summary(df)
    assert list(zip(out["source"], out["variant"])) == [("real", "lumos"), ("real", "random:0.05"),
                                                        ("emulated", "lumos")]
    assert list(out["failed"]) == [0, 1, 0]
    assert list(out["abs_iteration_error_pct_mean"]) == [0.0, 4.0, 2.0]


def test_markdown_folds_intervals_and_titles():
    df = pd.DataFrame({"source": ["emulated"], "run": ["x"], "n": [3], "error_pct_mean": [1.234],
                       "error_pct_lo": [0.5], "error_pct_hi": [2.0], "measured_iteration_ms_mean": [12.3456]})
    md = T.to_markdown(df, "Title (emulated)")
    lines = md.splitlines()
    assert lines[0] == "**Title (emulated)**"
    assert lines[2] == "| source | run | n | error_pct [95% CI] | measured_iteration_ms |"
    assert lines[4] == "| emulated | x | 3 | +1.23 [+0.50, +2.00] | 12.346 |"


def test_write_table_round_trips_csv(tmp_path):
    df = pd.DataFrame({"a": [1, 2], "b_ms": [0.5, float("nan")]})
    T.write_table(df, tmp_path / "t.csv", tmp_path / "t.md", "T")
    back = pd.read_csv(tmp_path / "t.csv")
    assert list(back["a"]) == [1, 2] and back["b_ms"].iloc[0] == 0.5 and math.isnan(back["b_ms"].iloc[1])
    assert (tmp_path / "t.md").read_text().splitlines()[-1] == "| 2 | - |"


def test_search_table_ranks_and_correlates():
    from lumos.report.tables import search_table

    rows = []
    # four layouts predicted 100 < 120 < 130 < 150 ms; emulated (two seeds, +0 and +2 ms) 111, 119, 141, 136
    for rank, (pred, em) in enumerate([(100, 110), (120, 118), (130, 140), (150, 135)], 1):
        for seed, extra in ((0, 0), (1, 2)):
            rows.append(dict(base="b", gpus=8, predicted_rank=rank, tp=2, pp=rank, dp=1, micro_batch=1,
                             microbatches=4, memory_gib_per_gpu=10.0, predicted_us=pred * 1e3, seed=seed,
                             emulated_us=(em + extra) * 1e3))
    t = search_table(pd.DataFrame(rows))
    assert t["emulated_ms"].tolist()[:4] == [111.0, 119.0, 141.0, 136.0]
    assert t["emulated_rank"].tolist()[:4] == [1.0, 2.0, 4.0, 3.0]
    assert t["error_pct"].tolist()[:2] == pytest.approx([100 * (100 - 111) / 111, 100 * (120 - 119) / 119])
    last = t.iloc[-1]
    assert last["predicted_rank"] == "spearman" and last["emulated_rank"] == 0.8   # one swap of four
    assert last["error_pct"] == pytest.approx(t["error_pct"][:4].abs().mean())
