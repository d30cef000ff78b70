"""What a PP or TP change of a ZeRO-1 base would predict if the refusal were lifted (issue 32; EMULATED).

    python benchmarks/zero1_rebuild_probe.py [--base results/default/emulated_sharded/zero1/base/seed0]

`whatif.refuse_rebucketing` refuses PP, TP, width and layer changes from a sharded-optimizer base.
This probe lifts it in its own process only, predicts 2x4x4 (PP 2 -> 4) and 4x2x4 (TP 2 -> 4) from the
emulated ZeRO-1 15B 2x2x4 base (the pipeline's, seed 0), emulates both targets in ZeRO-1 mode with
the same seed, and prints the error and, per stage rank, the data-parallel collectives (kind, MiB,
group size: count) of the prediction beside the emulated run's. The totals can be close while the
collectives are wrong: that is why the refusal stays.
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import lumos.transform.plan as plan_mod
import lumos.transform.tp as tp_mod
import lumos.transform.whatif as whatif_mod
from lumos.analysis.predict import predict
from lumos.trace import load_run
from lumos.trace.collectives import classify_rows
from lumos.transform.whatif import base_plan, transform

TARGETS = {"2x4x4": {"tp": 2, "pp": 4, "dp": 4}, "4x2x4": {"tp": 4, "pp": 2, "dp": 4}}
KINDS = {"allgather": "all_gather", "allreduce": "all_reduce"}   # the transforms' names -> the classifier's


def lift_refusal() -> None:
    for mod in (plan_mod, whatif_mod, tp_mod):
        if hasattr(mod, "refuse_rebucketing"):
            mod.refuse_rebucketing = lambda plan, change: None


def emulate(name: str, shape: dict, out: Path) -> None:
    subprocess.run([sys.executable, "-m", "lumos.cli", "emulate", "model=gpt3_15b", f"parallel.tp={shape['tp']}",
                    f"parallel.pp={shape['pp']}", f"parallel.dp={shape['dp']}", "training.dp_sharding=zero1",
                    "seed=0", f"out={out}"], check=True, stdout=subprocess.DEVNULL)


def actual_collectives(path: Path) -> dict:
    out = {}
    for t in load_run(path):
        rows = np.array([r for r in range(len(t)) if t.stream[r] >= 0 and "nccl" in str(t.name[r]).lower()])
        out[t.rank] = collections.Counter(
            (c.kind, round((c.nelems or 0) * 2 / 2**20, 1), len(c.group) if c.group else 0)
            for c in classify_rows(t, rows) if c.kind not in ("send", "recv", "sendrecv"))
    return out


def predicted_collectives(plan) -> dict:
    g, st = plan.graph, plan.st
    out = collections.defaultdict(collections.Counter)
    for t in np.flatnonzero(st.coll != None):  # noqa: E711
        if st.coll[t] not in ("send", "recv"):
            out[int(g.rank[t])][(KINDS.get(st.coll[t], st.coll[t]), round(float(st.nbytes[t]) / 2**20, 1),
                                 len(st.group[t]))] += 1
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", default="results/default/emulated_sharded/zero1/base/seed0")
    args = ap.parse_args()
    lift_refusal()
    base = load_run(args.base)
    plan = base_plan(base)
    with tempfile.TemporaryDirectory() as tmp:
        for name, shape in TARGETS.items():
            out = Path(tmp) / name
            emulate(name, shape, out)
            doc = predict(base, shape, actual_tables=load_run(out), plan=plan)
            print(f"== {name} (EMULATED): predicted {doc['predicted']['iteration_us'] / 1e3:.1f} ms, actual "
                  f"{doc['measured']['iteration_us'] / 1e3:.1f} ms, error {doc['error_pct']:+.2f}%, components "
                  + ", ".join(f"{k[:-3]} {v:+.1f}%" for k, v in doc["component_error_pct"].items() if v is not None))
            pred = predicted_collectives(transform(plan, **shape))
            for rank, counts in sorted(actual_collectives(out).items()):
                print(f"  rank {rank} emulated:  {sorted(counts.items())}")
                print(f"  rank {rank} predicted: {sorted(pred.get(rank, {}).items())}")


if __name__ == "__main__":
    main()
