"""Compute kernels slow down under communication kernels: what a trace shows of it, and how much of
a sharded DP prediction's miss it is (EMULATED; the sharded DP predictions' remaining bias,
docs/notes/2026-12-03-sharded-dp.md).

    python studies/contention/comm_contention.py [--out DIR] [--dp 8 32] [--noisy]
    python studies/contention/comm_contention.py --real

Emulates the 15B FSDP base (2x2x4) and its DP targets with every rank emulated and, unless
`--noisy`, every random draw off (kernel and collective jitter, rank slowness, stragglers), then for
rank 0 of each run prints the compute kernels' total time and how much of it ran under a
communication kernel. For the base it also prints, per kernel name with at least 5 occurrences
both ways, the median duration of the occurrences that ran wholly under a communication kernel over
that of those that ran wholly clear of one: the slowdown a predictor can fit on the base trace
alone. Last, `lumos predict BASE --dp D --actual TARGET --contention off|fit` per target, its
compute time (exposed + overlapped) beside the target's: without the slowdown and with the one
`lumos.durations.contention` fits on the base. `--real`: that fit on each public
multi-GPU trace of `resources/traces/real` (HTA's A100/V100 ranks, PARAM's eight V100 DLRM ranks).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import numpy as np

from lumos.intervals import share_under

QUIET = ["emulator.comm.jitter_sigma=0", "emulator.compute.jitter_sigma=0", "emulator.rank.slowness_sigma=0",
         "emulator.rank.straggler_prob=0", "emulator.peers.noise_sigma=0"]


def kernels(run: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Rank 0's GPU kernels: (name, start, duration, is communication)."""
    from lumos.trace import load_trace
    from lumos.trace.schema import KERNEL, comm_kernel_mask

    t = load_trace(run / "rank0.json.gz")
    k = t.cat == KERNEL
    return t.name[k], t.ts[k], t.dur[k], comm_kernel_mask(t.name[k])


def under_comm(start: np.ndarray, dur: np.ndarray, comm: np.ndarray) -> np.ndarray:
    """Per compute kernel (`~comm`), the share of its span under some communication kernel."""
    return share_under(start[~comm], start[~comm] + dur[~comm], start[comm], start[comm] + dur[comm])


def real_traces() -> None:
    """The fit on the public multi-GPU traces (measured on hardware), keyed by kernel name: their
    layers are not annotated, so `base_plan` (which keys by name and Input Dims) cannot read them."""
    from lumos.graph.model import TaskKind
    from lumos.graph.run_graph import build_run_graph
    from lumos.trace import load_trace
    from lumos.durations.contention import base_shares, fit_contention

    real = Path(__file__).resolve().parents[2] / "resources" / "traces" / "real"   # studies/contention/ -> the checkout
    paths = sorted((real / "hta").glob("*.json.gz")) + sorted((real / "param" / "dlrm_8rank" / "kineto").glob("*.gz"))
    print("public multi-GPU traces, one rank each, kernels keyed by name (MEASURED ON HARDWARE)")
    for path in paths:
        t = load_trace(path)
        g = build_run_graph([t])
        if not g.comm.any():
            continue
        tasks = np.flatnonzero((g.kind == TaskKind.GPU) & ~g.comm.astype(bool) & (g.event >= 0)
                               & np.array([not str(n).startswith("Mem") for n in g.name]))
        dur, share = base_shares(g, [t], tasks)
        fit = fit_contention(np.array([str(n) for n in g.name[tasks]], dtype=object), dur, share)
        print(f"  {path.parent.name}/{path.name}: {len(tasks)} compute kernels, {int((share >= 0.99).sum())} wholly "
              f"under communication; {fit.kernels} kernels read both ways (ratios "
              f"{', '.join(f'{r:.2f}' for r in fit.ratios) or '-'}): slowdown {fit.slowdown:.3f}")


def main() -> None:
    from lumos.predict.options import PredictOptions
    from lumos.predict.prediction import predict
    from lumos.emulator.emulate import emulate, write_result
    from lumos.trace import load_run

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("/tmp/lumos-comm-contention"))
    ap.add_argument("--dp", nargs="+", type=int, default=[8, 32])
    ap.add_argument("--noisy", action="store_true", help="keep the emulator's random draws")
    ap.add_argument("--real", action="store_true", help="the fit on the public multi-GPU traces instead")
    args = ap.parse_args()
    if args.real:
        real_traces()
        return
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
        _, start, dur, comm = kernels(run)
        share, dur = under_comm(start, dur, comm), dur[~comm]
        print(f"  DP {dp:>2}: compute kernels {len(dur)}, {dur.sum() / 1e3:.1f} ms in all, "
              f"{(share * dur).sum() / 1e3:.1f} ms of it under a communication kernel")
    names, start, dur, comm = kernels(runs[4])
    share, names, dur = under_comm(start, dur, comm), names[~comm], dur[~comm]
    ratios = []
    for n in sorted(set(names.tolist())):
        idx = names == n
        clear, under = dur[idx & (share < 0.05)], dur[idx & (share > 0.95)]
        if len(clear) >= 5 and len(under) >= 5:
            ratios.append(float(np.median(under) / np.median(clear)))
    if ratios:
        near = sum(abs(r - statistics.median(ratios)) < 0.01 for r in ratios)
        print(f"  base: median duration under / clear of a communication kernel, {len(ratios)} kernel names: "
              f"median {statistics.median(ratios):.3f} ({near} within 0.01 of it), range {min(ratios):.3f}-"
              f"{max(ratios):.3f} (a name that covers several shapes mixes them)")
    base = load_run(runs[4])
    for contention in ("off", "fit"):
        for dp in args.dp:
            doc = predict(base, {"dp": dp}, PredictOptions(contention=contention),
                          actual_tables=load_run(runs[dp]))
            p, m = doc["predicted"], doc["measured"]
            pc = (p["exposed_compute_us"] + p["overlapped_us"]) / 1e3
            mc = (m["exposed_compute_us"] + m["overlapped_us"]) / 1e3
            fit = doc["contention"]
            said = f"slowdown {fit['slowdown']:.3f} from {fit['kernels']} kernels" if contention == "fit" else "off"
            print(f"  predict --dp {dp} --contention {contention} ({said}): error {doc['error_pct']:+.2f}%, "
                  f"iteration {p['iteration_us'] / 1e3:.1f} vs {m['iteration_us'] / 1e3:.1f} ms, "
                  f"compute (exposed + overlapped) {pc:.1f} vs {mc:.1f} ms")


if __name__ == "__main__":
    main()
