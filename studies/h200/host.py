"""Host work from one step or from every profiled step, on the H200 what-ifs (measured on hardware).

    python studies/h200/host.py [--samples 1000] [--seed 0]

Every target of the pipeline's `h200` config (config/config.yaml) predicted from each base
recording with `lumos predict --host step` (the selected step's host work) and `--host median`
(each CPU op and gap the median over the base's profiled steps, `lumos.graph.profiled_steps`), the
second with its 90% interval from `--samples` sampled replays (host work drawn one base step at a
time, compute kernels at one profiled step's clock). Errors against the mean of the target's six
measured iterations (2 recordings x 3 profiled steps), the interval in % of that mean, and the
share of the six inside it. Prints, per base recording, each profiled step's host work (the
summed replay durations of its CPU ops and the summed program-order gaps between them,
`lumos.graph.profiled_steps`), then the Markdown rows docs/notes/2026-12-02-h200-host-work.md shows, then
the mean and worst |error| over the what-ifs that fitted nothing (micro-batch 2 apart, then with it);
~1 minute on 2 cores.
Kernels are the selected step's own throughout (`--kernels step`): this compares host work alone.
"""

from __future__ import annotations

import argparse

import numpy as np

from lumos.studies.h200 import H200, predict_args


def main() -> None:
    from omegaconf import OmegaConf

    from lumos.predict.options import PredictOptions
    from lumos.predict.prediction import measured_steps, predict
    from lumos.config import config_dir
    from lumos.trace import load_run
    from lumos.predict.whatif import base_plan

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    cfg = OmegaConf.to_container(OmegaConf.load(config_dir() / "config.yaml"))["h200"]
    bases = {b: load_run(H200 / b) for b in cfg["bases"]}
    plans = {(b, h): base_plan(t, PredictOptions(host=h, kernels="step"))
             for b, t in bases.items() for h in ("step", "median")}
    for b in bases:
        for rank, h in plans[(b, "median")].host_steps.items():
            ops = " / ".join(f"{x / 1e3:.1f}" for x in np.nansum(h.task, axis=1))
            gaps = " / ".join(f"{x / 1e3:.1f}" for x in np.nansum(h.lag, axis=1))
            print(f"{b} rank {rank}, profiled steps {h.steps}: host ops {ops} ms, gaps between them {gaps} ms")
    calib = set(cfg.get("clock_calibration", []))
    errors = {(b, h): {} for b in bases for h in ("step", "median")}
    for label, t in cfg["targets"].items():
        target, kw = predict_args(t["flags"])
        measured = np.array([s["iteration_us"] for d in sorted(H200.glob(f"{t['config']}_r*"))
                             for s in measured_steps(d)])
        mean = measured.mean()
        cells = [f"`{label}`"]
        for b, tables in bases.items():
            step = predict(tables, target, PredictOptions(host="step", kernels="step", **kw),
                           plan=plans[(b, "step")])
            med = predict(tables, target, PredictOptions(host="median", kernels="step", samples=args.samples,
                                                         seed=args.seed, **kw), plan=plans[(b, "median")])
            lo, hi = med["interval"]["iteration_us"]["90"]
            inside = int(((measured >= lo) & (measured <= hi)).sum())
            err = [100 * (d["predicted"]["iteration_us"] / mean - 1) for d in (step, med)]
            if t["flags"] and label not in calib:
                errors[(b, "step")][label], errors[(b, "median")][label] = err
            cells += [f"{err[0]:+.2f} -> {err[1]:+.2f}",
                      f"[{100 * (lo / mean - 1):+.1f}, {100 * (hi / mean - 1):+.1f}], {inside} of {len(measured)}"]
        print("| " + " | ".join(cells) + " |", flush=True)
    for (b, h), e in errors.items():
        gpu = [abs(v) for k, v in e.items() if k != "mbs_2"]
        every = [abs(v) for v in e.values()]
        print(f"{b} --host {h}: mean |error| {np.mean(gpu):.2f}%, worst {np.max(gpu):.2f}% over {len(gpu)} what-ifs "
              f"without mbs_2; {np.mean(every):.2f}% / {np.max(every):.2f}% with it")


if __name__ == "__main__":
    main()
