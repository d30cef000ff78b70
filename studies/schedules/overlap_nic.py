"""Why V 4 from an overlapped V 2 base ran short: per stage, the predicted against the emulated target's
breakdown, and the replayed time of rank 0's pipeline transfers (base, target, prediction). EMULATED.

    python studies/schedules/overlap_nic.py results/default/emulated/llama3_8b-2x8x4v2-overlap/seed0 \
        results/default/emulated/llama3_8b-2x8x4v4-overlap/seed0 --vp 4

Answers in docs/notes/2026-12-08-overlapped-p2p.md (the later section)."""
import argparse

import numpy as np

from lumos.predict.prediction import simulate_plan
from lumos.predict.whatif import base_plan, transform
from lumos.trace import load_run

PARTS = ("iteration_us", "exposed_compute_us", "overlapped_us", "exposed_comm_us", "other_us")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base")
    ap.add_argument("target")
    for k in ("vp", "pp", "dp"):
        ap.add_argument(f"--{k}", type=int)
    a = ap.parse_args()
    change = {k: getattr(a, k) for k in ("vp", "pp", "dp") if getattr(a, k)}
    plans = {"base": base_plan(load_run(a.base)), "target": base_plan(load_run(a.target))}
    plans["predicted"] = transform(plans["base"], **change)
    out = {}
    for name, p in plans.items():
        g, sched, bd = simulate_plan(p)
        x = np.flatnonzero(np.isin(p.st.coll, ["send", "recv"]) & (g.rank[:len(p.st.coll)] == 0))
        d = (sched.end[x] - sched.start[x]) / 1e3
        out[name] = bd
        print(f"{name:9s} rank 0 pipeline transfers: {len(x)}, median {np.median(d):.2f} ms, 25th {np.percentile(d, 25):.2f}, "
              f"75th {np.percentile(d, 75):.2f}, sum {d.sum():.1f} ms; iteration {bd.iteration.as_dict()['iteration_us'] / 1e3:.1f} ms")
    print("rank  " + "  ".join(f"{k[:-3]:>24s}" for k in PARTS) + "   (predicted / target, ms)")
    for r in sorted(out["target"].per_rank):
        q, t = out["predicted"].per_rank[r].as_dict(), out["target"].per_rank[r].as_dict()
        print(f"{r:4d}  " + "  ".join(f"{q[k] / 1e3:11.1f} / {t[k] / 1e3:10.1f}" for k in PARTS))


if __name__ == "__main__":
    main()
