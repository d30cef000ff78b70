"""Where the H200 what-ifs' compute residual sits: in the GEMM shape law, or in the clock (measured on hardware).

    python studies/h200/clock_steps.py [--base base_r0] [TARGET ...]

For each GPU-bound target of the pipeline's `h200` config (default: every one but the base and
micro-batch 2), the base plan's kernels re-timed to the target with the sustained-clock model off
(`lumos predict --clocks off`: the GEMM, attention and memory-bound suppliers alone), against each
profiled step of the target's recordings. Per step: where it lies in busy time (the profiler's wait
and warm-up iterations at the measured period, then the profiled ones), measured kernel time over
predicted for GEMMs and for every kernel, the clock model's slowdown for that step (the
prediction's factor times its `step_levels` entry), and what is left after it. A step in the boost
part (model 1.000) shows the shape laws alone; a step whose measured ratio jumps while the model's
does not is a clock dip the calibration runs did not show. About 30 s.
"""

from __future__ import annotations

import argparse

import numpy as np

from lumos.studies.h200 import H200, kernel_ms, predict_args


def main() -> None:
    from omegaconf import OmegaConf

    from lumos.predict.options import PredictOptions
    from lumos.predict.prediction import predict
    from lumos.config import config_dir
    from lumos.graph import build_graph
    from lumos.trace import find_steps, load_run
    from lumos.predict.whatif import base_plan, transform

    cfg = OmegaConf.to_container(OmegaConf.load(config_dir() / "config.yaml"))["h200"]
    default = [k for k, t in cfg["targets"].items() if t["flags"] and k != "mbs_2"]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("targets", nargs="*", default=default)
    ap.add_argument("--base", default="base_r0")
    args = ap.parse_args()
    base = load_run(H200 / args.base)
    plan = base_plan(base)
    calib = set(cfg.get("clock_calibration", []))
    print(f"from {args.base}; ratio = measured / predicted with --clocks off; model = the clock model's "
          "slowdown for that step; left = ratio / model - 1")
    print("\n| target | recording | step | busy time, s | GEMM ratio | all-kernel ratio | model | GEMM left % "
          "| all left % |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label in args.targets:
        t = cfg["targets"][label]
        target, kw = predict_args(t["flags"])
        pred_gemm, pred_all = kernel_ms(transform(plan, **target, **kw).graph)
        clock = predict(base, target, PredictOptions(**kw), plan=plan)["clock"]
        name = f"{label}{' (calibration)' if label in calib else ''}"
        for run in sorted(H200.glob(f"{t['config']}_r*")):
            table = load_run(run)[0]
            steps = find_steps(table)
            graphs = [build_graph(table, step=s.number) for s in steps]
            period = float(np.mean([(s.end - s.start) for s in steps])) / 1e3
            cap = table.metadata.get("lumosCapture") or {}
            skipped = int(cap["wait"]) + int(cap["warmup"])
            for k, (s, g) in enumerate(zip(steps, graphs)):
                gemm, every = kernel_ms(g)
                model = clock["factor"] * clock["step_levels"][k]
                t0 = (skipped + k) * period / 1e3
                print(f"| {name} | {run.name} | {s.number} | {t0:.2f}-{t0 + period / 1e3:.2f} | "
                      f"{gemm / pred_gemm:.3f} | {every / pred_all:.3f} | {model:.3f} | "
                      f"{100 * (gemm / pred_gemm / model - 1):+.1f} | {100 * (every / pred_all / model - 1):+.1f} |",
                      flush=True)


if __name__ == "__main__":
    main()
