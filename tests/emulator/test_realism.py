"""The published measurements the emulator is checked against, the realism scorer and `lumos emulate --realism`.

Facts about the shipped files (resources/measurements/): vTrain's 1,440 single-node A100 rows in 36
equal (TP, PP, DP, hidden) strata of 40, and the paper's Fig. 7 bar labels.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from lumos.cli import main
from lumos.emulator import realism
from lumos.emulator.measured import (VTRAIN_CSV, MeasurementError, fig1_point, fig7_points, stratified,
                                     vtrain_points)

ROOT = Path(__file__).resolve().parents[2]
VTRAIN_HEAD = VTRAIN_CSV.read_text(encoding="utf-8-sig").splitlines()[0]


# ---- loading ------------------------------------------------------------------------------------

def test_vtrain_rows_load_as_emulate_overrides():
    v = vtrain_points()
    assert len(v) == 1440 and {p.dataset for p in v} == {"vtrain_single"}
    first = v[0]   # 2 GPUs, gbs 16, mbs 8, hidden 1024, 16 heads, 24 layers, seq 1024, TP1 DP1 PP2
    assert first.label == "h1024_L24_mbs8_gbs16_1x2x1"
    assert first.total_ms == 372.160408 and first.parts_ms == {} and first.strata == (1, 2, 1, 1024)
    assert first.overrides == (
        "cluster=a100_vtrain", "training=vtrain", "model=gpt3_15b", "model.name=vtrain", "model.num_layers=24",
        "model.hidden=1024", "model.ffn_hidden=4096", "model.num_heads=16", "model.head_dim=64",
        "model.seq_length=1024", "model.micro_batch_size=8", "model.global_batch_size=16",
        "parallel.tp=1", "parallel.pp=2", "parallel.dp=1")
    assert v[1].total_ms == 219.732754 and v[1].label == "h1024_L24_mbs4_gbs32_2x2x2"


def test_fig7_and_fig1_points_are_the_papers_bar_labels():
    f7 = {p.label: p for p in fig7_points()}
    assert list(f7) == ["2x2x8", "2x2x16", "2x2x32", "2x4x4"]
    p = f7["2x2x8"]
    assert p.total_ms == 797.0
    assert p.parts_ms == {"exposed_compute": 353.0, "overlapped": 123.0, "exposed_comm": 291.0, "other": 30.0}
    assert p.overrides == ("model=gpt3_15b", "parallel.tp=2", "parallel.pp=2", "parallel.dp=8")
    assert [q.total_ms for q in f7.values()] == [797.0, 813.0, 864.0, 872.0]
    assert all(sum(q.parts_ms.values()) == q.total_ms for q in f7.values())
    f1 = fig1_point()
    assert (f1.dataset, f1.total_ms, f1.parts_ms["exposed_comm"]) == ("fig1", 7611.0, 2261.0)


def test_a_corrupted_header_names_the_file(tmp_path):
    bad = tmp_path / "bad_header.csv"
    bad.write_text(VTRAIN_HEAD.replace("micro batch", "micro-batch") + "\n2,16,8,1024,16,24,1024,1,1,2,372.16\n")
    with pytest.raises(MeasurementError, match="bad_header.csv: header"):
        vtrain_points(bad)


def test_a_corrupted_row_names_the_file_and_line(tmp_path):
    bad = tmp_path / "bad_row.csv"
    bad.write_text(VTRAIN_HEAD + "\n2,16,8,1024,16,24,1024,1,1,2,372.16\n8,32,4,1024,16,x,1024,2,2,2,219.7\n")
    with pytest.raises(MeasurementError, match=r"bad_row.csv: line 3 is not 10 integers"):
        vtrain_points(bad)
    gpus = tmp_path / "bad_gpus.csv"   # 4 GPUs cannot be TP2 x DP2 x PP2
    gpus.write_text(VTRAIN_HEAD + "\n4,32,4,1024,16,24,1024,2,2,2,219.7\n")
    with pytest.raises(MeasurementError, match=r"bad_gpus.csv: line 2: 4 GPUs != tp\*dp\*pp=8"):
        vtrain_points(gpus)


# ---- stratified samples, data sets, shards ---------------------------------------------------------

def test_stratified_is_deterministic_and_covers_every_stratum():
    v = vtrain_points()
    strata = {p.strata for p in v}
    assert len(strata) == 36
    a, b = stratified(v, 200, seed=0), stratified(v, 200, seed=0)
    assert [p.label for p in a] == [p.label for p in b]
    assert [p.label for p in a] != [p.label for p in stratified(v, 200, seed=1)]
    for n in (100, 200, 720):
        s = stratified(v, n)
        assert {p.strata for p in s} == strata
        assert len(s) == 36 * round(n / 36) and abs(len(s) - n) <= 18   # 36 strata of 40: round(n / 36) each
        assert len({p.label for p in s}) == len(s)
    assert len(stratified(v, 12)) == 36   # never below one per stratum
    assert stratified(v, 5000) == v


def test_shards_partition_the_points_in_order():
    pts = realism.dataset_points("vtrain_single", sample=100)
    shards = [realism.shard(pts, k, 3) for k in range(3)]
    assert [len(s) for s in shards] == [36, 36, 36]
    assert shards[1][:2] == [pts[1], pts[4]]
    assert sorted(p.label for s in shards for p in s) == sorted(p.label for p in pts)
    with pytest.raises(ValueError, match="shard 3"):
        realism.shard(pts, 3, 3)
    assert [p.label for p in realism.dataset_points("fig7")] == ["2x2x8", "2x2x16", "2x2x32", "2x4x4"]
    assert realism.dataset_files("fig1") == [] and realism.dataset_files("vtrain_single") == [VTRAIN_CSV]
    with pytest.raises(ValueError, match="unknown data set 'fig9'"):
        realism.dataset_points("fig9")


# ---- scoring ------------------------------------------------------------------------------------

def test_score_on_hand_made_rows():
    rows = [{"dataset": "a", "measured_ms": m, "emulated_ms": e}
            for m, e in ((100.0, 110.0), (200.0, 90.0), (400.0, 400.0), (800.0, 1000.0))]
    rows += [{"dataset": "b", "measured_ms": 50.0, "emulated_ms": 40.0},
             {"dataset": "b", "measured_ms": 60.0, "emulated_ms": 66.0}]
    s = realism.score(rows)
    assert list(s) == ["a", "b"]
    a = s["a"]   # errors +10, -55, 0, +25 %
    assert a["n"] == 4
    assert a["mean_abs_err_pct"] == pytest.approx(22.5)
    assert a["median_abs_err_pct"] == pytest.approx(17.5)
    assert a["worst_abs_err_pct"] == pytest.approx(55.0)
    assert a["mean_err_pct"] == pytest.approx(-5.0)
    # ranks measured 1 2 3 4, emulated 2 1 3 4: rho = 1 - 6 * (1 + 1) / (4 * 15) = 0.8
    assert a["spearman"] == pytest.approx(0.8)
    assert s["b"]["mean_abs_err_pct"] == pytest.approx(15.0) and math.isnan(s["b"]["spearman"])   # 2 points


# ---- the command ----------------------------------------------------------------------------------

def test_realism_command_passes_its_flags_through(monkeypatch, tmp_path, capsys):
    v = vtrain_points()
    small = sorted(v, key=lambda p: p.total_ms)[:3]   # the three fastest vTrain rows
    picked = [fig7_points()[0]] + small
    seen = {}

    def points(sample, datasets=realism.DATASETS):
        seen.update(sample=sample, datasets=list(datasets))
        return picked

    monkeypatch.setattr(realism, "points", points)
    out = tmp_path / "rows.csv"
    assert main(["emulate", "--realism", "--sample", "4", "--workers", "1", "--out", str(out)]) == 0
    assert seen == {"sample": 4, "datasets": ["fig1", "fig7", "vtrain_single", "sc21_table1", "sc21_table2",
                                              "korthikanti_2022"]}
    printed = capsys.readouterr().out
    assert "EMULATED vs MEASURED" in printed
    lines = {ln.split()[0]: ln.split() for ln in printed.splitlines() if ln.startswith(("fig7", "vtrain_single"))}
    assert lines["fig7"][1] == "1" and lines["vtrain_single"][1] == "3"
    df = pd.read_csv(out)
    assert list(df["config"]) == [p.label for p in picked]
    assert list(df["measured_ms"]) == [p.total_ms for p in picked]
    assert (df["emulated_ms"] > 0).all() and df["measured_exposed_comm_ms"].iloc[0] == 291.0


def test_realism_flags_need_realism(tmp_path, capsys):
    assert main(["emulate", "model=tiny", f"out={tmp_path}", "--sample", "4"]) == 2
    assert "--sample only go with --realism" in capsys.readouterr().err


def test_realism_command_end_to_end_on_fig7(tmp_path):
    out = tmp_path / "fig7.csv"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", "lumos.cli", "emulate", "--realism", "--datasets", "fig7",
                           "--workers", "1", "--out", str(out)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = [ln.split() for ln in proc.stdout.splitlines() if ln.startswith("fig7")]
    assert len(rows) == 1 and rows[0][1] == "4"
    df = pd.read_csv(out)
    assert list(df["config"]) == ["2x2x8", "2x2x16", "2x2x32", "2x4x4"]
    assert list(df["measured_ms"]) == [797.0, 813.0, 864.0, 872.0]
    assert list(df["measured_exposed_comm_ms"]) == [291.0, 307.0, 358.0, 378.0]
    parts = df[[f"emulated_{p}_ms" for p in ("exposed_compute", "overlapped", "exposed_comm", "other")]].sum(axis=1)
    assert parts.to_numpy() == pytest.approx(df["emulated_breakdown_total_ms"].to_numpy(), rel=1e-6)


# ---- vTrain's setup on a tiny model -------------------------------------------------------------------

TINY_VTRAIN = ["model=gpt3_15b", "model.name=vtrain", "model.num_layers=2", "model.hidden=256",
               "model.ffn_hidden=1024", "model.num_heads=4", "model.head_dim=64", "model.seq_length=256",
               "model.micro_batch_size=2", "model.global_batch_size=8", "parallel.tp=1", "parallel.pp=1",
               "parallel.dp=2", "seed=0"]


def _gemm_names(out: Path) -> set:
    with gzip.open(out / "rank0.json.gz", "rb") as fh:
        events = json.load(fh)["traceEvents"]
    return {e["name"] for e in events if e.get("cat") == "kernel" and "gemm" in e["name"]}


def test_vtrain_command_on_a_tiny_model_emulates_an_a100(tmp_path):
    a100, h100 = tmp_path / "a100", tmp_path / "h100"
    assert main(["emulate", "cluster=a100_vtrain", "training=vtrain", *TINY_VTRAIN, f"out={a100}", "--quiet"]) == 0
    m = json.loads((a100 / "manifest.json").read_text())
    assert m["iteration_us"] > 0 and m["num_microbatches"] == 2 and m["world_size"] == 2
    names = _gemm_names(a100)
    assert names and all(n.startswith("ampere_bf16_s16816gemm") for n in names)
    # the same model on the default (H100) cluster has no Ampere kernels: the names come from the cluster
    assert main(["emulate", *TINY_VTRAIN, f"out={h100}", "--quiet"]) == 0
    assert _gemm_names(h100) and not any(n.startswith("ampere") for n in _gemm_names(h100))


# ---- the multi-node Selene data sets (the multi-node ground truth) -----------------------------------

def test_selene_rows_are_the_printed_tables_with_derived_iteration_times():
    from lumos.emulator.measured import korthikanti_points, megatron_flops, sc21_points

    t1 = {p.label: p for p in sc21_points(1)}
    assert len(t1) == 10 and {p.dataset for p in t1.values()} == {"sc21_table1"}
    # 145.6B, 80 layers, hidden 12288, TP8 PP8 on 1536 GPUs (DP 24), batch 2304, 148 TFLOP/s per GPU
    p = t1["145.6B_8x8x24_vp2"]
    assert megatron_flops(2304, 80, 12288) == 96.0 * 2304 * 2048 * 80 * 12288 ** 2 * (
        1 + 2048 / (6 * 12288) + 51200 / (16 * 80 * 12288))
    assert p.total_ms == pytest.approx(1e3 * megatron_flops(2304, 80, 12288) / (1536 * 148e12))
    assert round(p.total_ms) == 24817 and p.model == "145.6B"
    assert ("parallel.dp=24" in p.overrides and "model.ffn_hidden=49152" in p.overrides
            and "model.head_dim=128" in p.overrides and "cluster=a100_selene" in p.overrides
            and "training=megatron_sc21" in p.overrides)
    # each row as the paper's launch script ran it (examples/sc21/run_table_1.sh): 145.6B at micro-batch 2 with
    # 5 layers per virtual stage, 80 / (8 x 5) = 2 chunks per stage; 1.7B at 16, 1T non-interleaved
    assert "model.micro_batch_size=2" in p.overrides and "parallel.vp=2" in p.overrides
    assert p.schedule == "interleaved 1F1B, V=2"
    assert "model.micro_batch_size=16" in t1["1.7B_1x1x32"].overrides and t1["1008.0B_8x64x6"].vp == 1
    assert [q.vp for q in t1.values()] == [1, 1, 1, 1, 1, 3, 2, 2, 3, 1]
    t2 = sc21_points(2)
    assert [q.label for q in t2] == ["174.6B_8x12x4", "174.6B_8x12x8", "174.6B_8x12x16",
                                     "529.6B_8x35x2", "529.6B_8x35x4", "529.6B_8x35x8"]
    assert [q.model for q in t2].count("174.6B") == 3
    # strong scaling: the same batch on twice the GPUs at a lower per-GPU rate
    assert t2[1].total_ms / t2[0].total_ms == pytest.approx(153 / (2 * 149))
    k = {q.label: q.total_ms for q in korthikanti_points()}
    assert k == {"22B_8x1x1": 1420.0, "175B_8x8x1": 18130.0, "530B_8x35x1": 49050.0, "1000B_8x64x1": 94420.0}
    assert set(realism.MULTI_NODE) <= set(realism.DATASETS)
    assert [len(realism.dataset_points(d)) for d in realism.MULTI_NODE] == [10, 6, 4]


def test_a_selene_row_that_cannot_be_laid_out_names_the_file_and_line(tmp_path):
    from lumos.emulator.measured import korthikanti_points

    bad = tmp_path / "bad_selene.csv"
    bad.write_text("params_b,heads,hidden,layers,tp,pp,gpus,global_batch,micro_batch,full_recompute_s\n"
                   "22,64,6144,48,8,1,8,4,1,1.42\n175,96,12288,96,8,8,60,64,1,18.13\n")
    with pytest.raises(MeasurementError, match=r"bad_selene.csv: line 3: 60 GPUs is not a multiple of tp\*pp=64"):
        korthikanti_points(bad)
    missing = tmp_path / "no_time.csv"
    missing.write_text("params_b,heads,hidden,layers,tp,pp,gpus,global_batch,micro_batch\n22,64,6144,48,8,1,8,4,1\n")
    with pytest.raises(MeasurementError, match=r"no_time.csv: no rows, or columns \['full_recompute_s'\] missing"):
        korthikanti_points(missing)


def test_spearman_per_model_is_the_worst_model_with_three_layouts():
    rows = [{"model": "a", "measured_ms": m, "emulated_ms": e} for m, e in ((1, 1), (2, 2), (3, 3))]
    rows += [{"model": "b", "measured_ms": m, "emulated_ms": e} for m, e in ((1, 3), (2, 2), (3, 1))]
    rows += [{"model": "c", "measured_ms": 1, "emulated_ms": 5}, {"model": "c", "measured_ms": 2, "emulated_ms": 1}]
    assert realism.spearman_per_model(rows) == pytest.approx(-1.0)
    assert realism.spearman_per_model(rows[:3]) == pytest.approx(1.0)
    assert math.isnan(realism.spearman_per_model(rows[6:]))   # two layouts rank nothing
    assert math.isnan(realism.spearman_per_model([{"measured_ms": 1, "emulated_ms": 1}] * 3))
