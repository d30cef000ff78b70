"""Emulated traces for the timing benchmarks (`benchmarks/bench_*.py`), made once with the
`lumos emulate` CLI and kept in a temp dir (`CACHE`, /tmp/lumos-bench-emulated).

The benchmarks call the CLI in a subprocess rather than importing the emulator,
so they measure the reader and the replay exactly as a user's files would (and this
module imports nothing of lumos). Every trace made here is emulated, not measured on hardware.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

CACHE = Path(tempfile.gettempdir()) / "lumos-bench-emulated"
RUNS = {  # name -> lumos emulate overrides
    "gpt3_15b_2x2x4": ["model=gpt3_15b", "parallel.tp=2", "parallel.pp=2", "parallel.dp=4", "seed=0"],
    "gpt3_175b_8x4x8": ["model=gpt3_175b", "parallel=paper_175b", "seed=0"],
}


def emulated_traces() -> list[Path]:
    """rank0.json.gz of each run (made on first use); empty if the emulator is unavailable."""
    out = []
    for name, overrides in RUNS.items():
        trace = CACHE / name / "rank0.json.gz"
        if not trace.exists():
            cmd = [sys.executable, "-m", "lumos.cli", "emulate", *overrides, f"out={CACHE / name}"]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0 or not trace.exists():
                print(f"(emulated trace {name} not made: {proc.stderr.strip()[-300:]})", file=sys.stderr)
                continue
        out.append(trace)
    return out
