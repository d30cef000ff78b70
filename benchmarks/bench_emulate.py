"""Whole-process time of `lumos emulate` on the largest 175B layouts (the target set for emulation
time: any valid row, up to 512 GPUs, in under 60 s on this machine), with the granularity `auto` picked.

Each row runs the CLI in a fresh process, as the check does, and prints the wall time
(`/usr/bin/time`-style, perf_counter around the subprocess), the emulated iteration and the
granularity. `--compare` also runs each row at `coarse` to show how far `auto` moved the
iteration. The global batch 1,536 is GPT-3 175B's (Brown et al. 2020, Table 2.1: 3.2M tokens
of 2,048); micro-batch 1. Everything printed is emulated, timed on this machine.

    python benchmarks/bench_emulate.py [--compare] [--rows NAME ...]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BASE = ["cluster=a100_vtrain", "training=vtrain", "model=gpt3_175b"]
ROWS = {  # name -> overrides; the micro-batch count is global batch / (DP x micro-batch)
    "tp8_pp8_dp8_gb1024": ["parallel.tp=8", "parallel.pp=8", "parallel.dp=8", "model.global_batch_size=1024"],
    "tp8_pp16_dp4_gb1536": ["parallel.tp=8", "parallel.pp=16", "parallel.dp=4", "model.global_batch_size=1536"],
    "tp16_pp32_dp1_gb1536": ["parallel.tp=16", "parallel.pp=32", "parallel.dp=1", "model.global_batch_size=1536"],
}


def run(overrides: list[str], out: Path) -> tuple[float, dict]:
    cmd = [sys.executable, "-m", "lumos.cli", "emulate", *BASE, *overrides, "seed=0", f"out={out}", "--quiet"]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True)
    wall = time.perf_counter() - t0
    return wall, json.loads((out / "manifest.json").read_text())


def level(overrides: list[str]) -> str:
    from lumos.config import compose
    from lumos.emulator.program import granularity_level
    from lumos.emulator.settings import from_config

    return granularity_level(from_config(compose("emulate", BASE + overrides)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compare", action="store_true", help="also run each row at granularity=coarse")
    ap.add_argument("--rows", nargs="*", choices=sorted(ROWS), default=list(ROWS))
    args = ap.parse_args(argv)
    print(f"{'row':24} {'level':8} {'micro-batches':>13} {'wall s':>8} {'iteration ms':>14}  (emulated)")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.rows:
            ov = ROWS[name]
            wall, man = run(ov, Path(tmp) / name)
            it = man["iteration_us"] / 1e3
            print(f"{name:24} {level(ov):8} {man['num_microbatches']:>13} {wall:8.1f} {it:14.1f}", flush=True)
            if args.compare:
                cw, cman = run(ov + ["emulator.granularity=coarse"], Path(tmp) / f"{name}_coarse")
                ci = cman["iteration_us"] / 1e3
                print(f"{'  at coarse':24} {'coarse':8} {'':>13} {cw:8.1f} {ci:14.1f}  "
                      f"auto vs coarse {100 * (it / ci - 1):+.2f}%", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
