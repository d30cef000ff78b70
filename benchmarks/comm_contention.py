"""Compute kernels slow down under communication kernels: what a trace shows of it, and how much of
a sharded DP prediction's miss it is (EMULATED; issue 32's remaining bias, docs/prediction.md,
"Sharded data parallelism").

    python benchmarks/comm_contention.py [--out DIR] [--dp 8 32] [--noisy]

Emulates the 15B FSDP base (2x2x4) and its DP targets with every rank emulated and, unless
`--noisy`, every random draw off (kernel and collective jitter, rank slowness, stragglers), then for
rank 0 of each run prints the compute kernels' total time and how much of it ran under a
communication kernel. For the base it also prints, per kernel name with at least 5 occurrences
both ways, the median duration of the occurrences that ran wholly under a communication kernel over
that of those that ran wholly clear of one: the slowdown a predictor could fit on the base trace
alone. Last, `lumos predict BASE --dp D --actual TARGET` per target, its compute time
(exposed + overlapped) beside the target's.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import numpy as np

QUIET = ["emulator.comm.jitter_sigma=0", "emulator.compute.jitter_sigma=0", "emulator.rank.slowness_sigma=0",
         "emulator.rank.straggler_prob=0", "emulator.peers.noise_sigma=0"]


def under_comm(events: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """Per compute kernel, the share of its span under some communication kernel, and its duration."""
    comm = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e["name"].startswith("nccl"))
    merged: list[list[float]] = []
    for s, e in comm:
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    m = np.array(merged) if merged else np.zeros((0, 2))
    share, dur = [], []
    for e in events:
        if e["name"].startswith("nccl") or e["dur"] <= 0:
            continue
        a, b = e["ts"], e["ts"] + e["dur"]
        ov, i = 0.0, int(np.searchsorted(m[:, 1], a))
        while i < len(m) and m[i, 0] < b:
            ov += min(b, m[i, 1]) - max(a, m[i, 0])
            i += 1
        share.append(ov / e["dur"])
        dur.append(e["dur"])
    return np.array(share), np.array(dur)


def gpu_kernels(run: Path) -> list[dict]:
    import gzip

    import orjson

    doc = orjson.loads(gzip.open(run / "rank0.json.gz").read())
    return [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"]


def main() -> None:
    from lumos.analysis.predict import predict
    from lumos.emulator.emulate import emulate, write_result
    from lumos.trace import load_run

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("/tmp/lumos-comm-contention"))
    ap.add_argument("--dp", nargs="+", type=int, default=[8, 32])
    ap.add_argument("--noisy", action="store_true", help="keep the emulator's random draws")
    args = ap.parse_args()
    runs = {}
    for dp in [4, *args.dp]:
        out = args.out / f"fsdp_2x2x{dp}"
        res = emulate(["model=gpt3_15b", "parallel.tp=2", "parallel.pp=2", f"parallel.dp={dp}",
                       "training.dp_sharding=fsdp", "seed=0", "ranks=all", "write_ranks=stage",
                       "emulator.granularity=fine", *([] if args.noisy else QUIET)], progress=False)
        write_result(res, out)
        runs[dp] = out
    print(f"rank 0, FSDP 15B 2x2xDP, every rank emulated, {'noisy' if args.noisy else 'every random draw off'} "
          f"(EMULATED)")
    for dp, run in runs.items():
        share, dur = under_comm(gpu_kernels(run))
        print(f"  DP {dp:>2}: compute kernels {len(dur)}, {dur.sum() / 1e3:.1f} ms in all, "
              f"{(share * dur).sum() / 1e3:.1f} ms of it under a communication kernel")
    events = gpu_kernels(runs[4])
    share, dur = under_comm(events)
    names = [e["name"] for e in events if not e["name"].startswith("nccl") and e["dur"] > 0]
    ratios = []
    for n in sorted(set(names)):
        idx = np.array([i for i, x in enumerate(names) if x == n])
        clear, under = dur[idx][share[idx] < 0.05], dur[idx][share[idx] > 0.95]
        if len(clear) >= 5 and len(under) >= 5:
            ratios.append(float(np.median(under) / np.median(clear)))
    if ratios:
        near = sum(abs(r - statistics.median(ratios)) < 0.01 for r in ratios)
        print(f"  base: median duration under / clear of a communication kernel, {len(ratios)} kernel names: "
              f"median {statistics.median(ratios):.3f} ({near} within 0.01 of it), range {min(ratios):.3f}-"
              f"{max(ratios):.3f} (a name that covers several shapes mixes them)")
    base = load_run(runs[4])
    for dp in args.dp:
        doc = predict(base, {"dp": dp}, actual_tables=load_run(runs[dp]))
        p, m = doc["predicted"], doc["measured"]
        pc = (p["exposed_compute_us"] + p["overlapped_us"]) / 1e3
        mc = (m["exposed_compute_us"] + m["overlapped_us"]) / 1e3
        print(f"  predict --dp {dp}: error {doc['error_pct']:+.2f}%, iteration {p['iteration_us'] / 1e3:.1f} vs "
              f"{m['iteration_us'] / 1e3:.1f} ms, compute (exposed + overlapped) {pc:.1f} vs {mc:.1f} ms")


if __name__ == "__main__":
    main()
