"""The same kernels over a run on the H200 (measured on hardware), and the sustained-clock fit.

    python studies/h200/clocks.py [--calibration mbcount_4] [--bin-ms 50] [--more DIR] [--predictions]

1. For every recording of the bundled GPT whose kernels the base also ran (same name, grid and
   block), the duration ratio against the base's mean per kernel, in bins of busy time (time since
   the run's first iteration: the profiler's wait + warm-up iterations at the run's period, then the
   profiled ones). The base recordings are ~1.0 by construction.
2. `fit_sustained_clock` on the calibration recordings only (default: the 4-micro-batch runs, the
   base's own kernels run twice as long), against both base recordings: the constants that
   `config/predict/clusters/h100_roce.yaml` (`sustained_clock:`) records.
3. The fitted model on the recordings it did not see (out of sample): weighted RMS of the binned
   ratios around 1 (no model) and around the model.

4. With --predictions: every what-if target of the pipeline's `h200` config predicted from each base
   recording with `--clocks off` and with the default (`recorded`), against the mean of the target's
   measured iterations (what table h200_whatif shows for the default); about a minute.

`--more DIR` adds the recordings under DIR (one directory each, e.g. the pre-registered check's
`base_long`, 20 profiled steps: `--more resources/traces/h200_prereg --calibration base_long`).

Widths and micro-batch sizes run other kernels (other grids), so only the layer-count, micro-batch
count and side-stream recordings share the base's kernels.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from lumos.trace.kernels import read_kernels
from lumos.durations.clocks import busy_ratios, fit_sustained_clock
from lumos.studies.h200 import H200, predict_args



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calibration", default="mbcount_4", help="configuration whose recordings the fit uses")
    ap.add_argument("--bin-ms", type=float, default=50.0)
    ap.add_argument("--more", type=Path, default=None, help="another directory of recordings of the bundled GPT")
    ap.add_argument("--predictions", action="store_true", help="also the what-ifs with the clock model off and on")
    args = ap.parse_args()
    base = [read_kernels(H200 / f"base_r{r}" / "rank0.json.gz") for r in (0, 1)]
    dirs = sorted(d for root in (H200, args.more) if root for d in root.iterdir() if (d / "rank0.json.gz").is_file())
    runs = {d.name: read_kernels(d / "rank0.json.gz") for d in dirs}
    print(f"1. same kernels (name, grid, block) vs the base's mean, by busy time ({args.bin_ms:g} ms bins)")
    ratios = {}
    for name, rec in runs.items():
        other = {k: v for k, v in rec.config.items() if base[0].config.get(k) != v and k != "layers"}
        if other:   # more layers run the same kernels more often; other sizes run other kernels
            print(f"   {name:20s} other sizes ({', '.join(f'{k} {v}' for k, v in other.items())}): other kernels")
            continue
        t, y, w = busy_ratios(base, rec, args.bin_ms)
        ratios[name] = (t, y, w)
        cells = " ".join(f"{a:.0f}:{r:.3f}" for a, r, ww in zip(t, y, w) if ww >= 2000)
        print(f"   {name:20s} period {rec.period_us / 1e3:5.1f} ms  {cells}")
    calib = [n for n in runs if n.rsplit("_r", 1)[0] == args.calibration or n == args.calibration]
    if not calib:
        raise SystemExit(f"no recording of {args.calibration!r} under {H200}")
    model, fit = fit_sustained_clock([ratios[n] for n in calib], [b.window_ms() for b in base], args.bin_ms)
    print(f"2. fit on {', '.join(calib)} ({fit['bins']} bins): boost_ms {model.boost_ms:g}, dip_ms {model.dip_ms:g}, "
          f"dip {model.dip:.4f}, steady {model.steady:.4f}; weighted RMS {fit['rms_before_pct']}% -> "
          f"{fit['rms_after_pct']}%")
    base_level = np.mean([model.mean(*b.window_ms()) for b in base])
    print("3. out of sample (recordings sharing the base's kernels, not used by the fit): weighted RMS %, "
          "no model -> model; mean ratio measured / model")
    for name, (t, y, w) in ratios.items():
        if name in calib or name.startswith("base_"):
            continue
        keep = w >= 2000
        t, y, w = t[keep], y[keep], w[keep]
        pred = np.array([model.mean(a, a + args.bin_ms) for a in t]) / base_level
        rms0 = 100 * np.sqrt(np.sum(w * (y - 1) ** 2) / w.sum())
        rms1 = 100 * np.sqrt(np.sum(w * (y - pred) ** 2) / w.sum())
        print(f"   {name:20s} {rms0:5.2f} -> {rms1:5.2f}   mean {np.sum(w * y) / w.sum():.4f} / "
              f"{np.sum(w * pred) / w.sum():.4f}")
    if args.predictions:
        predictions(calib={n.rsplit("_r", 1)[0] for n in calib})


def predictions(calib: set) -> None:
    from omegaconf import OmegaConf

    from lumos.predict.options import PredictOptions
    from lumos.predict.prediction import measured_steps, predict
    from lumos.config import config_dir
    from lumos.trace import load_run

    cfg = OmegaConf.to_container(OmegaConf.load(config_dir() / "config.yaml"))["h200"]
    print("4. what-ifs, error % against the measured mean: --clocks off -> recorded (calibration targets marked *)")
    for b in cfg["bases"]:
        tables = load_run(H200 / b)
        errs = {"off": [], "recorded": []}
        for label, t in cfg["targets"].items():
            if not t["flags"]:
                continue
            target, kw = predict_args(t["flags"])
            measured = np.mean([s["iteration_us"] for d in sorted(H200.glob(f"{t['config']}_r*"))
                                for s in measured_steps(d)])
            row = []
            for mode in ("off", "recorded"):
                doc = predict(tables, target, PredictOptions(clocks=mode, **kw))
                e = 100 * (doc["predicted"]["iteration_us"] / measured - 1)
                row.append(e)
                if label not in calib and label != "mbs_2":
                    errs[mode].append(abs(e))
            print(f"   {b} {label + ('*' if label in calib else ''):14s} {row[0]:+6.2f} -> {row[1]:+6.2f}")
        for mode, e in errs.items():
            print(f"   {b} {mode:8s} what-ifs without mbs_2 and calibration: mean |error| {np.mean(e):.2f}%, "
                  f"worst {np.max(e):.2f}%")


if __name__ == "__main__":
    main()
