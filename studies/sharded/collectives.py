"""Per-kernel check of the sharded DP predictions (docs/notes/2026-12-03-sharded-dp.md):
the median all-gather and reduce-scatter kernel of one iteration, emulated vs predicted, for the
pipeline's sharded base and each DP target.

    python studies/sharded/collectives.py [--runs results/default/emulated_sharded/MODE] [--seed 0]

Reads the runs `snakemake --cores 2 results/default/tables/sharded_dp.csv` emulates (EMULATED).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from lumos.trace import load_run, schema
from lumos.trace.steps import select_step
from lumos.predict.whatif import base_plan, transform

KINDS = ("allgather", "reduce_scatter")


def emulated_medians(tables) -> dict[str, float]:
    """kind -> median kernel duration (us) of rank 0's DP collectives in a steady iteration."""
    t = min(tables, key=lambda t: t.rank)
    s = select_step(t, None)
    k = np.flatnonzero((t.cat == schema.KERNEL) & (t.ts >= s.start) & (t.ts < s.end))
    return {kind: float(np.median([t.dur[r] for r in k if t.coll_name[r] == kind] or [np.nan])) for kind in KINDS}


def predicted_medians(plan) -> dict[str, float]:
    g, st = plan.graph, plan.st
    rank0 = g.rank == g.rank.min()
    return {kind: float(np.median(g.dur[rank0 & (st.coll == kind)])) for kind in KINDS}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", default="results/default/emulated_sharded/fsdp")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    root = Path(args.runs)
    plan = base_plan(load_run(root / "base" / f"seed{args.seed}"))
    print(f"base {root / 'base'} seed {args.seed}: TP {plan.tp} x PP {plan.pp} x DP {plan.dp} ({plan.sharding})")
    print(f"{'target':<10}{'kind':<16}{'emulated us':>13}{'predicted us':>14}{'error %':>9}")
    targets = sorted((p.name for p in root.iterdir() if p.name != "base"),
                     key=lambda n: tuple(int(x) for x in n.split("x")))
    for name in ["base"] + targets:
        tp, pp, dp = (plan.tp, plan.pp, plan.dp) if name == "base" else (int(x) for x in name.split("x"))
        if tp != plan.tp or pp != plan.pp:
            continue        # the per-kernel check is for DP changes: a rebuild re-sequences the kernels
        actual = emulated_medians(load_run(root / name / f"seed{args.seed}"))
        pred = predicted_medians(transform(plan, dp=dp))
        for kind in KINDS:
            err = 100 * (pred[kind] - actual[kind]) / actual[kind]
            print(f"{name:<10}{kind:<16}{actual[kind]:>13.0f}{pred[kind]:>14.0f}{err:>+9.1f}")


if __name__ == "__main__":
    main()
