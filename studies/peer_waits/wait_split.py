"""Where the FSDP DP predictions' seed-to-seed spread comes from (item 2 of
docs/notes/2026-12-06-fsdp-seed-spread.md): the split of each base DP collective into transfer and wait.

    python studies/peer_waits/wait_split.py [--runs results/default/emulated_sharded/fsdp] [--seeds 0 1 2 ...] [--scaled]

`lumos.predict.peer_waits.read_peer_waits` takes a collective's transfer as at most its class's median
(class: rank, kind, message, group size) times the model's time, and the rest as waiting for peers.
Where every occurrence of a class waits, the median is a wait too. Part 1 prints, per seed, the ratio
measured / model of rank 0's all-gathers and reduce-scatters (quantiles over the iteration): on
some seeds every reduce-scatter of the last micro-batch waits for the slowest replica, so its
class median is 1.24-2.17x the model (seeds 0, 4, 6, 7, 9 of the every-rank runs; 2-3.6x on the
stand-in runs before `sharded.ranks: all`) while the all-gathers of the same message and group sit at
1.03-1.09. With `cap="class"` the transfer part carries the wait and grows with the model's time at
the target's DP.

Part 2 predicts DP x2, x4 and x8 from every seed's base twice: with `cap="class"` and as shipped,
`cap="shape"`: each class's transfer capped at the lowest class median among the rank's DP
collectives of the same message and group size (the same bytes over the same links). Against runs
emulated with statistical stand-in peers (`sharded.ranks: stage`) the cap narrowed the spread over
seeds but read every seed low; against runs with every rank emulated (the pipeline's default since)
it is the better of the two (`studies/emulator/peer_standins.py`, docs/notes/2026-12-06-fsdp-seed-spread.md).
`--scaled` adds both splits with every anchored wait scaled by the ratio of
the expected maxima of N - 1 and 3 standard normal draws (the slowest of the target's other replicas
against the base's three, were their lags normal and the base's rank typical). EMULATED runs (`snakemake --cores 2` leaves them in results/default).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from functools import partial
from pathlib import Path

import numpy as np
from scipy import integrate, stats

import lumos.predict.prediction as predict_module
from lumos.predict import peer_waits
from lumos.predict.prediction import predict
from lumos.trace import load_run
from lumos.predict.whatif import base_plan

TARGETS = ("2x2x8", "2x2x16", "2x2x32")
BASE_DP = 4


def expected_max(n: int) -> float:
    """E[max of n standard normal draws]."""
    return integrate.quad(lambda x: x * n * stats.norm.pdf(x) * stats.norm.cdf(x) ** (n - 1), -12, 12)[0]


def scaled_settle(factor: float):
    """`peer_waits.settle` with each anchored wait `factor` times as long (the peers arrive later)."""
    def settle(out, waits, replay):
        a = waits.anchors >= 0
        waits = replace(waits, offsets=waits.offsets + np.where(a, waits.wait_us * (factor - 1.0), 0.0))
        return peer_waits.settle(out, waits, replay)
    return settle


def dp_collectives(plan) -> tuple[np.ndarray, np.ndarray, list[tuple]]:
    """The DP collectives `read_peer_waits` splits, their measured / model ratio, and their class keys."""
    dp, model, keys = peer_waits.dp_collectives(plan)
    return dp, plan.graph.dur[dp] / model, keys


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=Path, default=Path("results/default/emulated_sharded/fsdp"))
    ap.add_argument("--seeds", type=int, nargs="*", default=None)
    ap.add_argument("--scaled", action="store_true", help="also with the anchored waits scaled to the slowest of N - 1")
    args = ap.parse_args()
    seeds = args.seeds or sorted(int(p.name.removeprefix("seed")) for p in (args.runs / "base").glob("seed*"))
    bases = {s: load_run(args.runs / "base" / f"seed{s}") for s in seeds}

    print("Part 1: measured / model of rank 0's DP all-gathers and reduce-scatters (quantiles 10/50/90)")
    for s, base in bases.items():
        _, ratio, keys = dp_collectives(base_plan(base))
        cells = []
        for kind in ("allgather", "reduce_scatter"):
            r = ratio[[i for i, k in enumerate(keys) if k[0] == 0 and k[1] == kind]]
            cells.append(f"{kind} n={len(r)} " + " / ".join(f"{np.quantile(r, q):.2f}" for q in (0.1, 0.5, 0.9)))
        print(f"  seed {s}: " + "; ".join(cells))

    print("\nPart 2: error % of DP x2 / x4 / x8 (2x2x8 / 2x2x16 / 2x2x32) from each seed's base")
    shipped = peer_waits.read_peer_waits
    runs = [("cap='class'", partial(shipped, cap="class"), False), ("as shipped (cap='shape')", shipped, False)]
    if args.scaled:
        runs += [(f"{name}, waits scaled", split, True) for name, split, _ in runs]
    for name, split, scaled in runs:
        predict_module.read_peer_waits = split
        errors = {t: [] for t in TARGETS}
        for s, base in bases.items():
            plan = base_plan(base)
            for t in TARGETS:
                dp = int(t.split("x")[2])
                factor = expected_max(dp - 1) / expected_max(BASE_DP - 1)
                predict_module.settle = scaled_settle(factor) if scaled else peer_waits.settle
                doc = predict(base, {"dp": dp}, plan=plan, actual_tables=load_run(args.runs / t / f"seed{s}"))
                errors[t].append(doc["error_pct"])
        predict_module.read_peer_waits, predict_module.settle = shipped, peer_waits.settle
        print(f"  {name}:")
        for t, e in errors.items():
            e = np.array(e)
            print(f"    {t}: mean {e.mean():+.2f}%, mean |error| {np.abs(e).mean():.2f}%, sd {e.std(ddof=1):.2f}, "
                  f"per seed {' '.join(f'{x:+.1f}' for x in e)}")

if __name__ == "__main__":
    main()
