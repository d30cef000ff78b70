"""`lumos search` on a large base: how long it takes, and whether its top layouts rank as the
emulated cluster ranks them (EMULATED actuals).

    python studies/search/search_check.py [--seeds 3] [--top 5] [--exact-top] [--out /tmp/lumos_search]
    python studies/search/search_check.py --case 15b --extrapolation    # extrapolated vs whole replays
    python studies/search/search_check.py --case 175b_auto --top 0     # the multi-node ground truth's base, the search alone

Default case (set with the TP changes, the A100/vTrain check, the memory model and the search):
GPT-3 175B on the A100 profile with vTrain's training setup (`cluster=a100_vtrain training=vtrain`:
full recomputation, unfused attention), base TP 8 x PP 4 x DP 8 (256 GPUs, the paper's Fig. 1
layout), seed 0, searched for 512 GPUs at global batch 1536 over micro-batch sizes 1, 2, 4, 8 with
the distributed optimizer (without it, at 18 bytes per parameter, a layout needs TP x PP >= 64 to
fit in 80 GB). `--case 15b`: the pipeline's 15B 2x2x4 H100 base for 64 GPUs at global batch 128,
micro-batch sizes 1, 2 (table `search`).

The search runs as one `lumos search` process, timed whole (wall clock). Its top `--top` fitting
layouts are then emulated over `--seeds` seeds (same micro-batch size and count) and the two
orders compared: Spearman's rank correlation of predicted against the seeds' mean emulated
time. `--exact-top` also predicts each top layout with `lumos predict`, which replays all its
micro-batches, to show how far the search's extrapolation (lumos/predict/search.py) was from it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

CASES = {
    "175b": dict(base=["cluster=a100_vtrain", "training=vtrain", "model=gpt3_175b", "parallel.tp=8",
                       "parallel.pp=4", "parallel.dp=8"],
                 search=["--gpus", "512", "--global-batch", "1536", "--micro-batch", "1,2,4,8",
                         "--distributed-optimizer", "--recompute", "full", "--no-flash-attention"]),
    # the A100 175B base of the multi-node ground truth (TP8 PP8 DP8, micro-batch 2, global batch 1536)
    # at the default granularity (auto: coarse for this run), micro-batch sizes 1-16, memory deciding
    # what fits
    "175b_auto": dict(base=["cluster=a100_vtrain", "training=vtrain", "model=gpt3_175b", "parallel.tp=8",
                            "parallel.pp=8", "parallel.dp=8", "model.micro_batch_size=2",
                            "model.global_batch_size=1536"],
                      search=["--gpus", "512", "--global-batch", "1536", "--micro-batch", "1,2,4,8,16"]),
    "15b": dict(base=["model=gpt3_15b", "parallel.tp=2", "parallel.pp=2", "parallel.dp=4"],
                search=["--gpus", "64", "--global-batch", "128", "--micro-batch", "1,2"]),
}


def emulate_base(out: Path, overrides: list[str]) -> Path:
    from lumos.emulator.emulate import emulate, write_result

    if not (out / "manifest.json").exists():
        write_result(emulate(overrides + ["seed=0"], progress=False), out)
    return out


def run_search(base: Path, flags: list[str], extra: list[str] = ()) -> tuple[list[dict], float]:
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "lumos.cli", "search", str(base), *flags, *extra,
                           "--format", "json"], check=True, capture_output=True, text=True)
    return json.loads(done.stdout), time.perf_counter() - t0


def extrapolation(base: Path, flags: list[str], rows: list[dict]) -> None:
    exact, wall = run_search(base, flags, ["--exact"])
    whole = {(r["tp"], r["pp"], r["dp"], r["micro_batch"]): r["iteration_us"] for r in exact}
    diffs = sorted((abs(100.0 * (r["iteration_us"] / whole[k] - 1.0)), k, r["microbatches"])
                   for r in rows if r["fits"] and len(r["replayed_microbatches"]) == 2
                   for k in [(r["tp"], r["pp"], r["dp"], r["micro_batch"])])
    print(f"lumos search --exact {wall:.1f} s; {len(diffs)} of {sum(r['fits'] for r in rows)} fitting layouts "
          f"extrapolated: |extrapolated - whole| mean {statistics.mean(d for d, _, _ in diffs):.3f}%, worst "
          f"{diffs[-1][0]:.3f}% (TP x PP x DP x micro-batch {diffs[-1][1]}, {diffs[-1][2]} micro-batches)")
    top = [(r["tp"], r["pp"], r["dp"], r["micro_batch"]) for r in rows if r["fits"]][:5]
    print(f"top five extrapolated: {sum(len(r['replayed_microbatches']) == 2 for r in rows[:5])}; "
          f"same top five with --exact: {top == [(r['tp'], r['pp'], r['dp'], r['micro_batch']) for r in exact][:5]}")


def spearman(xs: list[float], ys: list[float]) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(xs, ys).statistic)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", choices=sorted(CASES), default="175b")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--top", type=int, default=5)
    ap.add_argument("--exact-top", action="store_true")
    ap.add_argument("--extrapolation", action="store_true",
                    help="instead of emulating: the search again with --exact, and how far each extrapolated "
                         "layout was from its whole replay (meant for --case 15b; 175B layouts of 1,536 "
                         "micro-batches do not fit a whole replay on this machine)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/lumos_search"))
    args = ap.parse_args()
    from lumos.emulator.actuals import emulate_actuals

    case = CASES[args.case]
    base = emulate_base(args.out / f"{args.case}_base", case["base"])
    rows, wall = run_search(base, case["search"])
    if args.extrapolation:
        extrapolation(base, case["search"], rows)
        return
    fit = [r for r in rows if r["fits"]]
    extrapolated = sum(len(r["replayed_microbatches"]) == 2 for r in fit)
    print(f"{args.case}: {len(rows)} layouts, {len(fit)} fit, {extrapolated} extrapolated; "
          f"lumos search {wall:.1f} s (whole process)", flush=True)
    if not args.top:    # --top 0: the search's own top five, nothing emulated
        for r in fit[:5]:
            print(f"  {r['tp']}x{r['pp']}x{r['dp']} mbs {r['micro_batch']} x {r['microbatches']}: predicted "
                  f"{r['iteration_us'] / 1e3:.1f} ms, {r['memory_gib_per_gpu']:.1f} GiB/GPU")
        return
    fixed = [o for o in case["base"] if not o.startswith("parallel.")]
    table = []
    for rank, r in enumerate(fit[:args.top], 1):
        layout = [f"parallel.tp={r['tp']}", f"parallel.pp={r['pp']}", f"parallel.dp={r['dp']}",
                  f"model.micro_batch_size={r['micro_batch']}",
                  f"model.global_batch_size={r['microbatches'] * r['dp'] * r['micro_batch']}"]
        got = [a["iteration_us"] for a in emulate_actuals(fixed + layout, range(args.seeds))]
        row = dict(rank=rank, layout=f"{r['tp']}x{r['pp']}x{r['dp']} mbs {r['micro_batch']} x {r['microbatches']}",
                   gib=r["memory_gib_per_gpu"], predicted=r["iteration_us"], emulated=statistics.mean(got),
                   lo=min(got), hi=max(got))
        if args.exact_top:      # `lumos predict` replays all of the layout's micro-batches
            done = subprocess.run([sys.executable, "-m", "lumos.cli", "predict", str(base), "--tp", str(r["tp"]),
                                   "--pp", str(r["pp"]), "--dp", str(r["dp"]), "--micro-batch", str(r["micro_batch"]),
                                   "--global-batch", str(r["microbatches"] * r["dp"] * r["micro_batch"]),
                                   "--format", "json"], check=True, capture_output=True, text=True)
            row["exact"] = json.loads(done.stdout)["predicted"]["iteration_us"]
        table.append(row)
        print(f"  #{rank} {row['layout']}: predicted {row['predicted'] / 1e3:.1f} ms, emulated "
              f"{row['emulated'] / 1e3:.1f} ms", flush=True)
    emu_rank = {id(r): k for k, r in enumerate(sorted(table, key=lambda r: r["emulated"]), 1)}
    print("\n| predicted rank | TP x PP x DP, micro-batch x count | GiB/GPU | predicted ms | emulated ms "
          "(mean; min-max) | error % | emulated rank |" + (" exact replay ms |" if args.exact_top else ""))
    print("|---|---|---:|---:|---|---:|---:|" + ("---:|" if args.exact_top else ""))
    for r in table:
        err = 100.0 * (r["predicted"] - r["emulated"]) / r["emulated"]
        print(f"| {r['rank']} | {r['layout']} | {r['gib']:.1f} | {r['predicted'] / 1e3:.1f} | "
              f"{r['emulated'] / 1e3:.1f} ({r['lo'] / 1e3:.1f}-{r['hi'] / 1e3:.1f}) | {err:+.2f} | {emu_rank[id(r)]} |"
              + (f" {r['exact'] / 1e3:.1f} |" if args.exact_top else ""))
    errs = [abs(100.0 * (r["predicted"] - r["emulated"]) / r["emulated"]) for r in table]
    print(f"\nSpearman (predicted vs emulated order of the top {len(table)}): "
          f"{spearman([r['predicted'] for r in table], [r['emulated'] for r in table]):+.2f}; "
          f"mean |error| {statistics.mean(errs):.2f}%, worst {max(errs):.2f}%; seeds {args.seeds}")


if __name__ == "__main__":
    main()
