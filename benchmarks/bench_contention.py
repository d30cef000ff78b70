"""What the compute slowdown under communication costs a prediction (lumos.predict.contention,
docs/notes/2026-12-06-compute-under-communication.md): the nine scale-out targets from one plan of
the 15B 2x2x4 base, with `PredictOptions(contention="off")` and `"fit"`, timed in one process.

    python benchmarks/bench_contention.py [--base results/default/emulated/gpt3_15b-2x2x4/seed0] [--repeats 3]

The base is the pipeline's (`snakemake --cores 2` emulates it) or any run directory. Prints, per
mode, the median over the repeats of the plan's fit and of the nine predictions, and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from lumos.predict.options import PredictOptions
from lumos.predict.prediction import predict
from lumos.trace import load_run
from lumos.predict.whatif import base_plan

NINE = [{"dp": 8}, {"dp": 16}, {"dp": 32}, {"pp": 4}, {"pp": 8}, {"pp": 16},
        {"pp": 4, "dp": 8}, {"pp": 8, "dp": 8}, {"pp": 4, "dp": 16}]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", type=Path, default=Path("results/default/emulated/gpt3_15b-2x2x4/seed0"))
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    tables = load_run(args.base)
    times: dict = {"off": [], "fit": []}
    for _ in range(args.repeats):
        for mode in times:
            t0 = time.perf_counter()
            plan = base_plan(tables, PredictOptions(contention=mode))
            t1 = time.perf_counter()
            for target in NINE:
                predict(tables, target, plan=plan)
            times[mode].append((t1 - t0, time.perf_counter() - t1))
    med = {m: (statistics.median(p for p, _ in v), statistics.median(n for _, n in v)) for m, v in times.items()}
    for mode, (plan_s, nine_s) in med.items():
        print(f"contention {mode}: plan {plan_s:.2f} s, nine predictions {nine_s:.2f} s (median of {args.repeats})")
    print(f"fit / off: plan {med['fit'][0] / med['off'][0]:.2f}x, nine predictions {med['fit'][1] / med['off'][1]:.2f}x")


if __name__ == "__main__":
    main()
