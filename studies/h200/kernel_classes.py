"""Where an H200 what-if's device time goes wrong, by kernel class (measured on hardware).

    python studies/h200/kernel_classes.py [--base base_r0] [TARGET ...]

For each target (default: layers_2x, width_1.5x, width_2x, mbs_8), the base plan transformed to it
(`lumos.predict.whatif.transform`, before the sustained-clock factor `lumos predict` applies) against
the mean of the target's measured profiled steps (both recordings): summed kernel time per class
(GEMM, attention, optimizer, memcpy/memset, other) and per kernel name. GEMMs whose shape changed
are the ones to read: a target whose shapes stay (more layers) shows the clock alone. The means mix
profiled steps at different clocks; `studies/h200/clock_steps.py` takes them one step at a time.

Also, per GEMM kernel of the base, the time per wave x k (`lumos.durations.compute.gemm_waves`): how a
tile's cost moves with k and the wave count inside the base's own shapes.
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import numpy as np

from lumos.graph import build_graph
from lumos.graph.model import TaskKind
from lumos.trace import find_steps, load_run
from lumos.durations.compute import gemm_tile, gemm_waves
from lumos.model.ops import gemm_mkn, op_class
from lumos.predict.whatif import base_plan, transform
from lumos.studies.h200 import H200, kernel_class

TARGETS = {"layers_2x": {"layers": 24}, "width_1.5x": {"hidden": 3072, "ffn": 12288},
           "width_2x": {"hidden": 4096, "ffn": 16384}, "mbs_8": {"micro_batch": 8}}
H200_SMS = 132


def kernel_time(graph) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    gpu = graph.kind == TaskKind.GPU
    for n, d in zip(graph.name[gpu], graph.dur[gpu]):
        out[str(n)] += float(d)
    return out


def measured(target: str) -> dict[str, float]:
    """Kernel time per name, mean over every profiled step of both recordings."""
    total: dict[str, float] = defaultdict(float)
    steps = 0
    for run in sorted(H200.glob(f"{target}_r*")):
        table = load_run(run)[0]
        for s in find_steps(table):
            for k, v in kernel_time(build_graph(table, step=s.number)).items():
                total[k] += v
            steps += 1
    return {k: v / steps for k, v in total.items()}


def by_class(times: dict[str, float]) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for k, v in times.items():
        out[kernel_class(k)] += v
    return out


def gemm_units(plan) -> None:
    g, st = plan.graph, plan.st
    rows = defaultdict(list)
    for t in np.flatnonzero((g.kind == TaskKind.GPU) & (st.op_dims != None)):  # noqa: E711
        op = str(st.op_name[t])
        mkn = gemm_mkn(op, st.op_dims[t]) if op_class(op) == "gemm" else None
        tile = gemm_tile(str(g.name[t]))
        if mkn is not None and tile is not None:
            rows[(str(g.name[t]), mkn)].append(float(g.dur[t]))
    print("\n| base GEMM kernel | m | k | n | waves | median us | ns per wave x k |")
    print("|---|---|---|---|---|---|---|")
    for (name, (m, k, n)), ds in sorted(rows.items()):
        w = gemm_waves((m, k, n), gemm_tile(name), H200_SMS)
        med = float(np.median(ds))
        print(f"| {name[:48]} | {m} | {k} | {n} | {w} | {med:.1f} | {1e3 * med / (w * k):.3f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("targets", nargs="*", default=list(TARGETS))
    ap.add_argument("--base", default="base_r0")
    args = ap.parse_args()
    plan = base_plan(load_run(H200 / args.base))
    print(f"from {args.base}, predicted before the clock factor vs measured (mean of every profiled step)")
    print("\n| target | class | measured ms | predicted ms | error % |")
    print("|---|---|---|---|---|")
    for target in args.targets:
        pred = by_class(kernel_time(transform(plan, **TARGETS[target]).graph))
        act = by_class(measured(target))
        for c in sorted(act, key=lambda c: -act[c]):
            print(f"| {target} | {c} | {act[c] / 1e3:.2f} | {pred.get(c, 0.0) / 1e3:.2f} | "
                  f"{100 * (pred.get(c, 0.0) / act[c] - 1):+.1f} |")
    gemm_units(plan)


if __name__ == "__main__":
    main()
