"""Record the shipped MoE CPU captures (resources/traces/moe_cpu/): EP 1, 2 and 4 of one model, each
recorded twice (r0, r1) in interleaved rounds.

    python studies/moe/record_cpu.py --out resources/traces/moe_cpu     # about 1 minute on 2 idle cores
    python studies/moe/record_cpu.py --out resources/traces/moe_cpu --pin-core --first-round 2 --rounds 3
                                                                      # r2, r3, r4: pinned ranks

Measured on this machine: the bundled MoE model (`lumos.capture.moe`, `lumos capture moe`) on the CPU over
gloo, annotated like `capture gpt`, 3 profiled steps after one skipped and one warm-up, one micro-batch per
iteration and rank, one intra-op thread per rank (one rank stands for one device: EP 4 puts four ranks on
the two cores). The captures differ only in EP: each rank trains its own micro-batch (DP = EP), so EP 4
routes four times the tokens of EP 1 over the same 4 experts.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

BASE = dict(layers=2, hidden=128, heads=4, kv_heads=2, experts=4, top_k=2, expert_ffn=256, seq=64, micro_batch=4,
            vocab=1024, threads=1)
EPS = (1, 2, 4)


def flags(cfg: dict) -> list[str]:
    return [x for k, v in cfg.items() for x in (f"--{k.replace('_', '-')}", str(v))]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=2, help="recordings of each EP (r0, r1, ...)")
    ap.add_argument("--first-round", type=int, default=0, help="the first round's number (and seed)")
    ap.add_argument("--pin-core", action="store_true", help="each rank on one core (`lumos capture moe --pin-core`)")
    a = ap.parse_args(argv)
    pin = ["--pin-core"] if a.pin_core else []
    print(f"load average before: {_load()}", flush=True)
    for r in range(a.first_round, a.first_round + a.rounds):
        for ep in EPS:
            out = a.out / f"ep{ep}_r{r}"
            subprocess.run([sys.executable, "-m", "lumos.cli", "capture", "moe", *flags(BASE), "--ep", str(ep),
                            "--steps", "3", "--seed", str(r), *pin, "--out", str(out)], check=True,
                           capture_output=True)
            print(f"{out}: EP {ep}, {BASE}{' pinned' if pin else ''}; load average {_load()}", flush=True)
    print(f"load average after: {_load()}", flush=True)
    return 0


def _load() -> str:
    """The machine's 1, 5 and 15 minute load averages (what `uptime` prints)."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    sys.exit(main())
