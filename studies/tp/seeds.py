"""TP changes over many seeds: the 15B 2x2x4 base of seed S predicted to six TP layouts and compared
with the emulated actual of seed S (EMULATED, not hardware).

    python studies/tp/seeds.py [--seeds 10] [--base-root results/default/emulated] [--out /tmp/lumos_tp]

The bases are the pipeline's emulated runs (`results/default/emulated/gpt3_15b-2x2x4/seedS`, emulated
here when missing); the targets are emulated into --out with the pipeline's overrides. The pipeline's
table `scaleout` (group TP) runs the first five seeds of the same experiment. About 6 minutes for ten
seeds on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

TARGETS = [(1, 2, 4), (4, 2, 4), (8, 2, 4), (4, 2, 2), (8, 2, 1), (4, 4, 1)]
COMPONENTS = ("exposed_compute_us", "overlapped_us", "exposed_comm_us", "other_us")


def emulate(out: Path, tp: int, pp: int, dp: int, seed: int) -> Path:
    if not (out / "manifest.json").exists():
        subprocess.run([sys.executable, "-m", "lumos.cli", "emulate", "model=gpt3_15b", f"parallel.tp={tp}",
                        f"parallel.pp={pp}", f"parallel.dp={dp}", f"seed={seed}", f"out={out}", "progress=false"],
                       check=True, stdout=subprocess.DEVNULL)
    return out


def predict(base: Path, actual: Path, tp: int, pp: int, dp: int) -> dict:
    out = subprocess.run([sys.executable, "-m", "lumos.cli", "predict", str(base), "--tp", str(tp), "--pp", str(pp),
                          "--dp", str(dp), "--actual", str(actual), "--format", "json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--base-root", default="results/default/emulated")
    ap.add_argument("--out", default="/tmp/lumos_tp")
    args = ap.parse_args()
    errors = {t: [] for t in TARGETS}
    comps = {t: [] for t in TARGETS}
    for seed in range(args.seeds):
        base = emulate(Path(args.base_root) / "gpt3_15b-2x2x4" / f"seed{seed}", 2, 2, 4, seed)
        for tp, pp, dp in TARGETS:
            actual = emulate(Path(args.out) / f"gpt3_15b-{tp}x{pp}x{dp}" / f"seed{seed}", tp, pp, dp, seed)
            doc = predict(base, actual, tp, pp, dp)
            errors[(tp, pp, dp)].append(doc["error_pct"])
            comps[(tp, pp, dp)].append(doc["component_error_pct"])
        print(f"seed {seed} done", file=sys.stderr, flush=True)
    print("| target | mean error % | mean abs error % | range % | " + " | ".join(c[:-3] for c in COMPONENTS) + " |")
    print("|---|---|---|---|" + "---|" * len(COMPONENTS))
    for t in TARGETS:
        e = np.array(errors[t])
        parts = [np.mean([c[k] for c in comps[t] if c[k] is not None]) for k in COMPONENTS]
        print(f"| {t[0]}x{t[1]}x{t[2]} | {e.mean():+.2f} | {np.abs(e).mean():.2f} | [{e.min():+.2f}, {e.max():+.2f}] | "
              + " | ".join(f"{p:+.1f}" for p in parts) + " |")
    every = np.concatenate([np.array(v) for v in errors.values()])
    print(f"\nall {len(every)}: mean |error| {np.abs(every).mean():.2f}%, worst {np.abs(every).max():.2f}%")


if __name__ == "__main__":
    main()
