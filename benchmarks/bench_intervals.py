"""Sampled replays (prediction intervals): speed, stability of the bounds, coverage of other iterations.

    python benchmarks/bench_intervals.py                      # N=1000 on the emulated 175B rank 0 and a real trace
    python benchmarks/bench_intervals.py --trace FILE ...     # N=1000 on these traces instead
    python benchmarks/bench_intervals.py --stability          # 95% bounds of seeds 0 and 1 at the default N
    python benchmarks/bench_intervals.py --coverage           # other iterations inside the 90% interval
    python benchmarks/bench_intervals.py --decompose DIR      # a run's replay interval without the speed
                                                              # factors, without the peers' floors
    python benchmarks/bench_intervals.py --by-category DIR    # its lowest rank's interval with one part
                                                              # of the model sampled at a time

Seconds are the Monte Carlo loop (sampling, replay, breakdown) of N samples,
after one warm-up sample (compilation); the fit is timed apart. Emulated
traces are EMULATED, not measured on hardware.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from lumos.analysis.spread import lag_keys, task_keys
from lumos.analysis.uncertainty import (DEFAULT_SAMPLES, fit_tables, monte_carlo, other_iterations,
                                        summarize)
from lumos.graph import build_graph
from lumos.trace import load_trace

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT / "resources" / "traces" / "real"
MULTI_STEP = [REAL / "param" / "resnet_1gpu" / "resnet_kineto.json.gz",
              REAL / "hta" / "negative_queue_length_values_check__rank0.json.gz",
              REAL / "hta" / "trace_diff__control__control.json.gz",
              REAL / "hta" / "nccl_parser_config__nccl_data.json.gz",
              REAL / "kineto" / "resnet50_num_workers_0__worker0.1623143566756.pt.trace.json.gz"]


def timed(path: Path, n: int, seed: int = 0) -> dict:
    table = load_trace(path)
    t0 = time.perf_counter()
    spread = fit_tables([table])
    graph = build_graph(table)
    model = spread.model(graph, task_keys(graph, table), lag_keys(graph))
    fit_s = time.perf_counter() - t0
    monte_carlo(graph, model, 1, seed)  # compile / warm up
    t0 = time.perf_counter()
    samples = monte_carlo(graph, model, n, seed)
    mc_s = time.perf_counter() - t0
    it = summarize(samples, seed)["iteration_us"]
    return {"trace": path.name, "tasks": graph.n_tasks, "fit_s": fit_s, "mc_s": mc_s, "median": it["median"],
            "90": it["90"]}


def stability(path: Path, n: int) -> dict:
    table = load_trace(path)
    graph = build_graph(table)
    model = fit_tables([table]).model(graph, task_keys(graph, table), lag_keys(graph))
    a, b = (summarize(monte_carlo(graph, model, n, s), s)["iteration_us"] for s in (0, 1))
    diff = max(abs(a["95"][0] - b["95"][0]), abs(a["95"][1] - b["95"][1]))
    return {"trace": path.name, "median": a["median"], "diff_pct": 100 * diff / a["median"]}


def decompose(run_dir: str, n: int) -> None:
    """The GPU-span interval of `lumos replay RUN_DIR --samples n`: as shipped, with the speed
    factors (the rank's and its peers') at sigma 0, and with no peers (collectives take their
    transfer part only, no floor)."""
    import contextlib
    import io
    import json

    from lumos.analysis import spread, uncertainty
    from lumos.cli import main as lumos

    sigma, peers = spread._speed_sigma, uncertainty.with_peers
    variants = {"as shipped": (sigma, peers), "speed sigma 0": (lambda medians, groups: 0.0, peers),
                "no peers (waits dropped)": (sigma, lambda model, *args: model)}
    print("| variant | point ms | median ms | median vs point % | 90% width % of median |\n|---|---|---|---|---|")
    for label, (sigma_with, peers_with) in variants.items():
        spread._speed_sigma, uncertainty.with_peers = sigma_with, peers_with
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                lumos(["replay", run_dir, "--iteration", "gpu", "--samples", str(n), "--seed", "0", "--format", "json"])
        finally:
            spread._speed_sigma, uncertainty.with_peers = sigma, peers
        doc = json.loads(out.getvalue())
        point, iv = doc["replayed"]["iteration_us"], doc["interval"]["iteration_us"]
        lo, hi = iv["90"]
        print(f"| {label} | {point / 1e3:.3f} | {iv['median'] / 1e3:.3f} | {100 * (iv['median'] / point - 1):+.2f} "
              f"| {100 * (hi - lo) / iv['median']:.2f} |", flush=True)


def by_category(run_dir: str, n: int) -> None:
    """90% width of the lowest rank's GPU-span interval with only one part of the duration model
    sampled (the others at ratio 1, speed sigmas 0; the peers' floors stay)."""
    import copy

    import numpy as np

    from lumos.analysis.spread import CATEGORIES, _category
    from lumos.trace import load_run

    tables = load_run(run_dir)
    fitted = fit_tables(tables)
    table = min(tables, key=lambda t: t.rank)
    graph = build_graph(table)
    keys, lags = task_keys(graph, table), lag_keys(graph)
    print("| sampled | median ms | 90% width % of median |\n|---|---|---|")
    for part in ("all",) + CATEGORIES + ("speed",):
        sp = copy.deepcopy(fitted)
        if part != "all":
            sp.pools = {k: (v if _category(k) == part else np.ones(1)) for k, v in sp.pools.items()}
            sp.pooled = {k: (v if k == part else np.ones(1)) for k, v in sp.pooled.items()}
            if part != "speed":
                sp.sigma = {k: 0.0 for k in sp.sigma}
        it = monte_carlo(graph, sp.model(graph, keys, lags), n, 0, iteration="gpu")[:, 0]
        lo, med, hi = np.percentile(it, [5, 50, 95])
        print(f"| {part} | {med / 1e3:.2f} | {100 * (hi - lo) / med:.2f} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", action="append", default=[], help="trace file(s) to time")
    ap.add_argument("--samples", type=int, default=None, help="N (default: 1000 for timing, DEFAULT_SAMPLES otherwise)")
    ap.add_argument("--stability", action="store_true")
    ap.add_argument("--coverage", action="store_true")
    ap.add_argument("--decompose", metavar="RUN_DIR", help="emulated run directory (e.g. the pipeline's 15B 2x2x4 seed 0)")
    ap.add_argument("--by-category", metavar="RUN_DIR", help="the same, one part of the model sampled at a time")
    args = ap.parse_args()
    if args.by_category:
        by_category(args.by_category, args.samples or 200)
        return
    if args.decompose:
        decompose(args.decompose, args.samples or 300)
        return
    if args.stability:
        n = args.samples or DEFAULT_SAMPLES
        print("| trace | N | median ms | max 95% bound difference, seeds 0 vs 1 (% of median) |\n|---|---|---|---|")
        for p in MULTI_STEP + [REAL / "param" / "dlrm_8rank" / "kineto" / "worker0_step_12.1694128201545.pt.trace.json.gz"]:
            r = stability(p, n)
            print(f"| {r['trace'][:40]} | {n} | {r['median'] / 1e3:.3f} | {r['diff_pct']:.3f} |", flush=True)
        return
    if args.coverage:
        n = args.samples or DEFAULT_SAMPLES
        print("| trace | step | 90% interval ms | width % of median | other steps ms | inside 90% |\n|---|---|---|---|---|---|")
        for p in MULTI_STEP:
            r = other_iterations(load_trace(p), samples=n, seed=0)
            lo, hi = r["interval"]["iteration_us"]["90"]
            others = ", ".join(f"{x / 1e3:.1f}" for x in r["others_us"])
            print(f"| {p.name[:40]} | {r['step']} | [{lo / 1e3:.2f}, {hi / 1e3:.2f}] | {r['width_pct_90']:.2f} | "
                  f"{others} | {r['inside_90']:.3f} ({len(r['others_us'])}) |", flush=True)
        return
    traces = [Path(t) for t in args.trace]
    if not traces:
        from lumos.studies.emulated import emulated_traces
        traces = [t for t in emulated_traces() if "175b" in str(t)] + [MULTI_STEP[1]]
    n = args.samples or 1000
    print("| trace | tasks | fit s | N | Monte Carlo s | median ms | 90% ms |\n|---|---|---|---|---|---|---|")
    for p in traces:
        r = timed(p, n)
        print(f"| {r['trace'][:40]} | {r['tasks']:,} | {r['fit_s']:.2f} | {n} | {r['mc_s']:.2f} | "
              f"{r['median'] / 1e3:.3f} | [{r['90'][0] / 1e3:.3f}, {r['90'][1] / 1e3:.3f}] |", flush=True)


if __name__ == "__main__":
    main()
