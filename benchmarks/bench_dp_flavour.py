"""What reading a base's data-parallel flavour costs a prediction (`lumos.model.dp_flavour`).

`lumos predict` reads every base rank's flavour before it builds a plan, so this is on every
prediction's path. Run by hand (not part of the test suite), after the pipeline has emulated its
bases, or on any run directory:

    python benchmarks/bench_dp_flavour.py                     # the emulated 117B base, 15B base
    python benchmarks/bench_dp_flavour.py RUN_DIR ... --reps 5

Prints, per run: ranks, events per rank, collectives per rank, the flavour, and the median over
--reps of the time to read every rank's flavour (traces loaded once, before timing).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

DEFAULT = ["results/default/emulated/gpt3_117b-8x8x4/seed0", "results/default/emulated/gpt3_15b-2x2x4/seed0"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="*", default=DEFAULT, help="run directories (default: %(default)s)")
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args(argv)
    from lumos.trace import load_run
    from lumos.model.dp_flavour import find_dp_flavour

    for run in args.runs:
        if not Path(run).exists():
            print(f"{run}: missing (run the pipeline first, or name a run directory)", file=sys.stderr)
            return 2
        tables = load_run(run)
        times = []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            flavours = [find_dp_flavour(t) for t in tables]
            times.append(time.perf_counter() - t0)
        print(f"{run}: {len(tables)} ranks, {len(tables[0])} events and {len(flavours[0].collectives)} "
              f"collectives on rank {tables[0].rank}, {flavours[0].kind}: "
              f"{statistics.median(times):.3f} s median of {args.reps} for every rank")
    return 0


if __name__ == "__main__":
    sys.exit(main())
