"""What the collective fit's transfer quantile does to the predictions (docs/notes/2026-12-06-nic-sharing.md).

    python studies/sharded/transfer_quantile.py [--quantile 0.1] [--seeds 10] [--scaleout-seeds 3]

`fit_alpha_beta` reads each class of a base's collectives at this quantile of its durations as the
transfer time (default 0.1: the fastest tenth, where the fewest waited for their peers). This prints,
under the given quantile, the mean error over seeds of the FSDP targets of table `sharded_dp` and of
the Megatron-style scale-out and TP targets of table `scaleout`, each predicted from the base of the
same seed (EMULATED, the runs `snakemake --cores 2` leaves in results/default).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import lumos.predict.whatif as whatif
from lumos.predict.prediction import predict
from lumos.trace import load_run
from lumos.durations import collectives

R = Path("results/default")
FSDP_TARGETS = ("2x2x8", "2x2x16", "2x2x32", "2x4x8", "4x2x4")


def use_quantile(q: float) -> None:
    fit = collectives.fit_alpha_beta
    whatif.fit_alpha_beta = lambda samples, profile=None: fit(samples, profile, quantile=q)


def mean_errors(pairs) -> dict[str, float]:
    """label -> mean error (%) over (label, base dir, actual dir, target) rows."""
    errs: dict[str, list[float]] = {}
    plans: dict = {}
    for label, base_dir, actual_dir, target in pairs:
        if base_dir not in plans:
            base = load_run(base_dir)
            plans[base_dir] = (base, whatif.base_plan(base))
        base, plan = plans[base_dir]
        doc = predict(base, target, plan=plan, actual_tables=load_run(actual_dir))
        errs.setdefault(label, []).append(doc["error_pct"])
    return {k: float(np.mean(v)) for k, v in errs.items()}


def shape(name: str) -> dict:
    tp, pp, dp = (int(x) for x in name.split("x"))
    return {"tp": tp, "pp": pp, "dp": dp}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quantile", type=float, default=0.1)
    ap.add_argument("--seeds", type=int, default=10, help="seeds of the FSDP targets")
    ap.add_argument("--scaleout-seeds", type=int, default=3, help="seeds of the scale-out and TP targets")
    args = ap.parse_args()
    use_quantile(args.quantile)
    fsdp = R / "emulated_sharded" / "fsdp"
    rows = [(f"FSDP {t}", fsdp / "base" / f"seed{s}", fsdp / t / f"seed{s}", shape(t))
            for s in range(args.seeds) for t in FSDP_TARGETS]
    runs = sorted(p.name for p in (R / "predict").iterdir() if p.name.startswith("gpt3_15b-"))
    rows += [(run, R / "emulated" / f"gpt3_15b-2x2x4/seed{s}", R / "emulated" / run / f"seed{s}",
              shape(run.split("-")[1])) for s in range(args.scaleout_seeds) for run in runs
             if (R / "emulated" / run / f"seed{s}").exists()]
    means = mean_errors(rows)
    print(f"transfer quantile {args.quantile}: mean error over seeds (EMULATED)")
    for label, m in means.items():
        print(f"  {label:22s} {m:+.2f}%")
    scale = [abs(m) for k, m in means.items() if not k.startswith("FSDP")]
    print(f"  scale-out and TP targets: mean |error| {np.mean(scale):.2f}% over {len(scale)}")


if __name__ == "__main__":
    main()
