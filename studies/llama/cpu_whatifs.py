"""What-ifs from the shipped Llama-style CPU captures against the shipped captures of their targets.

    python studies/llama/cpu_whatifs.py                   # about 20 s; rounds r0 and r1
    python studies/llama/cpu_whatifs.py --rounds 2 3      # the rounds recorded on the idle machine (2026-12-08)

Measured on this machine (resources/traces/llama_cpu/PROVENANCE.md). From each base recording, each
what-if is predicted (`lumos predict`) and compared with the mean of every profiled step of both
recordings of its target, and the target's own spread ((max - min) / mean over those steps).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from lumos.predict.prediction import measured_steps, predict
from lumos.predict.whatif import base_plan
from lumos.trace import load_run

RUNS = Path("resources/traces/llama_cpu")
WHAT_IFS = {"hidden_256": {"hidden": 256, "ffn": 704}, "kv_heads_1": {"kv_heads": 1},
            "kv_heads_4": {"kv_heads": 4}, "layers_4": {"layers": 4}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, nargs="+", default=[0, 1], help="the recording rounds to use (rK)")
    a = ap.parse_args(argv)
    names = [f"base_r{r}" for r in a.rounds]
    print(f"{'target':12} {'measured ms':>11} {'spread %':>9} " + " ".join(f"{b + ' err %':>15}" for b in names))
    bases = [load_run(RUNS / b) for b in names]
    plans = [(t, base_plan(t)) for t in bases]
    for target, change in WHAT_IFS.items():
        steps = [s["iteration_us"] / 1e3 for r in a.rounds for s in measured_steps(RUNS / f"{target}_r{r}")]
        mean = float(np.mean(steps))
        errs = [100 * (predict(t, change, plan=p)["predicted"]["iteration_us"] / 1e3 / mean - 1)
                for t, p in plans]
        print(f"{target:12} {mean:11.2f} {100 * (max(steps) - min(steps)) / mean:9.1f} "
              + " ".join(f"{e:+15.1f}" for e in errs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
