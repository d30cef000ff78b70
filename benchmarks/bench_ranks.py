"""`lumos replay` of a run with every rank's trace, as the ranks grow: wall time and peak memory, whole processes.

GPT-3 15B at TP 2 x PP 2 x DP n (64, 256 and 1,024 ranks by default), every rank emulated and written
(`ranks=all`), all at one granularity (`coarse`: `auto` would go coarser for the larger runs, and the traces
would not be comparable), then replayed by `lumos replay DIR` in a fresh process. Peak memory is the
process's maximum resident set (`/usr/bin/time -v`, reported in MiB), wall time perf_counter around the
subprocess. The emulations are written once into --work (reused when there) and are EMULATED; the times are
this machine's.

    python benchmarks/bench_ranks.py [--ranks 64,256,1024] [--work /tmp/lumos-bench-ranks] [--csv FILE]
                                     [--repeat N] [--before CHECKOUT]

`--repeat N` replays each run N times and keeps the fastest wall time and the largest peak (the machine's
other load only ever adds time). `--before CHECKOUT` also replays each run with another checkout's code
(`PYTHONPATH=CHECKOUT`, run from it), alternating with this one, and prints both and their ratios (the CSV
keeps this checkout's). `--csv benchmarks/replay_ranks.csv` writes the rows the README's rank-scaling claim
reads (`lumos/report/headline.py`, `ranks`). The replay streams the ranks (`lumos.analysis.run_stream`): one
rank's trace and graph in memory at a time, so the peak stays about one rank's as the ranks grow.
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


HERE = Path(__file__).resolve().parent.parent   # this checkout


def _env(checkout: Path) -> dict:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(checkout), os.environ.get("PYTHONPATH")])))


def emulate(ranks: int, out: Path) -> float:
    """Seconds to emulate and write the run (0 when it was already there)."""
    if (out / "manifest.json").exists():
        return 0.0
    dp = ranks // 4
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "lumos.cli", "emulate", "model=gpt3_15b", "parallel.tp=2", "parallel.pp=2",
                    f"parallel.dp={dp}", "ranks=all", "emulator.granularity=coarse", "progress=false",
                    f"out={out.resolve()}"], check=True, capture_output=True, cwd=HERE, env=_env(HERE))
    return time.perf_counter() - t


def replay(run: Path, checkout: Path = HERE) -> tuple[float, float]:
    """(wall seconds, peak resident MiB) of `lumos replay RUN` in its own process, with `checkout`'s code
    (run from it: `python -m` puts the working directory first on the path)."""
    env = _env(checkout)
    t = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-m", "lumos.cli", "replay", str(run.resolve())],
                       capture_output=True, text=True, cwd=checkout, env=env)
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
    ap.add_argument("--repeat", type=int, default=1, help="replays per run: the fastest wall, the largest peak")
    ap.add_argument("--before", type=Path, default=None, metavar="CHECKOUT",
                    help="also replay with this checkout's code, alternating, and print the ratios")
    args = ap.parse_args()
    rows = []
    before = f" {'before s':>9} {'before MiB':>10} {'time x':>7} {'peak x':>7}" if args.before else ""
    print(f"{'ranks':>6} {'trace MB':>9} {'emulate s':>10} {'replay s':>9} {'peak MiB':>8} {'s / rank':>9}{before}")
    for n in map(int, args.ranks.split(",")):
        run = Path(args.work) / f"gpt3_15b_2x2x{n // 4}"
        em = emulate(n, run)
        mb = sum(f.stat().st_size for f in run.glob("rank*.json.gz")) / 1e6
        ours, theirs = [], []
        for _ in range(max(1, args.repeat)):
            if args.before:
                theirs.append(replay(run, args.before.resolve()))
            ours.append(replay(run))
        wall, peak = min(w for w, _ in ours), max(p for _, p in ours)
        rows.append({"ranks": n, "trace_mb_gz": round(mb, 1), "emulate_s": round(em, 1), "replay_s": round(wall, 2),
                     "peak_mb": round(peak, 1), "replay_s_per_rank": round(wall / n, 4), "cpus": os.cpu_count()})
        r = rows[-1]
        line = (f"{n:>6} {r['trace_mb_gz']:>9} {r['emulate_s']:>10} {r['replay_s']:>9} {r['peak_mb']:>8} "
                f"{r['replay_s_per_rank']:>9}")
        if theirs:
            bw, bp = min(w for w, _ in theirs), max(p for _, p in theirs)
            line += f" {bw:>9.2f} {bp:>10.1f} {wall / bw:>7.3f} {peak / bp:>7.4f}"
        print(line, flush=True)
    if args.csv:
        with open(args.csv, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
