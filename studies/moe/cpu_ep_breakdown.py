"""Where a CPU MoE recording's step goes: host work, waits on gloo's collectives, and the host's load.

    python studies/moe/cpu_ep_breakdown.py resources/traces/moe_cpu/ep{2,4}_r{2,3,4,5}

Measured on this machine: per recording, the mean over every profiled step and rank of the step, the main thread's
time from each collective's issuing op to the op that waited for it (`lumos.model.moe_host.waiter`), the rest
(host work), the forward's dense work (the slowdown's measure, `dense_forward_us`) and the gloo worker ranges'
time; with rank 0's `lumosCapture.load_average` (1, 5, 15 min) as it started.
"""

from __future__ import annotations

import sys

import numpy as np

from lumos.model.moe_host import dense_forward_us, read_host_moe_step, waiter
from lumos.trace import find_steps, load_run, schema


def breakdown(path) -> dict:
    rows = []
    tables = load_run(path)
    for t in tables:
        for s in find_steps(t):
            r = read_host_moe_step(t, s)
            main = np.flatnonzero((t.ts >= s.start) & (t.ts < s.end) & (t.tid == s.tid) & (t.cat == schema.CPU_OP))
            starts = np.sort(t.ts[main])
            wait = 0.0
            for x in r.exchanges:
                issued = float(t.ts[x.row] + t.dur[x.row])
                i = waiter(starts, issued, float(t.ts[x.worker] + t.dur[x.worker]))
                wait += (float(starts[i]) if i >= 0 else issued) - float(t.ts[x.row])
            step = s.end - s.start
            rows.append((step, wait, step - wait, dense_forward_us(t, s), sum(float(t.dur[x.worker]) for x in r.exchanges)))
    m = np.mean(rows, axis=0) / 1e3
    load = (min(tables, key=lambda t: t.rank).metadata.get("lumosCapture") or {}).get("load_average")
    return {"step": m[0], "waits": m[1], "host": m[2], "dense_forward": m[3], "gloo": m[4], "load": load}


def main(argv=None) -> int:
    paths = (argv if argv is not None else sys.argv[1:])
    print(f"{'recording':<12}{'step ms':>9}{'waits':>9}{'host':>9}{'dense fwd':>11}{'gloo':>9}  load (rank 0)")
    for p in paths:
        b = breakdown(p)
        name = str(p).rstrip("/").rsplit("/", 1)[-1]
        print(f"{name:<12}{b['step']:>9.1f}{b['waits']:>9.1f}{b['host']:>9.1f}{b['dense_forward']:>11.2f}"
              f"{b['gloo']:>9.1f}  {b['load'] if b['load'] else '-'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
