"""Record the shipped Llama-style CPU captures (resources/traces/llama_cpu/): two widths, two KV-head counts,
two layer counts, each variant of one base, recorded twice (r0, r1) in interleaved rounds.

    python studies/llama/record_cpu.py --out resources/traces/llama_cpu     # about 1 minute on 2 idle cores
    python studies/llama/record_cpu.py --out resources/traces/llama_cpu --first-round 2   # rounds r2, r3

Measured on this machine: the bundled Llama-style model (`lumos.capture.llama`, `lumos capture llama`) on
the CPU, annotated like `capture gpt`, 3 profiled steps after one skipped and one warm-up, 2 micro-batches
per iteration. The variants keep everything of the base but what their name says.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

BASE = dict(layers=2, hidden=128, ffn=352, heads=4, kv_heads=2, seq=64, micro_batch=4, vocab=1024)
VARIANTS = {"base": {}, "hidden_256": dict(hidden=256, heads=8, ffn=704), "kv_heads_1": dict(kv_heads=1),
            "kv_heads_4": dict(kv_heads=4), "layers_4": dict(layers=4)}


def flags(cfg: dict) -> list[str]:
    return [x for k, v in cfg.items() for x in (f"--{k.replace('_', '-')}", str(v))]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=2, help="recordings of each variant (r0, r1, ...)")
    ap.add_argument("--first-round", type=int, default=0, help="the first round's number (and seed)")
    a = ap.parse_args(argv)
    for r in range(a.first_round, a.first_round + a.rounds):
        for name, change in VARIANTS.items():
            cfg = {**BASE, **change}
            out = a.out / f"{name}_r{r}"
            subprocess.run(["lumos", "capture", "llama", *flags(cfg), "--micro-batches", "2", "--steps", "3",
                            "--seed", str(r), "--out", str(out)], check=True, capture_output=True)
            print(f"{out}: {cfg}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
