"""Per-kernel check of the TP all-reduces of a TP change (why the TP changes read low in exposed
communication, docs/notes/2026-12-06-tp-collectives.md): emulated vs predicted median kernel, with
every random draw off so that no peer waits.

    python studies/tp/collectives.py [--out /tmp/lumos_tp_quiet] [--targets 4x2x4 8x2x4]

Emulates the 15B 2x2x4 base and each target with the emulator's random draws off (EMULATED, seed 0;
about 5 s each), then prints the base's fitted intra-host collective model (`AlphaBeta`) and, per
target, rank 0's TP all-reduce kernels: the emulated median against the transformed plan's
(`lumos.predict.whatif.transform`, before the replay), and the whole prediction's error.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from lumos.trace import load_run, schema
from lumos.trace.steps import select_step
from lumos.durations.collectives import CollectiveSpec
from lumos.predict.whatif import base_plan, transform

QUIET = ["emulator.comm.jitter_sigma=0", "emulator.compute.jitter_sigma=0", "emulator.rank.slowness_sigma=0",
         "emulator.rank.straggler_prob=0", "emulator.peers.noise_sigma=0"]


def emulate(out: Path, layout: str) -> Path:
    tp, pp, dp = layout.split("x")
    d = out / layout
    if not (d / "manifest.json").exists():
        subprocess.run([sys.executable, "-m", "lumos.cli", "emulate", "model=gpt3_15b", f"parallel.tp={tp}",
                        f"parallel.pp={pp}", f"parallel.dp={dp}", "seed=0", f"out={d}", "progress=false", *QUIET,
                        "--quiet"],
                       check=True, stdout=subprocess.DEVNULL)
    return d


def emulated_tp_allreduce(run: Path, tp: int) -> tuple[int, float]:
    """(count, median us) of rank 0's TP all-reduce kernels in its steady iteration, of their most common
    message (a DP group of the same size also all-reduces: its buckets are fewer)."""
    t = min(load_run(run), key=lambda t: t.rank)
    s = select_step(t, None)
    rows = np.flatnonzero((t.cat == schema.KERNEL) & (t.ts >= s.start) & (t.ts < s.end)
                          & (t.coll_name == "allreduce") & (t.group_size == tp))
    sizes, counts = np.unique(t.in_nelems[rows], return_counts=True)
    common = rows[t.in_nelems[rows] == sizes[np.argmax(counts)]]
    return len(common), float(np.median(t.dur[common]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("/tmp/lumos_tp_quiet"))
    ap.add_argument("--targets", nargs="+", default=["4x2x4", "8x2x4"])
    args = ap.parse_args()
    base = emulate(args.out, "2x2x4")
    plan = base_plan(load_run(base))
    ab = plan.collectives
    print(f"intra-host model ({ab.source.get('intra_host')}): fixed {ab.fixed_us:.1f} us + constant "
          f"{ab.level_fixed_us.get('intra_host', 0.0):.1f} us + steps x {ab.alpha_us['intra_host']:.1f} us + "
          f"factor x bytes / {ab.beta_bytes_per_us['intra_host'] / 1e3:.1f} GB/s")
    n, med = emulated_tp_allreduce(base, 2)
    print("\n| layout | TP all-reduces | emulated median us | predicted us | kernel error % | iteration error % |")
    print("|---|---|---|---|---|---|")
    print(f"| 2x2x4 (base) | {n} | {med:.1f} | (measured) | - | - |")
    for layout in args.targets:
        tp, pp, dp = map(int, layout.split("x"))
        run = emulate(args.out, layout)
        out = transform(plan, tp=tp, pp=pp, dp=dp)
        g = out.graph
        tasks = [t for t in np.flatnonzero(g.comm & (out.role == "tp")) if g.rank[t] == 0]
        sizes, counts = np.unique([float(out.st.nbytes[t]) for t in tasks], return_counts=True)
        common = float(sizes[np.argmax(counts)])
        pred = float(np.median([g.dur[t] for t in tasks if float(out.st.nbytes[t]) == common]))
        n, med = emulated_tp_allreduce(run, tp)
        doc = json.loads(subprocess.run([sys.executable, "-m", "lumos.cli", "predict", str(base), "--tp", str(tp),
                                         "--pp", str(pp), "--dp", str(dp), "--actual", str(run), "--format", "json"],
                                        check=True, capture_output=True, text=True).stdout)
        model = ab.time_us(CollectiveSpec("allreduce", common, tuple(range(tp))))
        print(f"| {layout} | {n} | {med:.1f} | {pred:.1f} (model alone {model:.1f}) | {100 * (pred / med - 1):+.1f} | "
              f"{doc['error_pct']:+.2f} |")


if __name__ == "__main__":
    main()
