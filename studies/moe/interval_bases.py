"""Does the MoE routing interval hold whichever base it is predicted from? (EMULATED) The pipeline's Mixtral-style
base configuration (table moe) emulated at base seeds 0-3, each predicted unchanged with `--samples 100`
(routing draws from its fitted unevenness), its 90% interval checked on 30 independent runs (seeds 1000-1029).

    python studies/moe/interval_bases.py [--bases 0,1,2,3] [--runs 30] [--samples 100]
"""

import argparse
import tempfile

import numpy as np

from lumos.emulator import emulate, write_result
from lumos.predict.options import PredictOptions
from lumos.predict.prediction import predict
from lumos.trace import load_run

p = argparse.ArgumentParser()
p.add_argument("--bases", default="0,1,2,3")
p.add_argument("--runs", type=int, default=30)
p.add_argument("--samples", type=int, default=100)
args = p.parse_args()
# config/config.yaml, moe.base
BASE = ["model=mixtral_8x7b", "model.num_layers=8", "parallel.tp=1", "parallel.pp=2", "parallel.dp=8",
        "parallel.ep=4", "model.microbatch_rule=fixed", "model.num_microbatches=16", "emulator.granularity=coarse"]
runs = np.array([emulate(BASE + [f"seed={s}"], progress=False).iteration_us for s in range(1000, 1000 + args.runs)])
print(f"{args.runs} runs: mean {runs.mean() / 1e3:.1f} ms, sd {runs.std() / 1e3:.1f} ms")
for b in map(int, args.bases.split(",")):
    d = tempfile.mkdtemp()
    r = emulate(BASE + [f"seed={b}"], progress=False)
    write_result(r, d)
    doc = predict(load_run(d), {"ep": 4}, PredictOptions(samples=args.samples))
    lo, hi = doc["routing"]["iteration_us"]["90"]
    med = doc["routing"]["iteration_us"]["median"]
    print(f"base seed {b}: measured {r.iteration_us / 1e3:.1f} ms, interval [{lo / 1e3:.1f}, {hi / 1e3:.1f}] "
          f"median {med / 1e3:.1f}, covers {100 * np.mean((runs >= lo) & (runs <= hi)):.0f}%")
