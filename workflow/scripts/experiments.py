"""The paper's what-if experiments on the emulated cluster (every actual is EMULATED, not measured).

    python workflow/scripts/experiments.py --out results/prediction [--seed 1] [--only NAME,..]

From the GPT-3 15B base at TP2 PP2 DP4: the nine scale-out counterfactuals
(2x2x8, 2x2x16, 2x2x32; 2x4x4, 2x8x4, 2x16x4; 2x4x8, 2x8x8, 2x4x16) and the
architecture variants V1-V4, each predicted from the base and compared with
`lumos emulate` of the target (same seed). Emulation runs through the CLI in a
subprocess: the predictor never imports the emulator. Writes one prediction
JSON per experiment and summary.json / summary.md.

A standalone driver, not a Snakemake rule: the pipeline runs the same
experiments with provenance (rules `emulate`, `predict`); this runs them in one
process for a quick look. It lives beside the pipeline, not in the package,
because it drives the CLI and the predictor together and is no library code.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from lumos.analysis import COMPONENTS
from lumos.predict.prediction import predict
from lumos.trace.run import read_manifest

SCALE_OUT = [("2x2x8", 2, 2, 8), ("2x2x16", 2, 2, 16), ("2x2x32", 2, 2, 32),
             ("2x4x4", 2, 4, 4), ("2x8x4", 2, 8, 4), ("2x16x4", 2, 16, 4),
             ("2x4x8", 2, 4, 8), ("2x8x8", 2, 8, 8), ("2x4x16", 2, 4, 16)]
VARIANTS = [("V1", "gpt3_15b_v1", {"layers": 64}), ("V2", "gpt3_15b_v2", {"layers": 96}),
            ("V3", "gpt3_15b_v3", {"hidden": 9216, "ffn": 18432}),
            ("V4", "gpt3_15b_v4", {"hidden": 12288, "ffn": 24576})]


def emulate(out: Path, model: str, tp: int, pp: int, dp: int, seed: int) -> Path:
    """`lumos emulate` into `out` (skipped when a manifest for the same config is already there)."""
    if (out / "manifest.json").exists():
        return out
    cmd = [sys.executable, "-m", "lumos.cli", "emulate", f"model={model}", f"parallel.tp={tp}",
           f"parallel.pp={pp}", f"parallel.dp={dp}", f"seed={seed}", f"out={out}", "progress=false"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return out


def experiments(only: set | None = None):
    for name, tp, pp, dp in SCALE_OUT:
        if not only or name in only:
            yield name, "scale-out", "gpt3_15b", (tp, pp, dp), {"tp": tp, "pp": pp, "dp": dp}
    for name, model, change in VARIANTS:
        if not only or name in only:
            yield name, "variant", model, (2, 2, 4), {"tp": 2, "pp": 2, "dp": 4, **change}


def main(argv=None) -> int:
    from lumos.trace import load_run
    from lumos.trace.atomic import write_text_atomic

    ap = argparse.ArgumentParser(prog="python workflow/scripts/experiments.py", description=__doc__)
    ap.add_argument("--out", default="results/prediction")
    ap.add_argument("--runs", default=None, help="where emulated runs go (default OUT/runs)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", default="", help="comma-separated experiment names")
    args = ap.parse_args(argv)
    out = Path(args.out)
    runs = Path(args.runs) if args.runs else out / "runs"
    out.mkdir(parents=True, exist_ok=True)
    t_all = time.perf_counter()
    base_dir = emulate(runs / f"gpt3_15b_2x2x4_s{args.seed}", "gpt3_15b", 2, 2, 4, args.seed)
    rows = []
    only = set(filter(None, args.only.split(",")))
    for name, group, model, (tp, pp, dp), target in experiments(only):
        t0 = time.perf_counter()
        actual_dir = emulate(runs / f"{model}_{tp}x{pp}x{dp}_s{args.seed}", model, tp, pp, dp, args.seed)
        t_emu = time.perf_counter() - t0
        t0 = time.perf_counter()
        doc = predict(load_run(base_dir), target, actual_tables=load_run(actual_dir),
                      actual_manifest=read_manifest(actual_dir), base_name=str(base_dir))
        t_pred = time.perf_counter() - t0
        doc["experiment"] = name
        write_text_atomic(out / f"{name}.json", json.dumps(doc, indent=1) + "\n")
        row = {"experiment": name, "group": group, "predicted_ms": doc["predicted"]["iteration_us"] / 1e3,
               "actual_ms": doc["measured"]["iteration_us"] / 1e3, "error_pct": doc["error_pct"],
               **{f"{k[:-3]}_err_pct": doc["component_error_pct"][k] for k in COMPONENTS},
               "predict_s": round(t_pred, 1), "emulate_s": round(t_emu, 1)}
        rows.append(row)
        print(_fmt_row(row), flush=True)
    so = [abs(r["error_pct"]) for r in rows if r["group"] == "scale-out"]
    va = [abs(r["error_pct"]) for r in rows if r["group"] == "variant"]
    summary = {"emulated": True, "seed": args.seed, "rows": rows,
               "scale_out_mean_abs_error_pct": float(np.mean(so)) if so else None,
               "scale_out_max_abs_error_pct": float(np.max(so)) if so else None,
               "variant_max_abs_error_pct": float(np.max(va)) if va else None,
               "wall_s": round(time.perf_counter() - t_all, 1)}
    write_text_atomic(out / "summary.json", json.dumps(summary, indent=1) + "\n")
    write_text_atomic(out / "summary.md", _markdown(summary))
    print(_markdown(summary))
    return 0


def _fmt_row(r: dict) -> str:
    comps = " ".join(f"{r[f'{k[:-3]}_err_pct']:+7.2f}" for k in COMPONENTS)
    return (f"{r['experiment']:<8}{r['predicted_ms']:>10.1f}{r['actual_ms']:>10.1f}{r['error_pct']:>+8.2f}  "
            f"{comps}  ({r['predict_s']:.0f}s predict, {r['emulate_s']:.0f}s emulate)")


def _markdown(s: dict) -> str:
    lines = [f"# What-if predictions vs emulated actuals (EMULATED cluster, seed {s['seed']})", "",
             "| experiment | predicted ms | actual ms (emulated) | error % | exposed compute % | overlapped % "
             "| exposed comm % | other % |", "|---|---|---|---|---|---|---|---|"]
    for r in s["rows"]:
        lines.append(f"| {r['experiment']} | {r['predicted_ms']:.1f} | {r['actual_ms']:.1f} | {r['error_pct']:+.2f} | "
                     + " | ".join(f"{r[f'{k[:-3]}_err_pct']:+.2f}" for k in COMPONENTS) + " |")
    lines.append("")
    if s["scale_out_mean_abs_error_pct"] is not None:
        lines.append(f"Scale-out: mean |error| {s['scale_out_mean_abs_error_pct']:.2f}%, "
                     f"worst {s['scale_out_max_abs_error_pct']:.2f}%.")
    if s["variant_max_abs_error_pct"] is not None:
        lines.append(f"Variants: worst |error| {s['variant_max_abs_error_pct']:.2f}%.")
    lines.append(f"Wall time {s['wall_s']} s.")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
