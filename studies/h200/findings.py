"""Print the measured facts docs/results.md's H200 section states beside its tables (measured on hardware).

    python studies/h200/findings.py [--tables results/tables]

1. Same kernels, longer runs: mean duration of every kernel name present in both the base and a
   target recording (all profiled steps), target / base, weighted by the base's time in it.
2. Kernel time by class in the default step: the prediction's GPU tasks vs the target as measured.
3. Host speed: mean `aten::split` CPU time per profiled step of every recording.
4. Memory: the model's prediction for the base vs `max_memory_allocated` in summary.json.
5. With --tables (the pipeline's tables): the summaries docs/results.md quotes from replay_h200 and
   h200_whatif, and transfer_real without resnet_1gpu (its 56 rows dominate that table).
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
from pathlib import Path

import numpy as np

from lumos.studies.h200 import H200


def _events(run: str) -> list[dict]:
    return json.loads(gzip.decompress((H200 / run / "rank0.json.gz").read_bytes()))["traceEvents"]


def same_kernels(base: str, target: str) -> float:
    def means(run):
        d = collections.defaultdict(list)
        for e in _events(run):
            if e.get("cat") == "kernel":
                d[e["name"]].append(e["dur"])
        return d
    a, b = means(base), means(target)
    common = [k for k in a if k in b]
    w = np.array([sum(a[k]) for k in common])
    r = np.array([np.mean(b[k]) / np.mean(a[k]) for k in common])
    return float(np.sum(w * r) / np.sum(w))


def kernel_classes(plan) -> dict:
    from lumos.graph.model import TaskKind
    from lumos.model.ops import op_class

    g, st = plan.graph, plan.st
    out = collections.defaultdict(float)
    for t in np.flatnonzero(g.kind == TaskKind.GPU):
        b = st.task_block[t]
        kind = st.blocks[b].kind if b >= 0 else ""
        cls = kind if kind in ("optimizer", "bucket") else op_class(str(st.op_name[t]))
        out["memset/memcpy" if str(g.name[t]).startswith("Mem") else cls] += g.dur[t]
    return out


def split_us(run: str) -> list[float]:
    ev = _events(run)
    steps = sorted((e for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep")),
                   key=lambda e: e["ts"])
    out = []
    for s in steps:
        d = [e["dur"] for e in ev if e.get("cat") == "cpu_op" and e["name"] == "aten::split"
             and s["ts"] <= e["ts"] < s["ts"] + s["dur"]]
        out.append(round(float(np.mean(d)), 1))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", default=None, help="the pipeline's tables (results/tables)")
    args = ap.parse_args(argv)
    from lumos.trace import load_run
    from lumos.predict.whatif import base_plan, memory_of, transform

    print("1. same kernel names, target / base mean duration (weighted by base time):")
    for t in ("layers_1.5x_r0", "layers_2x_r0", "mbcount_4_r0", "no_side_stream_r0"):
        print(f"   {t:20s} x{same_kernels('base_r0', t):.3f}")
    print("2. GPU time by class in the default step, ms: base / predicted / measured (measured / predicted)")
    base = base_plan(load_run(H200 / "base_r0"))
    kb = kernel_classes(base)
    for t, kw in (("layers_2x_r0", {"layers": 24}), ("width_2x_r0", {"hidden": 4096, "ffn": 16384}),
                  ("mbs_8_r0", {"micro_batch": 8})):
        kp, ka = kernel_classes(transform(base, **kw)), kernel_classes(base_plan(load_run(H200 / t)))
        print(f"   {t}")
        for k in sorted(set(kp) | set(ka)):
            print(f"     {k:14s} {kb.get(k, 0) / 1e3:7.1f} {kp.get(k, 0) / 1e3:7.1f} {ka.get(k, 0) / 1e3:7.1f}"
                  f"  x{ka.get(k, 0) / max(kp.get(k, 0), 1e-9):.3f}")
    print("3. mean aten::split CPU time per profiled step, us:")
    for run in sorted(p.name for p in H200.iterdir() if p.is_dir()):
        print(f"   {run:22s} {split_us(run)}")
    summary = json.loads((H200 / "summary.json").read_text())
    measured = next(r["max_memory_gib"] for r in summary["runs"] if r["config"] == "base" and r["rep"] == 0)
    mem = memory_of(base, {"bytes_per_param": 8.0, "recompute": "none", "workspace_gib": 0.0})
    print(f"4. memory of the base: predicted {mem['memory_gib_per_gpu']:.2f} GiB (8 bytes/param, no recompute, "
          f"no workspace), measured {measured:.2f} GiB max_memory_allocated")
    if args.tables:
        import pandas as pd

        tables = Path(args.tables)
        rep = pd.read_csv(tables / "replay_h200.csv")
        print(f"5a. replay_h200: {len(rep)} recordings, Lumos max |error| {rep['error_pct'].abs().max():.3f}%, "
              f"violations {int(rep['violations'].sum())}; dPRO-style mean |error| "
              f"{rep['dpro_error_pct'].abs().mean():.2f}%, worst {rep['dpro_error_pct'].abs().max():.2f}%")
        w = pd.read_csv(tables / "h200_whatif.csv")
        w = w[w["role"] == "what-if"] if "role" in w else w[~w["target"].isin(["base", "no_side_stream"])]
        col = next((c for c in ("steps_from", "host") if c in w), None)   # "host": a table from before kernels pooled
        w = w.assign(steps_from=w[col] if col else "own steps")
        for (b, steps_from), g in w.groupby(["base", "steps_from"], sort=False):
            h = g[g["target"] != "mbs_2"]
            below = int((h["predicted_iteration_ms"] < h["measured_min_ms"]).sum())
            print(f"5b. h200_whatif from {b} (profiled steps from {steps_from}): {len(g)} targets, "
                  f"mean |error| {g['error_pct'].abs().mean():.2f}% "
                  f"(median {g['error_pct'].abs().median():.2f}%); without mbs_2 mean "
                  f"{h['error_pct'].abs().mean():.2f}%, worst {h['error_pct'].abs().max():.2f}%, exposed compute "
                  f"{h['exposed_compute_error_pct'].mean():+.2f}% on average, {below} of {len(h)} below the "
                  f"fastest measured iteration; all what-ifs worst {g['error_pct'].abs().max():.2f}%")
        df = pd.read_csv(tables / "transfer_real.csv")
        df = df[(df["row"] == "prediction") & (df["trace"] != "resnet_1gpu")]
        cols = {"lumos": "lumos_err_pct", "dPRO-style": "dpro_err_pct", "same as k": "same_as_k_err_pct",
                "kernel ratio": "kernel_ratio_err_pct"}
        print(f"5c. transfer without resnet_1gpu ({len(df)} predictions), mean |error| %: "
              + ", ".join(f"{k} {df[c].abs().mean():.2f}" for k, c in cols.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
