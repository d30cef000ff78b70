"""Context parallelism's ring form, predicted from a ring base against the emulator (EMULATED).

    python studies/cp/ring.py [--out DIR] [--seeds 0,1,2] [--where]

Llama 3 8B (32 layers, sequence 8,192, micro-batches TP x PP) with `training.cp_form=ring` (Transformer Engine's
p2p ring, lumos/emulator/ring_attention.py): from the TP 2 x PP 2 x DP 2 x CP 2 base to CP 4, 8 and 1, DP 4,
PP 4, TP 4 and CP 4 with PP 4; from the CP 4 base to CP 2 and 8; from a TP 1 base (CP 8 inside one host) to CP 4
and 8. Each target is `lumos predict BASE --cp/--dp/--pp/--tp` against the emulated run of the same seed; the
last lines give the mean |error| per group, the emulated iteration of the two forms side by side, and where the
CP 8 prediction from 2x2x2c2 misses (kernel time by role and kind on stage 0's rank, a layer's ring span).
About 3 minutes per seed on 2 cores (runs kept under --out, so a second call only predicts). `--where`: only that
CP 8 breakdown, by kind and on both stages (docs/notes/2026-12-07-ring-context-parallel.md, 2026-12-08).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from lumos.emulator import emulate, write_result
from lumos.predict.options import PredictOptions
from lumos.predict.prediction import predict
from lumos.trace.run import read_manifest
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
    ap.add_argument("--where", action="store_true", help="only the CP 8 breakdown (`where`) of each seed")
    args = ap.parse_args()
    root = args.out or Path(tempfile.mkdtemp(prefix="ring_cp_"))
    seeds = [int(s) for s in args.seeds.split(",")]
    if args.where:
        for seed in seeds:
            where(root, seed)
        return
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
    """2x2x2c2 -> CP 8 (the ring's pairs cross hosts at CP 8), on stage 0's and stage 1's first ranks, predicted
    against emulated: kernel time and exposed time (GPU time only that kind's kernels hold; a rendezvous member from
    when its own dependencies are met, waiting included, as `run_breakdown` counts it) by role and kind; the median and
    summed GPU span of a layer's forward and backward blocks and of a layer's ring (first exchange to last flash
    kernel); the DP buckets' bytes and the median 80 MB bucket; a backward ring step's longer exchange (the pair
    that crosses hosts at these ranks)."""
    import numpy as np

    from lumos import intervals
    from lumos.analysis.run_replay import measured_times, occupancy
    from lumos.graph.model import TaskKind
    from lumos.predict.prediction import simulate_plan
    from lumos.predict.whatif import base_plan, transform

    out = transform(base_plan(load_run(_run(root, (2, 2, 2, 2), "ring", seed))), cp=8)
    graph, sched, _ = simulate_plan(out)
    act = base_plan(load_run(_run(root, (2, 2, 2, 8), "ring", seed)))
    sides = {"predicted": (out, graph, occupancy(graph, sched.start, sched.end), sched.end),
             "emulated": (act, act.graph, *measured_times(act.graph))}
    rows: dict = {}
    for side, (plan, g, start, end) in sides.items():
        st, n = plan.st, len(plan.role)
        gpu = (g.kind[:n] == int(TaskKind.GPU)) & g.in_step[:n]
        for r in (min(plan.ranks), sorted(plan.ranks)[1]):
            mine = gpu & (g.rank[:n] == r)
            comp = intervals.union(start[:n][mine & ~g.comm[:n]], end[:n][mine & ~g.comm[:n]])
            row = rows.setdefault(r, {})
            row.setdefault("iteration", {})[side] = (end[:n][mine].max() - start[:n][mine].min()) / 1e3
            kinds: dict = {}
            for t in np.flatnonzero(mine & g.comm[:n]).tolist():
                kinds.setdefault(f"{plan.role[t]} {st.coll[t]}", []).append(t)
            for key, ts in kinds.items():
                u = intervals.union(start[ts], end[ts])
                row.setdefault(f"{key}: kernel", {})[side] = float(np.sum(end[ts] - start[ts])) / 1e3
                row.setdefault(f"{key}: exposed", {})[side] = (float(np.sum(u[1] - u[0]))
                                                               - intervals.intersection_length(u, comp)) / 1e3
            dp = [t for t in kinds.get("dp allreduce", [])]
            row.setdefault("dp buckets: MB", {})[side] = sum(float(st.nbytes[t]) for t in dp) / 1e6
            big = [end[t] - start[t] for t in dp if st.nbytes[t] == 80e6]
            row.setdefault("dp 80 MB bucket: median us", {})[side] = float(np.median(big))
            spans: dict = {}
            for b in st.blocks:
                if b.rank != r or b.kind != "layer":
                    continue
                T = b.tasks[gpu[b.tasks]]
                spans.setdefault(b.phase, []).append(end[T].max() - start[T].min())
                fl = T[[("flash_attention" in str(st.op_name[t])) for t in T]]
                cp = T[plan.role[T] == "cp"]
                if len(cp) and len(fl):
                    spans.setdefault(f"{b.phase} ring", []).append(end[fl].max() - start[cp].min())
                if b.phase == "backward" and len(cp):   # each step's exchanges start together: the longer one
                    for s0 in np.unique(start[cp]):
                        same = cp[start[cp] == s0]
                        if len(same) == 2:
                            spans.setdefault("backward step, longer exchange", []).append((end[same] - s0).max())
            for key, v in spans.items():
                row.setdefault(f"{key}: median us", {})[side] = float(np.median(v))
                if "ring" not in key and "step" not in key:
                    row.setdefault(f"{key} layers: sum ms", {})[side] = float(np.sum(v)) / 1e3
    inter = out.collectives.as_dict()["inter_host"]
    print(f"2x2x2c2, seed {seed}: inter-host bandwidth {inter['bandwidth_gb_s']} GB/s ({inter['source']}; the base "
          f"crosses hosts only with its pipeline sends and receives)")
    _emulator_costs(out.collectives)
    for r, row in rows.items():
        print(f"2x2x2c2 -> CP 8, seed {seed}, rank {r}: predicted / emulated")
        for key, v in row.items():
            print(f"  {key}: {v.get('predicted', 0):.1f} / {v.get('emulated', 0):.1f}")


def _emulator_costs(model) -> None:
    """What CP 8's cross-host exchange (4 MiB a backward step), the base's pipeline send (32 MiB) and a DP bucket
    (80 MB over 16 ranks, 4 hosts of 4) cost in the emulator with the NIC to themselves and no jitter
    (lumos/emulator/costs.py, a job of 2 and of 8 hosts), and in the base's alpha-beta model (`model`)."""
    from lumos.config import compose
    from lumos.durations import CollectiveSpec
    from lumos.emulator.costs import CommCosts
    from lumos.emulator.settings import from_config

    s = from_config(compose("emulate", ["model=llama3_8b", "parallel.tp=2", "parallel.pp=2", "parallel.dp=2",
                                        "parallel.cp=8", "training.cp_form=ring"]))
    specs = {"4 MiB send across hosts": (("send", 4 << 20, 2, 2, 1), CollectiveSpec("send", 4 << 20, (0, 14))),
             "32 MiB send across hosts": (("send", 32 << 20, 2, 2, 1), CollectiveSpec("send", 32 << 20, (0, 16))),
             "80 MB all-reduce, 4 hosts x 4": (("allreduce", 80e6, 16, 4, 4),
                                               CollectiveSpec("allreduce", 80e6, tuple(range(0, 32, 2))))}
    for what, (args, spec) in specs.items():
        emu = [CommCosts(s.cluster, s.knobs.comm, hosts).collective(*args, 0) for hosts in (2, 8)]
        print(f"  {what}: emulator {emu[0]:.1f} us (2 hosts) / {emu[1]:.1f} us (8 hosts); "
              f"the base's model {model.time_us(spec):.1f} us")


if __name__ == "__main__":
    main()
