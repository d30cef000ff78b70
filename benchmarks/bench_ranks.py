"""`lumos replay` of a run with every rank's trace, as the ranks grow: wall time and peak memory, whole processes.

GPT-3 15B at TP 2 x PP 2 x DP n (64, 256 and 1,024 ranks by default), every rank emulated and written
(`ranks=all`), all at one granularity (`coarse`: `auto` would go coarser for the larger runs, and the traces
would not be comparable), then replayed by `lumos replay DIR` in a fresh process. Peak memory is the
process's maximum resident set (`/usr/bin/time -v`), wall time perf_counter around the subprocess. The
emulations are written once into --work (reused when there) and are EMULATED; the times are this machine's.

    python benchmarks/bench_ranks.py [--ranks 64,256,1024] [--work /tmp/lumos-bench-ranks] [--csv FILE]

`--csv benchmarks/replay_ranks.csv` writes the rows the README's rank-scaling claim reads (`lumos/report/headline.py`,
`ranks`). The replay holds every rank's graph at once (it does not stream rank by rank): memory grows with the ranks.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import subprocess
import sys
import time
from pathlib import Path


def emulate(ranks: int, out: Path) -> float:
    """Seconds to emulate and write the run (0 when it was already there)."""
    if (out / "manifest.json").exists():
        return 0.0
    dp = ranks // 4
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "lumos.cli", "emulate", "model=gpt3_15b", "parallel.tp=2", "parallel.pp=2",
                    f"parallel.dp={dp}", "ranks=all", "emulator.granularity=coarse", "progress=false", f"out={out}"],
                   check=True, capture_output=True)
    return time.perf_counter() - t


def replay(run: Path) -> tuple[float, float]:
    """(wall seconds, peak resident MB) of `lumos replay RUN` in its own process."""
    t = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-m", "lumos.cli", "replay", str(run)],
                       capture_output=True, text=True)
    wall = time.perf_counter() - t
    if p.returncode:
        raise SystemExit(f"lumos replay {run} failed:\n{p.stderr[-2000:]}")
    kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr).group(1))
    return wall, kb / 1024.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", default="64,256,1024")
    ap.add_argument("--work", default="/tmp/lumos-bench-ranks")
    ap.add_argument("--csv", default=None)
    args = ap.parse_args()
    rows = []
    print(f"{'ranks':>6} {'trace MB':>9} {'emulate s':>10} {'replay s':>9} {'peak MB':>8} {'s / rank':>9}")
    for n in map(int, args.ranks.split(",")):
        run = Path(args.work) / f"gpt3_15b_2x2x{n // 4}"
        em = emulate(n, run)
        mb = sum(f.stat().st_size for f in run.glob("rank*.json.gz")) / 1e6
        wall, peak = replay(run)
        rows.append({"ranks": n, "trace_mb_gz": round(mb, 1), "emulate_s": round(em, 1), "replay_s": round(wall, 2),
                     "peak_mb": round(peak, 1), "replay_s_per_rank": round(wall / n, 4), "cpus": os.cpu_count()})
        r = rows[-1]
        print(f"{n:>6} {r['trace_mb_gz']:>9} {r['emulate_s']:>10} {r['replay_s']:>9} {r['peak_mb']:>8} "
              f"{r['replay_s_per_rank']:>9}", flush=True)
    if args.csv:
        with open(args.csv, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
