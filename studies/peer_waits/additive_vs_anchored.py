"""DP changes predicted with the base's peer waits kept as kernel time (additive, the default for an all-reduce base) or
replayed as the peers' arrival (`--peer-waits anchored`, lumos/predict/peer_waits.py), against
the emulated actual of the same seed (EMULATED; docs/notes/2026-12-05-peer-waits.md).

    python studies/peer_waits/additive_vs_anchored.py [--seeds 10]
    python studies/peer_waits/additive_vs_anchored.py --coverage [--samples 1000]

Reads the runs `snakemake --cores 2` emulates: the Megatron 15B 2x2x4 base and its DP 8/16/32
targets (results/default/emulated), and the sharded bases (results/default/emulated_sharded/MODE).
Prints, per target and mode, the error of each seed's prediction from that seed's base, and their
mean, standard deviation and mean |error|: the spread over seeds is what one base recording
leaves a user to guess. `--coverage`: the coverage table's check (results/tables/coverage) for the
Megatron DP targets in both modes: the 90% interval from base seed 0 against the 30 other seeds'
emulated actuals (results/default/coverage/actuals).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from lumos.predict.options import PredictOptions
from lumos.predict.prediction import predict
from lumos.trace import load_run
from lumos.predict.whatif import base_plan

ROOT = Path("results/default")
SETS = [("megatron", ROOT / "emulated", "gpt3_15b-2x2x4", "gpt3_15b-2x2x{dp}"),
        ("fsdp", ROOT / "emulated_sharded" / "fsdp", "base", "2x2x{dp}"),
        ("zero1", ROOT / "emulated_sharded" / "zero1", "base", "2x2x{dp}")]
MODES = ("additive", "anchored")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--dp", default="8,16,32")
    ap.add_argument("--coverage", action="store_true")
    ap.add_argument("--samples", type=int, default=1000)
    args = ap.parse_args()
    dps = [int(x) for x in args.dp.split(",")]
    if args.coverage:
        return coverage(dps, args.samples)
    print("| base | target | mode | error % per seed | mean % | sd % | mean abs % | wait ms (mean) |")
    print("|---|---|---|---|---|---|---|---|")
    for label, root, base_name, target in SETS:
        if not (root / base_name).exists():
            print(f"| {label} | - | - | {root / base_name} not emulated: run the pipeline | | | | |")
            continue
        errs = {(dp, m): [] for dp in dps for m in MODES}
        waits = {dp: [] for dp in dps}
        for k in range(args.seeds):
            base = load_run(root / base_name / f"seed{k}")
            plan = base_plan(base)
            for dp in dps:
                actual = load_run(root / target.format(dp=dp) / f"seed{k}")
                for m in MODES:
                    doc = predict(base, {"dp": dp}, PredictOptions(peer_waits=m), actual_tables=actual,
                                  plan=plan)
                    errs[(dp, m)].append(doc["error_pct"])
                    if m == "anchored":
                        waits[dp].append(doc["peer_waits"]["anchored_wait_ms"])
        for dp in dps:
            for m in MODES:
                e = np.array(errs[(dp, m)])
                w = f"{np.mean(waits[dp]):.1f}" if m == "anchored" else "-"
                print(f"| {label} 2x2x4 | 2x2x{dp} | {m} | {' '.join(f'{x:+.2f}' for x in e)} | {e.mean():+.2f} | "
                      f"{e.std():.2f} | {np.abs(e).mean():.2f} | {w} |", flush=True)


def coverage(dps: list[int], samples: int) -> None:
    _, root, base_name, target = SETS[0]
    base = load_run(root / base_name / "seed0")
    plan = base_plan(base)
    print("| target | mode | point ms | 90% interval ms | actual mean ms (30 seeds) | coverage at 90% |")
    print("|---|---|---|---|---|---|")
    for dp in dps:
        name = target.format(dp=dp)
        actual = pd.read_csv(ROOT / "coverage" / "actuals" / f"{name}.csv")["iteration_us"].to_numpy()
        for m in MODES:
            doc = predict(base, {"dp": dp}, PredictOptions(peer_waits=m, samples=samples, seed=0), plan=plan)
            lo, hi = doc["interval"]["iteration_us"]["90"]
            inside = np.mean((actual >= lo) & (actual <= hi))
            print(f"| 2x2x{dp} | {m} | {doc['predicted']['iteration_us'] / 1e3:.1f} | {lo / 1e3:.1f}-{hi / 1e3:.1f} | "
                  f"{actual.mean() / 1e3:.1f} | {100 * inside:.1f}% |", flush=True)


if __name__ == "__main__":
    main()
