"""Emulated vs measured: run each published configuration on the emulator and score the match.

    python -m lumos.emulator.realism [--sample N] [--workers W] [--out CSV] [--datasets fig7,vtrain_single]
    (or: lumos emulate --realism ...)

Data sets: the paper's Fig. 1 (175B, H100), its four shipped Fig. 7 configurations (15B, H100),
vTrain's single-node A100 runs (all 1,440 or a stratified sample), and three multi-node A100 sets on
NVIDIA Selene: Narayanan et al. SC'21 Tables 1 and 2, Korthikanti et al. 2022 Table 5 (8-3072 GPUs). Everything printed is EMULATED
vs MEASURED; nothing here is fitted (fit.py fits, this only scores).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from .breakdown import breakdown_recorder
from .measured import (FIG7_CSV, KORTHIKANTI_CSV, PARTS, SC21_T1_CSV, SC21_T2_CSV, VTRAIN_CSV, Point, fig1_point,
                       fig7_points, korthikanti_points, sc21_points, stratified, vtrain_points)

DATASETS = ("fig1", "fig7", "vtrain_single", "sc21_table1", "sc21_table2", "korthikanti_2022")
MULTI_NODE = ("sc21_table1", "sc21_table2", "korthikanti_2022")   # Selene, 8-3072 A100s


def emulate_point(point: Point, extra: tuple = (), seed: int = 0) -> dict:
    """Emulate one measured configuration; the iteration and (rank 0) breakdown in ms."""
    from .emulate import emulate

    t0 = time.perf_counter()
    r = emulate(list(point.overrides) + list(extra) + [f"seed={seed}"], progress=False)
    row = {"dataset": point.dataset, "config": point.label, "model": point.model, "schedule": point.schedule,
           "measured_ms": point.total_ms, "emulated_ms": r.iteration_us / 1e3, "wall_s": time.perf_counter() - t0}
    if point.parts_ms:
        b = breakdown_recorder(r.recorders[r.ranks[0]])
        for k in PARTS:
            row[f"measured_{k}_ms"] = point.parts_ms[k]
            row[f"emulated_{k}_ms"] = b[k] / 1e3
        row["emulated_breakdown_total_ms"] = b["total"] / 1e3
    return row


def _one(args):
    return emulate_point(*args)


def run_points(points: list[Point], extra: tuple = (), workers: int | None = None, log=None) -> list[dict]:
    """All points, in order, on `workers` processes (default: every core); a log line every 10 s."""
    workers = workers or os.cpu_count() or 1
    jobs = [(p, tuple(extra)) for p in points]
    out, last = [], time.perf_counter()
    if workers == 1:
        it = map(_one, jobs)
        pool = None
    else:
        pool = ProcessPoolExecutor(workers)
        it = pool.map(_one, jobs, chunksize=4)
    try:
        for i, row in enumerate(it, 1):
            out.append(row)
            if log and time.perf_counter() - last > 10:
                log(f"  {i}/{len(jobs)} configurations emulated")
                last = time.perf_counter()
    finally:
        if pool is not None:
            pool.shutdown()
    return out


def spearman(a, b) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(a, b).statistic) if len(a) > 2 else math.nan


def spearman_per_model(rows: list[dict]) -> float:
    """The worst Spearman over the models with three or more layouts (NaN where none has): does the
    emulator order one model's layouts as the hardware did?"""
    by: dict = {}
    for r in rows:
        if isinstance(r.get("model"), str) and r["model"]:
            by.setdefault(r["model"], []).append(r)
    rhos = [spearman([r["measured_ms"] for r in g], [r["emulated_ms"] for r in g]) for g in by.values() if len(g) > 2]
    return min(rhos) if rhos else math.nan


def score(rows: list[dict]) -> dict:
    """Per data set: count, mean/median/worst absolute % error of the total, signed mean, Spearman over all
    its configurations and (worst) per model."""
    out = {}
    for ds in sorted({r["dataset"] for r in rows}):
        sel = [r for r in rows if r["dataset"] == ds]
        m = np.array([r["measured_ms"] for r in sel])
        e = np.array([r["emulated_ms"] for r in sel])
        err = 100 * (e - m) / m
        out[ds] = {"n": len(sel), "mean_abs_err_pct": float(np.abs(err).mean()),
                   "median_abs_err_pct": float(np.median(np.abs(err))), "worst_abs_err_pct": float(np.abs(err).max()),
                   "mean_err_pct": float(err.mean()), "spearman": spearman(m, e),
                   "spearman_per_model_min": spearman_per_model(sel)}
    return out


def dataset_points(name: str, sample: int | None = None, seed: int = 0) -> list[Point]:
    """One data set's points, in file order; `sample` takes a stratified sample of the vTrain rows."""
    if name == "fig1":
        return [fig1_point()]
    if name == "fig7":
        return fig7_points()
    if name == "vtrain_single":
        v = vtrain_points()
        return stratified(v, sample, seed) if sample else v
    if name in ("sc21_table1", "sc21_table2"):
        return sc21_points(int(name[-1]))
    if name == "korthikanti_2022":
        return korthikanti_points()
    raise ValueError(f"unknown data set {name!r}; known: {', '.join(DATASETS)}")


def dataset_files(name: str) -> list:
    """The measurement files a data set is read from (Fig. 1's four numbers live in measured.py)."""
    return {"fig1": [], "fig7": [FIG7_CSV], "vtrain_single": [VTRAIN_CSV], "sc21_table1": [SC21_T1_CSV],
            "sc21_table2": [SC21_T2_CSV], "korthikanti_2022": [KORTHIKANTI_CSV]}[name]


def shard(points: list[Point], k: int, shards: int) -> list[Point]:
    """Shard k of `shards`: points k, k + shards, k + 2 shards, ... (every point in exactly one shard)."""
    if not 0 <= k < shards:
        raise ValueError(f"shard {k} is not in 0..{shards - 1}")
    return points[k::shards]


def points(sample: int | None, datasets=DATASETS) -> list[Point]:
    return [p for ds in datasets for p in dataset_points(ds, sample)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="lumos emulate --realism", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sample", type=int, default=None, help="stratified sample of the vTrain rows (default: all)")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--out", default=None, help="write every row as CSV here")
    ap.add_argument("--datasets", default=",".join(DATASETS),
                    help=f"comma-separated data sets (default: {','.join(DATASETS)}; fig1 is GPT-3 175B, about 35 s)")
    ap.add_argument("overrides", nargs="*", help="extra emulator overrides for every configuration")
    a = ap.parse_args(argv)
    datasets = [d.strip() for d in a.datasets.split(",") if d.strip()]
    unknown = [d for d in datasets if d not in DATASETS]
    if unknown:
        ap.error(f"unknown data set(s) {', '.join(unknown)}; known: {', '.join(DATASETS)}")
    pts = points(a.sample, datasets)
    log = lambda s: print(s, file=sys.stderr)  # noqa: E731
    rows = run_points(pts, tuple(a.overrides), a.workers, log=log)
    if a.out:
        import pandas as pd

        from lumos.trace.atomic import write_text_atomic

        write_text_atomic(a.out, pd.DataFrame(rows).to_csv(index=False))
    print("# emulator realism: EMULATED vs MEASURED (published measurements, resources/measurements/); "
          "error = 100 * (emulated - measured) / measured, of the iteration time")
    print(f"{'data set':<18}{'n':>6}{'mean |err| %':>14}{'median %':>10}{'worst %':>9}{'signed %':>10}{'Spearman':>10}"
          f"{'per model':>11}")
    for ds, s in score(rows).items():
        print(f"{ds:<18}{s['n']:>6}{s['mean_abs_err_pct']:>14.2f}{s['median_abs_err_pct']:>10.2f}"
              f"{s['worst_abs_err_pct']:>9.2f}{s['mean_err_pct']:>+10.2f}{s['spearman']:>10.3f}"
              f"{s['spearman_per_model_min']:>11.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
