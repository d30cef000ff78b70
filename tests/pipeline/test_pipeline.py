"""The Snakemake pipeline end to end on the tiny profile, then what a second run and a touched config re-run.

One tiny run (tiny emulated model, one seed, one real DLRM rank, two cheap
predictions) in a temporary working directory with its own copy of the Hydra
groups, so touching a group file never touches the repository.
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "resources" / "traces" / "real"
DLRM0 = TRACES / "param" / "dlrm_8rank" / "kineto" / "worker0_step_12.1694128201545.pt.trace.json.gz"
SYNC = TRACES / "hta" / "sync_fixtures" / "critical_path__cuda_event_sync__event_sync_trace.json.gz"
H200 = ROOT / "resources" / "traces" / "h200"

TABLES = ["replay_real", "replay_h200", "h200_whatif", "replay_microbench", "replay_emulated", "scaleout",
          "speed", "sharded_dp", "from_one_gpu", "fsdp_cpu_whatif", "moe_cpu_whatif", "ablation", "ablation_by_trace", "statistics", "transfer_real", "emulator_realism", "coverage",
          "intervals_real", "search", "endtoend"]
MEASURED = ("replay_real", "replay_microbench", "replay_h200", "h200_whatif", "transfer_real", "intervals_real",
            "fsdp_cpu_whatif", "moe_cpu_whatif")
BOTH = ("endtoend",)   # predicted from an EMULATED base vs MEASURED on hardware: says both
FIGURES = ["fig1_breakdown", "fig6_timeline", "fig7_scaleout", "fig_ablation", "fig_error_ci", "fig_h200_whatif",
           "fig_emulator_realism", "fig_coverage", "fig_endtoend"]
TWO_BLOCKS = ("transfer_real", "emulator_realism")   # a summary block above the rows
pytestmark = pytest.mark.slow


def snakemake(work: Path, *args: str, check: bool = True) -> str:
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(work), "--cores", "2",
           *args, "--configfile", str(work / "tiny.yaml")]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("LUMOS_CONFIG_DIR", None)
    proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed ({proc.returncode}):\n{out[-6000:]}")
    return out


def planned_jobs(dry_run_output: str) -> list[tuple[str, str]]:
    """(rule, output line) of every job a dry run would run."""
    return re.findall(r"^rule (\w+):\n(?:    .*\n)*?    output: (.*)$", dry_run_output, flags=re.M)


@contextlib.contextmanager
def edited(path: Path):
    """Change a config group file's content (Snakemake ignores a bare touch: it compares checksums), then restore it."""
    text = path.read_text()
    path.write_text(text + "# edited by the test\n")
    try:
        yield
    finally:
        path.write_text(text)


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("pipeline")
    shutil.copytree(ROOT / "config", work / "config", ignore=shutil.ignore_patterns("profile", "config.yaml"))
    (work / "traces").mkdir()
    for src in (DLRM0, SYNC):
        shutil.copy(src, work / "traces" / src.name)
    profile = yaml.safe_load((ROOT / "config" / "profile" / "tiny.yaml").read_text())
    profile["real_traces"] = {"dlrm_rank0": f"traces/{DLRM0.name}"}
    profile["microbenchmarks"] = {"hta_event_sync": f"traces/{SYNC.name}"}
    for run in profile["h200"]["traces"]:
        shutil.copytree(H200 / run, work / "h200" / run)
    profile["h200"]["dir"] = "h200"
    profile["fsdp_cpu"]["dir"] = str(ROOT / profile["fsdp_cpu"]["dir"])   # read only: the repository's
    for t in profile["fsdp_cpu"]["targets"].values():
        if "dir" in t:
            t["dir"] = str(ROOT / t["dir"])
    profile["moe_cpu"]["dir"] = str(ROOT / profile["moe_cpu"]["dir"])     # read only: the repository's
    peer = profile["endtoend"]["fig7"]["peer"]   # the repository's file (Fig. 7's measurements are the package's)
    peer["file"] = str(ROOT / peer["file"])
    (work / "tiny.yaml").write_text(yaml.safe_dump(profile))
    snakemake(work)
    return work


def test_every_table_is_written_with_finite_numbers(work):
    tables = work / "results" / "tiny" / "tables"
    assert sorted(p.stem for p in tables.glob("*.csv")) == sorted(TABLES)
    for name in TABLES:
        df = pd.read_csv(tables / f"{name}.csv")
        assert len(df) > 0, name
        md = (tables / f"{name}.md").read_text().splitlines()
        assert md[0].startswith("**"), name
        if name not in TWO_BLOCKS:
            assert len(md) == len(df) + 4, name
        if name in BOTH:
            assert "EMULATED" in md[0] and "MEASURED on hardware" in md[0], name
        elif name not in MEASURED:
            assert "emulated" in md[0], name
        else:
            assert "emulated" not in md[0], name
    h200 = pd.read_csv(tables / "replay_h200.csv")
    assert list(h200["trace"]) == ["h200_base_r0", "h200_base_r1", "h200_layers_1.5x_r0"]
    assert (h200["violations"] == 0).all() and (h200["error_pct"] == 0.0).all()
    assert set(h200["source"]) == {"measured on hardware (H200)"}
    assert h200["measured_iteration_ms"].iloc[0] == pytest.approx(130.775, abs=1e-3)   # the step period
    whatif = pd.read_csv(tables / "h200_whatif.csv")
    # from each base recording with its own profiled steps, then with both recordings' (h200.steps_pooled)
    assert list(zip(whatif["base"], whatif["steps_from"])) == [("base_r0", "own steps"), ("base_r1", "own steps"),
                                                         ("base_r0", "all base recordings"),
                                                         ("base_r1", "all base recordings")]
    assert set(whatif["target"]) == {"layers_1.5x"}
    assert whatif["n_measured"].iloc[0] == 3 and whatif["layers"].iloc[0] == 18
    # 18 layers: ~195 ms iterations, so the profiled window (390-975 ms of work) reaches into the clock's dip
    # (config/predict/clusters/h100_roce.yaml: 850-1000 ms at +10.8%); predicted 195.7 ms vs 193.3 measured (3 steps)
    assert whatif["role"].iloc[0] == "what-if" and 1.01 < whatif["clock_factor"].iloc[0] < 1.04
    assert abs(whatif["error_pct"].iloc[0]) < 3.0
    # the 90% interval of 100 sampled replays: host work one base step at a time, compute at one profiled
    # step's clock (the third step of 18 layers runs in the dip), so it spans the measured steps' clocks
    lo, hi = whatif["predicted_lo90_ms"].iloc[0], whatif["predicted_hi90_ms"].iloc[0]
    assert lo < whatif["predicted_iteration_ms"].iloc[0] < hi and whatif["width90_pct"].iloc[0] > 4.0
    # 2 of the 3 measured steps (191.4, 208.6 ms and one between; the interval about 193-209 ms: its upper
    # bound moved past the dip's step when two small gap modes of one step stopped being merged)
    assert whatif["measured_in_90_pct"].iloc[0] == pytest.approx(200 / 3, abs=1e-3)
    # EP 4 -> 2 of the MoE CPU captures over gloo (measured on this machine), calibrated on rounds r2 and r3
    moe = pd.read_csv(tables / "moe_cpu_whatif.csv")
    assert list(zip(moe["target"], moe["base"], moe["steps_from"])) == [("ep2", "ep4_r4", "own steps")]
    assert set(moe["source"]) == {"measured on this machine (CPU)"} and (moe["n_measured"] == 6).all()
    assert moe["predicted_iteration_ms"].iloc[0] == pytest.approx(102.270, abs=1e-3)
    assert moe["measured_iteration_ms"].iloc[0] == pytest.approx(120.411, abs=1e-3)
    # calibrated on each round alone: 97.0 and 107.5 ms; the measured mean lies above both
    assert (moe["pairs_lo_ms"].iloc[0], moe["pairs_hi_ms"].iloc[0]) == (pytest.approx(97.024, abs=1e-3),
                                                                      pytest.approx(107.516, abs=1e-3))
    assert not moe["mean_in_pairs"].iloc[0]
    # FSDP2 over gloo, 2 CPU ranks -> 1 (measured on this machine): from each recording, own and pooled host
    every = pd.read_csv(tables / "fsdp_cpu_whatif.csv")
    assert set(every["source"]) == {"measured on this machine (CPU)"}
    cpu = every[every["target"] == "one_rank"]
    assert list(zip(cpu["base"], cpu["steps_from"])) == [("full_2rank_r0", "own steps"), ("full_2rank_r1", "own steps"),
                                                   ("full_2rank_r0", "all base recordings"),
                                                   ("full_2rank_r1", "all base recordings")]
    assert (cpu["n_measured"] == 6).all()
    assert cpu["measured_iteration_ms"].iloc[0] == pytest.approx(17.470, abs=1e-3)   # both 1-rank recordings
    assert cpu["predicted_iteration_ms"].iloc[0] == pytest.approx(20.356, abs=1e-3)
    # 1 -> 2 ranks with --dp-calibration on the two other sizes (its pairs are not in the table's flags)
    up = every[every["target"] == "two_ranks"]
    assert list(zip(up["base"], up["steps_from"])) == [("h64_1rank_r0", "own steps"), ("h64_1rank_r1", "own steps"),
                                                 ("h64_1rank_r0", "all base recordings"),
                                                 ("h64_1rank_r1", "all base recordings")]
    assert set(up["flags"]) == {"--dp 2"} and (up["n_measured"] == 9).all()   # rank 0 of three 2-rank recordings
    assert up["predicted_iteration_ms"].iloc[2] == pytest.approx(50.616, abs=1e-3)
    # DDP 2 -> 1 (the shared host's slowdown calibrated), DDP and FSDP2 1 -> 4 (resources/traces/dp_cpu_sizes),
    # each beside the measured spread
    dp = every.set_index(["target", "base", "steps_from"])
    own, pooled = "own steps", "all base recordings"
    assert dp.loc[("ddp_one_rank", "ddp_h64_2rank_r0", own), "predicted_iteration_ms"] == pytest.approx(13.208, abs=1e-3)
    assert dp.loc[("ddp_one_rank", "ddp_h64_2rank_r0", pooled), "predicted_iteration_ms"] == pytest.approx(11.773, abs=1e-3)
    assert dp.loc[("ddp_four_ranks", "ddp_h64_1rank_r0", own), "predicted_iteration_ms"] == pytest.approx(64.755, abs=1e-3)
    assert dp.loc[("ddp_four_ranks", "ddp_h64_1rank_r0", pooled), "predicted_iteration_ms"] == pytest.approx(63.944, abs=1e-3)
    assert dp.loc[("four_ranks", "fsdp_h64_1rank_r0", own), "predicted_iteration_ms"] == pytest.approx(153.671, abs=1e-3)
    assert dp.loc[("four_ranks", "fsdp_h64_1rank_r0", pooled), "predicted_iteration_ms"] == pytest.approx(163.655, abs=1e-3)
    four = every[every["target"] == "ddp_four_ranks"]
    assert (four["n_measured"] == 9).all() and set(four["flags"]) == {"--dp 4"}
    # the four-rank recordings' nine steps (the run's critical rank): 45.87-97.79 ms, mean 64.54
    assert (four["measured_min_ms"].iloc[0], four["measured_max_ms"].iloc[0]) == (pytest.approx(45.867, abs=1e-3),
                                                                                   pytest.approx(97.789, abs=1e-3))
    assert four["spread_pct"].iloc[0] == pytest.approx(80.448, abs=1e-3)
    real = pd.read_csv(tables / "replay_real.csv")
    row = real.iloc[0]
    assert (row["trace"], row["rank"], row["step"], row["tasks"], row["violations"]) == ("dlrm_rank0", 0, 10, 1460, 0)
    assert row["measured_iteration_ms"] == pytest.approx(14.455, abs=1e-3)   # the step period (GPU span 13.009)
    assert row["error_pct"] == 0.0 and math.isfinite(row["dpro_error_pct"])
    emu = pd.read_csv(tables / "replay_emulated.csv")
    assert set(emu["simulator"]) == {"lumos", "dpro"} and set(emu["source"]) == {"emulated"}
    assert emu[["measured_iteration_ms_mean", "replayed_iteration_ms_mean", "error_pct_mean"]].notna().all().all()
    scale = pd.read_csv(tables / "scaleout.csv")
    assert list(scale["label"]) == ["2x2x8", "2x4x4", "4x2x4"] and list(scale["group"]) == ["DP", "PP", "TP"]
    cols = [f"{w}_{p}_ms_mean" for w in ("actual", "predicted")
            for p in ("iteration", "exposed_compute", "overlapped", "exposed_comm", "other")]
    assert all(math.isfinite(v) for v in scale[cols + ["error_pct_mean"]].to_numpy().ravel())
    assert (scale["actual_iteration_ms_mean"] > 0).all() and (scale["predicted_iteration_ms_mean"] > 0).all()
    abl = pd.read_csv(tables / "ablation.csv")
    full = abl[abl["variant"] == "lumos"]
    assert list(full["source"]) == ["real", "emulated"] and (full["abs_iteration_error_pct_mean"] < 1e-6).all()
    assert {"dpro", "drop:launch", "random:0.05", "gap:1000"} <= set(abl["variant"])
    per = pd.read_csv(tables / "ablation_by_trace.csv")
    # one row per (trace or emulated run, variant); each source has the full Lumos row at 0% error
    assert per.groupby("source")["variant"].nunique().min() == abl["variant"].nunique()
    assert (per.loc[per["variant"] == "lumos", "abs_iteration_error_pct_mean"] < 1e-6).all()
    transfer = pd.read_csv(tables / "transfer_real.csv")
    transfer = transfer[transfer["row"] != "summary"]
    assert sorted(set(transfer["trace"])) == ["h200_base_r0", "h200_layers_1.5x_r0"] and len(transfer) == 4
    assert (transfer["matched_share"] > 0.9).all() and transfer["lumos_err_pct"].abs().max() < 3.0
    speed = pd.read_csv(tables / "speed.csv")
    assert list(speed["label"]) == ["compute_2"] and speed["actual_iteration_ms_mean"].iloc[0] > 0
    assert abs(speed["error_pct_mean"].iloc[0]) < 10.0
    # the tiny base's DP change, emulated with FSDP2 and with the distributed optimizer, from each mode's base
    sharded = pd.read_csv(tables / "sharded_dp.csv")
    assert list(sharded["group"]) == ["DP (FSDP)", "DP (ZeRO-1)", "strategy (FSDP -> SHARD_GRAD_OP)"]
    assert list(sharded["label"]) == ["2x2x8", "2x2x8", "2x2x4"]
    assert (sharded["abs_error_pct_mean"] < 5.0).all()
    # the same DP target from a one-GPU base (its TP all-reduces, gradient buckets and pipeline sends added)
    one = pd.read_csv(tables / "from_one_gpu.csv")
    # and again with its collectives fitted on the emulated cluster's nccl-tests output (rule emulate_nccl_tests)
    assert list(one["group"]) == ["single GPU (1x1x1)", "single GPU + nccl-tests (1x1x1)", "multi-stage base (2x2x4)"]
    assert list(one["label"]) == ["2x2x8", "2x2x8", "2x2x8"]
    assert (one["abs_error_pct_mean"] < 10.0).all() and (one["predicted_exposed_comm_ms_mean"] > 0).all()
    assert len(list((work / "results" / "tiny" / "nccl_tests").rglob("all_reduce_perf.*.txt"))) == 5
    stats = pd.read_csv(tables / "statistics.csv")
    assert len(stats) == 5 and stats["actual_iteration_ms_mean"].gt(0).all()   # replay x 2, predict DP / PP / TP
    assert list(stats["experiment"])[-1] == "predict (TP)"


def test_coverage_table_counts_the_other_seeds_inside_each_interval(work):
    r = work / "results" / "tiny"
    cov = pd.read_csv(r / "tables" / "coverage.csv")
    rows = cov[~cov["experiment"].str.startswith("all: ")]
    assert list(rows["experiment"]) == ["base", "2x2x8", "2x4x4"] and list(rows["group"]) == ["replay", "DP", "PP"]
    assert (rows["seeds"] == 4).all() and (rows["samples"] == 100).all() and set(cov["source"]) == {"emulated"}
    assert list(cov.loc[cov["experiment"].str.startswith("all: "), "experiment"]) == [
        "all: replay", "all: DP", "all: PP", "all: scale-out (DP, PP, DP+PP)"]   # "all predictions" is the same rows
    for _, row in rows.iterrows():
        actual = pd.read_csv(r / "coverage" / "actuals" / f"{row['run']}.csv")
        assert list(actual["seed"]) == [1000, 1001, 1002, 1003]   # not the fit seed (0)
        x = actual["iteration_us"] / 1e3
        inside = ((x >= row["lo90_ms"] - 1e-9) & (x <= row["hi90_ms"] + 1e-9)).mean()
        assert row["coverage90_pct"] == pytest.approx(100 * inside)
        assert row["coverage50_pct"] <= row["coverage90_pct"] <= row["coverage95_pct"]
        assert row["lo90_ms"] < row["median_ms"] < row["hi90_ms"]
    real = pd.read_csv(r / "tables" / "intervals_real.csv")
    row = real.iloc[0]   # DLRM rank 0: one profiled step (10), so no other step to count
    assert (len(real), row["trace"], row["step"], row["steps_profiled"], row["other_steps"]) == (1, "dlrm_rank0", 10, 1, 0)
    assert row["lo90_ms"] < row["median_ms"] < row["hi90_ms"] and 0 < row["width90_pct"] < 50
    assert math.isnan(row["inside90_pct"]) and row["samples"] == 100
    # the base row's point is the Lumos replay of seed 0's GPU span, which reproduces the run exactly
    from lumos.emulator.actuals import emulate_actuals

    seed0 = emulate_actuals(["model=tiny", "parallel.tp=2", "parallel.pp=2", "parallel.dp=4"], [0])[0]
    assert rows.iloc[0]["point_ms"] == pytest.approx(seed0["iteration_us"] / 1e3, abs=1e-3)   # CSV: 6 digits


def test_emulator_realism_table_is_emulated_vs_the_published_measurements(work):
    from lumos.emulator.measured import fig7_points, stratified, vtrain_points

    tables = work / "results" / "tiny" / "tables"
    sample = {p.label: p for p in stratified(vtrain_points(), 12)}   # the tiny profile's vtrain_sample
    assert len(sample) == 36   # one row from each of vTrain's 36 (TP, PP, DP, hidden) strata
    df = pd.read_csv(tables / "emulator_realism.csv")
    summary = df[df["row"] == "summary"].set_index("dataset")
    assert list(summary.index) == ["fig7", "vtrain_single"]   # no fig1 in the tiny profile
    assert list(summary["n"]) == [4, 36]
    assert summary[["mean_abs_error_pct", "worst_abs_error_pct", "spearman"]].notna().all().all()
    assert (summary["worst_abs_error_pct"] >= summary["mean_abs_error_pct"]).all()
    configs = df[df["row"] == "configuration"].set_index("config")
    assert list(configs.index) == ["2x2x8", "2x2x16", "2x2x32", "2x4x4"] and set(configs["dataset"]) == {"fig7"}
    measured = {p.label: p for p in fig7_points()}
    for label, p in measured.items():
        assert configs.loc[label, "measured_ms"] == p.total_ms
        for part, ms in p.parts_ms.items():
            assert configs.loc[label, f"measured_{part}_share_pct"] == pytest.approx(100 * ms / p.total_ms, abs=1e-4)
    assert configs.loc["2x2x8", "measured_ms"] == 797.0
    assert configs.loc["2x2x8", "measured_exposed_comm_share_pct"] == pytest.approx(36.512, abs=1e-3)   # 291 / 797
    md = (tables / "emulator_realism.md").read_text()
    assert md.count("emulated vs measured") >= 2 and md.count("\n**") == 1   # two titled blocks
    assert "| fig7 | 2x2x8 | 797.0 |" in md
    rows = pd.read_csv(work / "results" / "tiny" / "data" / "emulator_realism.csv")
    assert len(rows) == 40 and list(rows["dataset"]) == ["fig7"] * 4 + ["vtrain_single"] * 36
    vt = rows[rows["dataset"] == "vtrain_single"]
    assert list(vt["config"]) == list(sample) and list(vt["point"]) == list(range(36))   # both shards, in order
    assert list(vt["measured_ms"]) == [p.total_ms for p in sample.values()]   # full precision, as published
    assert (rows["emulated_ms"] > 0).all()


def test_endtoend_table_scores_predictions_from_the_emulated_base_against_fig7(work):
    import json

    from lumos.emulator.measured import fig7_points

    r = work / "results" / "tiny"
    df = pd.read_csv(r / "tables" / "endtoend.csv")
    rows = df[df["row"] == "target"].set_index("target")
    assert list(rows.index) == ["2x2x8", "2x2x16", "2x2x32", "2x4x4"] and (rows["n"] == 1).all()
    measured = {p.label: p for p in fig7_points()}
    for target, row in rows.iterrows():
        # the tiny profile's own route: its base emulated with the H100 profile, the target predicted from it
        doc = json.loads((r / "endtoend" / "fig7" / "predict" / f"gpt3_15b-{target}" / "seed0.json").read_text())
        assert "measured" not in doc   # no emulated actual: the reference is the hardware
        pred = doc["predicted"]["iteration_us"] / 1e3
        m = measured[target]
        assert row["measured_iteration_ms"] == m.total_ms
        assert row["predicted_iteration_ms_mean"] == pytest.approx(pred, rel=1e-5)   # CSV: 6 digits
        assert row["error_pct_mean"] == pytest.approx(100 * (pred - m.total_ms) / m.total_ms, abs=1e-3)
        for part, ms in m.parts_ms.items():
            assert row[f"measured_{part}_ms"] == ms
            got = 100 * (doc["predicted"][f"{part}_us"] / 1e3 - ms) / m.total_ms
            assert row[f"{part}_error_pts_mean"] == pytest.approx(got, abs=1e-3)
        assert abs(row["error_pct_mean"]) < 15
    assert list(rows["peer_group"]) == ["DP", "DP", "DP", "PP"]
    assert list(rows["peer_abs_error_max_pct"]) == [2.98, 2.98, 2.98, 6.83]
    summary = df[df["row"] == "summary"].iloc[0]
    assert summary["abs_error_pct_mean"] == pytest.approx(rows["abs_error_pct_mean"].mean(), abs=1e-4)
    assert summary["peer_abs_error_mean_pct"] == 3.3
    assert set(df["rests_on"]) == {"predicted from an EMULATED base vs MEASURED on hardware (paper)"}
    resolved = yaml.safe_load((r / "endtoend" / "fig7" / "base" / "seed0" / "config.resolved.yaml").read_text())
    assert (resolved["model"]["name"], resolved["parallel"]["dp"], resolved["seed"]) == ("gpt3_15b", 4, 0)
    md = (r / "tables" / "endtoend.md").read_text()
    assert "| fig7 | gpt3_15b-2x2x4 | 2x2x8 | 1 |" in md and "| 797.0 |" in md


def test_every_figure_is_written(work):
    for name in FIGURES:
        png = work / "figures" / "tiny" / f"{name}.png"
        pdf = png.with_suffix(".pdf")
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000, name
        assert pdf.read_bytes()[:5] == b"%PDF-", name


def report_scripts(html: str, ids=("results", "categories", "workflow-desc")) -> dict:
    """The JSON a Snakemake report's page is drawn from (`<script id="ID">var NAME = JSON;</script>`), by id."""
    found = dict(re.findall(r'<script id="([\w-]+)">\s*var \w+ = (.*?);\s*</script>', html, flags=re.S))
    return {sid: json.loads(found[sid]) for sid in ids}


def test_the_report_holds_every_table_and_figure_with_what_it_rests_on(work):
    out = snakemake(work, "--report", "report.html")
    assert "Report created." in out
    html = (work / "report.html").read_text()
    assert html.startswith("<!doctype html>") and html.rstrip().endswith("</html>")
    data = report_scripts(html)
    results, categories = data["results"], data["categories"]
    tables = {f"results/tiny/tables/{n}.csv" for n in TABLES}
    figures = {f"figures/tiny/{n}.png" for n in FIGURES}
    # every table and figure the run wrote, nothing else (the Markdown and PDF copies stay out)
    written = {str(p.relative_to(work)) for p in [*(work / "results/tiny/tables").glob("*.csv"),
                                                  *(work / "figures/tiny").glob("*.png")]}
    assert set(results) == tables | figures == written
    filed = {path: (cat, sub) for cat, subs in categories.items() for sub, paths in subs.items() for path in paths}
    assert set(filed) == set(results)
    for path, res in results.items():
        name = Path(path).stem
        # embedded, byte for byte: the one file is the whole report
        head, b64 = res["data_uri"].split(";base64,")
        assert head.startswith("data:image/png" if path in figures else "data:text/csv"), path
        assert base64.b64decode(b64) == (work / path).read_bytes(), path
        caption = res["caption"]
        assert path in caption and "tiny" in caption, path   # names its file and tag
        rests = re.search(r"<em>Rests on:</em>(.*?)</p>", caption, flags=re.S).group(1)
        subcategory = filed[path][1]
        if name in BOTH or name in ("emulator_realism", "fig_emulator_realism", "fig_endtoend"):
            assert "EMULATED" in rests.upper() and "MEASURED" in rests.upper(), path
            assert subcategory.startswith("emulated") and subcategory.endswith("measured on hardware"), path
        elif name in MEASURED + ("fig_h200_whatif",):
            assert "emulated" not in rests and "emulated" not in subcategory, path
        elif name in ("ablation", "ablation_by_trace", "fig_ablation", "fig6_timeline"):
            assert "real trace" in rests and "emulated" in rests and subcategory == "real traces and emulated", path
        else:
            assert "emulated" in rests and subcategory == "emulated", path
    assert filed["results/tiny/tables/replay_h200.csv"] == ("Replay", "measured on hardware (H200)")
    assert filed["results/tiny/tables/fsdp_cpu_whatif.csv"] == ("Prediction", "measured on this machine (CPU)")
    assert filed["results/tiny/tables/moe_cpu_whatif.csv"] == ("Prediction", "measured on this machine (CPU)")
    assert filed["figures/tiny/fig_coverage.png"] == ("Intervals", "emulated")
    assert "Where to look" in data["workflow-desc"] and "<tt class=\"docutils literal\">tiny</tt>" in data["workflow-desc"]


def test_the_transfer_panel_of_a_one_step_trace_is_empty(work):
    # DLRM rank 0 (the tiny profile's timeline_real) holds step 10 only: nothing to transfer,
    # so the Fig. 6 transfer panel gets the columns and no rows, and says so
    df = pd.read_csv(work / "results" / "tiny" / "timeline" / "transfer.csv")
    assert df.empty and {"step", "durations_from_step", "curve", "iteration_ms", "error_pct", "duty"} <= set(df)


def test_each_job_saved_its_resolved_config_and_log(work):
    r = work / "results" / "tiny"
    resolved = (r / "replay" / "real" / "dlrm_rank0" / "dpro.config.resolved.yaml").read_text()
    assert "name: dpro" in resolved and "name: full" in resolved
    emulated = yaml.safe_load((r / "emulated" / "tiny-2x2x8" / "seed0" / "config.resolved.yaml").read_text())
    assert (emulated["model"]["name"], emulated["parallel"]["dp"], emulated["seed"]) == ("tiny", 8, 0)
    manifest = yaml.safe_load((r / "emulated" / "tiny-2x2x8" / "seed0" / "manifest.json").read_text())
    assert manifest["emulated"] is True
    # one job predicted every target of seed 0 (a batch), each target with its own JSON and resolved config
    log = (r / "logs" / "predict" / "batch_1seeds" / "seed0.log").read_text()
    assert "done in" in log and all(f"{t}: predicted vs actual" in log for t in ("tiny-2x2x8", "tiny-2x4x4", "tiny-4x2x4"))
    assert all((r / "predict" / t / "seed0.config.resolved.yaml").exists() for t in ("tiny-2x2x8", "tiny-4x2x4"))
    assert len(list((r / "benchmarks").rglob("*.tsv"))) >= 20
    # the speed variant, emulated by the same shim as every other run: its cluster scaled, said in its header
    text = (r / "emulated_speed" / "compute_2" / "seed0" / "config.resolved.yaml").read_text()
    assert "# cluster scaled by {'peak_bf16_tflops': 2.0, 'hbm_tb_s': 2.0, 'nvlink_busbw_gb_s': 1.0" in text
    scaled = yaml.safe_load(text)["cluster"]
    assert scaled["peak_bf16_tflops"] == pytest.approx(2 * emulated["cluster"]["peak_bf16_tflops"])
    assert scaled["nic_gbps"] == pytest.approx(emulated["cluster"]["nic_gbps"])


def test_second_run_does_nothing(work):
    assert "Nothing to be done" in snakemake(work, "-n")


def test_touching_one_group_reruns_only_its_dependents(work):
    with edited(work / "config" / "simulator" / "dpro.yaml"):
        jobs = planned_jobs(snakemake(work, "-n"))
    rules = {rule for rule, _ in jobs}
    # one replay job per trace group and simulator, one per emulated run and simulator
    assert {"replay_real", "replay_microbench", "replay_h200", "replay_emulated_tiny_2x2x4", "collect", "table",
            "figure"} <= rules
    assert not {r for r in rules if r.startswith(("emulate", "predict"))}
    assert not rules & {"ablation_real", "ablation_emulated", "timeline"}
    replayed = [f for rule, out in jobs if rule.startswith("replay_") for f in out.split(", ") if f.endswith(".json")]
    # dlrm, sync fixture, three H200 recordings, tiny run: the dPRO-style replays only
    assert len(replayed) == 6 and all(f.endswith("/dpro.json") for f in replayed)
    tables = sorted(re.search(r"tables/(\w+)\.csv", out).group(1) for rule, out in jobs if rule == "table")
    assert tables == ["replay_emulated", "replay_h200", "replay_microbench", "replay_real", "statistics"]
    assert "Nothing to be done" in snakemake(work, "-n")


def test_touching_the_a100_cluster_reruns_only_the_vtrain_realism(work):
    with edited(work / "config" / "cluster" / "a100_vtrain.yaml"):
        jobs = planned_jobs(snakemake(work, "-n"))
    # a recalibrated A100 profile re-runs both vTrain shards and what is made of them; not Fig. 7 (H100)
    assert sorted(rule for rule, _ in jobs) == ["figure", "realism_vtrain", "realism_vtrain", "table_emulator_realism"]
    assert [out for rule, out in jobs if rule == "figure"][0].startswith("figures/tiny/fig_emulator_realism.png")


def test_touching_the_ablation_experiment_reruns_only_ablations(work):
    with edited(work / "config" / "experiment" / "ablation.yaml"):
        jobs = planned_jobs(snakemake(work, "-n"))
    assert sorted(rule for rule, _ in jobs) == ["ablation_emulated", "ablation_real", "collect", "figure", "table",
                                                "table"]
    assert [out for rule, out in jobs if rule == "figure"][0].startswith("figures/tiny/fig_ablation.png")


def test_tag_and_overrides_write_under_their_own_tag(work):
    out = snakemake(work, "-n", "--config", "tag=mytag", 'overrides=["ablation=no_inter_stream"]')
    jobs = planned_jobs(out)
    assert jobs and all("results/mytag/" in o or "figures/mytag/" in o for _, o in jobs)
    # the override reaches the replays (their inputs name the ablation group file) but not the emulator
    blocks = re.findall(r"^rule (\w+):\n    input: (.*)$", out, flags=re.M)
    replay_inputs = [inp for rule, inp in blocks if rule.startswith("replay_emulated")]
    emulate_inputs = [inp for rule, inp in blocks if rule.startswith("emulate")]
    assert replay_inputs and all("config/ablation/no_inter_stream.yaml" in i for i in replay_inputs)
    assert emulate_inputs and not any("ablation" in i for i in emulate_inputs)
