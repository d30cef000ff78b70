"""The added collectives' durations against the emulated run's: where a one-GPU base's prediction misses.

    lumos emulate model=gpt3_15b parallel.tp=1 parallel.pp=1 parallel.dp=1 out=/tmp/e15/1x1x1
    lumos emulate model=gpt3_15b parallel.tp=2 parallel.pp=2 parallel.dp=4 out=/tmp/e15/2x2x4
    python studies/one_gpu/collectives.py /tmp/e15/1x1x1 /tmp/e15/2x2x4     # about 10 s

EMULATED. The target layout is the actual run's own (read from its structure). For the first stage's
rank, per collective role (tp, dp, pp, mp) and kind: how many, and the mean duration (us) of the
prediction's replay (the collectives added by `lumos/transform/add_collectives.py`, timed by the default
cluster profile) beside the emulated run's kernels.
"""

from __future__ import annotations

import sys
from collections import defaultdict

import numpy as np

from lumos.predict.prediction import simulate_plan
from lumos.predict.whatif import base_plan, transform
from lumos.trace import load_run


def _by_role(graph, st, role, rank, start=None, end=None) -> dict:
    out = defaultdict(list)
    for t in np.flatnonzero(graph.comm & (graph.rank == rank)).tolist():
        if t < len(role) and role[t] is not None:
            d = (end[t] - start[t]) if start is not None else graph.dur[t]
            out[(role[t], st.coll[t])].append(float(d))
    return out


def main(argv: list[str]) -> int:
    base, actual = argv
    act = base_plan(load_run(actual))
    pred = transform(base_plan(load_run(base)), tp=act.tp, pp=act.pp, dp=act.dp)
    graph, sched, _ = simulate_plan(pred)
    p = _by_role(graph, pred.st, pred.role, pred.ranks[0], sched.start, sched.end)
    a = _by_role(act.graph, act.st, act.role, act.ranks[0])
    print(f"{'role':5} {'kind':10} {'predicted n':>11} {'mean us':>9} {'emulated n':>10} {'mean us':>9}")
    for key in sorted(set(p) | set(a), key=str):
        pv, av = p.get(key, []), a.get(key, [])
        print(f"{key[0]:5} {str(key[1]):10} {len(pv):11d} {np.mean(pv) if pv else float('nan'):9.1f} "
              f"{len(av):10d} {np.mean(av) if av else float('nan'):9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
