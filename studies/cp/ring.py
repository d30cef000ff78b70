"""Context parallelism's ring form, predicted from a ring base against the emulator (EMULATED).

    python studies/cp/ring.py [--out DIR] [--seeds 0,1,2]

Llama 3 8B (32 layers, sequence 8,192, micro-batches TP x PP) with `training.cp_form=ring` (Transformer Engine's
p2p ring, lumos/emulator/ring_attention.py): from the TP 2 x PP 2 x DP 2 x CP 2 base to CP 4, 8 and 1, DP 4,
PP 4, TP 4 and CP 4 with PP 4; from the CP 4 base to CP 2 and 8; from a TP 1 base (CP 8 inside one host) to CP 4
and 8. Each target is `lumos predict BASE --cp/--dp/--pp/--tp` against the emulated run of the same seed; the
last lines give the mean |error| per group, the emulated iteration of the two forms side by side, and where the
CP 8 prediction from 2x2x2c2 misses (kernel time by role and kind on stage 0's rank, a layer's ring span).
About 3 minutes per seed on 2 cores (runs kept under --out, so a second call only predicts).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from lumos.emulator import emulate, write_result
from lumos.predict.options import PredictOptions
from lumos.predict.prediction import predict, read_manifest
from lumos.trace import load_run

# (group, base layout, target, target layout): layouts TP x PP x DP x CP
CASES = [("from 2x2x2c2", (2, 2, 2, 2), {"cp": 4}, (2, 2, 2, 4)),
         ("from 2x2x2c2", (2, 2, 2, 2), {"cp": 8}, (2, 2, 2, 8)),
         ("from 2x2x2c2", (2, 2, 2, 2), {"cp": 1}, (2, 2, 2, 1)),
         ("from 2x2x2c2", (2, 2, 2, 2), {"dp": 4}, (2, 2, 4, 2)),
         ("from 2x2x2c2", (2, 2, 2, 2), {"pp": 4}, (2, 4, 2, 2)),
         ("from 2x2x2c2", (2, 2, 2, 2), {"tp": 4}, (4, 2, 2, 2)),
         ("from 2x2x2c2", (2, 2, 2, 2), {"cp": 4, "pp": 4}, (2, 4, 2, 4)),
         ("from 2x2x2c4", (2, 2, 2, 4), {"cp": 2}, (2, 2, 2, 2)),
         ("from 2x2x2c4", (2, 2, 2, 4), {"cp": 8}, (2, 2, 2, 8)),
         ("from 1x2x2c2", (1, 2, 2, 2), {"cp": 4}, (1, 2, 2, 4)),
         ("from 1x2x2c2", (1, 2, 2, 2), {"cp": 8}, (1, 2, 2, 8))]


def _name(layout, form: str) -> str:
    tp, pp, dp, cp = layout
    return f"{tp}x{pp}x{dp}" + (f"c{cp}-{form}" if cp > 1 else "")


def _run(root: Path, layout, form: str, seed: int) -> Path:
    tp, pp, dp, cp = layout
    out = root / f"{_name(layout, form)}-seed{seed}"
    if not (out / "manifest.json").exists():
        write_result(emulate(["model=llama3_8b", f"parallel.tp={tp}", f"parallel.pp={pp}", f"parallel.dp={dp}",
                              f"parallel.cp={cp}", f"training.cp_form={form}", f"seed={seed}"], progress=False), out)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="where the emulated runs are kept (default: a temp dir)")
    ap.add_argument("--seeds", default="0", help="comma-separated seeds (default 0)")
    args = ap.parse_args()
    root = args.out or Path(tempfile.mkdtemp(prefix="ring_cp_"))
    seeds = [int(s) for s in args.seeds.split(",")]
    errors: dict[str, list[float]] = {}
    print("| group | target | seed | actual ms | predicted ms | error |\n|---|---|---|---|---|---|")
    for group, base, target, layout in CASES:
        for seed in seeds:
            b, a = _run(root, base, "ring", seed), _run(root, layout, "ring", seed)
            doc = predict(load_run(b), target, PredictOptions(), actual_tables=load_run(a),
                          actual_manifest=read_manifest(a))
            actual = read_manifest(a)["iteration_us"] / 1e3
            errors.setdefault(group, []).append(doc["error_pct"])
            print(f"| {group} | {_name(layout, 'ring')} | {seed} | {actual:.1f} | "
                  f"{doc['predicted']['iteration_us'] / 1e3:.1f} | {doc['error_pct']:+.2f}% |", flush=True)
    for group, errs in errors.items():
        print(f"{group}: mean |error| {statistics.mean(abs(e) for e in errs):.2f}% over {len(errs)}")
    every = [abs(e) for errs in errors.values() for e in errs]
    print(f"all: mean |error| {statistics.mean(every):.2f}% over {len(every)}")
    for cp in (2, 4, 8):
        ms = {form: read_manifest(_run(root, (2, 2, 2, cp), form, seeds[0]))["iteration_us"] / 1e3
              for form in ("ring", "allgather")}
        print(f"2x2x2c{cp}, seed {seeds[0]}: ring {ms['ring']:.1f} ms, all-gather {ms['allgather']:.1f} ms")
    where(root, seeds[0])


def where(root: Path, seed: int) -> None:
    """2x2x2c2 -> CP 8 (the ring's pairs cross hosts at CP 8): kernel time on stage 0's rank by role and kind,
    predicted against emulated, and the median span of a layer's ring (first exchange to last flash kernel)."""
    import numpy as np

    from lumos.predict.prediction import simulate_plan
    from lumos.predict.whatif import base_plan, transform

    out = transform(base_plan(load_run(_run(root, (2, 2, 2, 2), "ring", seed))), cp=8)
    graph, sched, _ = simulate_plan(out)
    act = base_plan(load_run(_run(root, (2, 2, 2, 8), "ring", seed)))
    sides = {"predicted": (out, graph, sched.start, sched.end),
             "emulated": (act, act.graph, act.graph.ts, act.graph.ts + act.graph.dur)}
    sums, spans = {}, {}
    for side, (plan, g, start, end) in sides.items():
        st, r0 = plan.st, min(plan.ranks)
        for t in np.flatnonzero(g.comm & (g.rank == r0)).tolist():
            key = f"{plan.role[t]} {st.coll[t]}"
            sums.setdefault(key, {}).setdefault(side, 0.0)
            sums[key][side] += (end[t] - start[t]) / 1e3
        for b in st.blocks:
            T = b.tasks
            fl = T[[("flash_attention" in str(st.op_name[t])) for t in T]]
            cp = T[plan.role[T] == "cp"]
            if b.rank == r0 and b.kind == "layer" and len(cp) and len(fl):
                spans.setdefault((b.phase, side), []).append(end[fl].max() - start[cp].min())
    print(f"2x2x2c2 -> CP 8, seed {seed}, stage 0's rank: kernel time (ms) predicted / emulated")
    for key, v in sorted(sums.items()):
        print(f"  {key}: {v.get('predicted', 0):.1f} / {v.get('emulated', 0):.1f}")
    for phase in ("forward", "backward"):
        p, e = (float(np.median(spans[(phase, side)])) for side in ("predicted", "emulated"))
        print(f"  a layer's {phase} ring, median span: {p:.0f} / {e:.0f} us")


if __name__ == "__main__":
    main()
