"""Score the DDP and FSDP2 CPU what-ifs on one set of recordings made by
resources/traces/dp_cpu_sizes/record.sh (a trial set while developing, the shipped set once).

    python studies/cpu_captures/dp_trials.py DIR            # e.g. /work/scratch/gloo/trial2

Measured on this machine. The same predictions as table `fsdp_cpu_whatif`'s rows on
dp_cpu_sizes (config/config.yaml, `fsdp_cpu`): from each h64 base recording rK, with the
calibration pairs of the other two sizes (h32, h128; rounds r0-r2) for the 1 -> N rows, against
the mean over every profiled step of every rank of the target's three recordings. Prints the
calibration's fitted terms beside the errors, so a trial set shows what moved them.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import sys
from pathlib import Path

from lumos.cli import main as lumos
from lumos.predict.prediction import measured_steps

ROUNDS = (0, 1, 2)
ROWS = {   # label: (base configuration, target configuration, flags, calibration (at DP, at one) sizes);
           # N -> 1 "as measured": the kept host work as the N ranks ran it, without calibration
    "FSDP2 1 -> 4": ("fsdp_h64_1rank", "fsdp_h64_4rank", ["--dp", "4"], "fsdp_{s}_4rank"),
    "DDP 2 -> 1, as measured": ("ddp_h64_2rank", "ddp_h64_1rank", ["--dp", "1"], None),
    "DDP 2 -> 1": ("ddp_h64_2rank", "ddp_h64_1rank", ["--dp", "1"], "ddp_{s}_2rank"),
    "DDP 4 -> 1": ("ddp_h64_4rank", "ddp_h64_1rank", ["--dp", "1"], "ddp_{s}_4rank"),
    "FSDP2 4 -> 1": ("fsdp_h64_4rank", "fsdp_h64_1rank", ["--dp", "1"], "fsdp_{s}_4rank"),
    "DDP 1 -> 2": ("ddp_h64_1rank", "ddp_h64_2rank", ["--dp", "2"], "ddp_{s}_2rank"),
    "DDP 1 -> 4": ("ddp_h64_1rank", "ddp_h64_4rank", ["--dp", "4"], "ddp_{s}_4rank"),
}


def _predict(args: list[str]) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = lumos(["predict", *args, "--format", "json"])
    if rc:
        raise SystemExit(f"lumos predict {' '.join(args)}: exit {rc}")
    return json.loads(out.getvalue())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", type=Path)
    a = ap.parse_args(argv)
    d = a.dir
    print("| target | base | predicted ms | measured mean (min-max) ms | error | calibration |")
    print("|---|---|---|---|---|---|")
    for label, (base, target, flags, at_dp) in ROWS.items():
        its = [r["iteration_us"] / 1e3 for k in ROUNDS for r in measured_steps(d / f"{target}_r{k}")]
        mean = statistics.fmean(its)
        cal = []
        if at_dp:
            one = at_dp.replace("_4rank", "_1rank").replace("_2rank", "_1rank")
            cal = [x for s in ("h32", "h128") for k in ROUNDS for x in
                   ("--dp-calibration", str(d / f"{at_dp.format(s=s)}_r{k}"), str(d / f"{one.format(s=s)}_r{k}"))]
        for k in ROUNDS:
            doc = _predict([str(d / f"{base}_r{k}"), *flags, *cal])
            ms = doc["predicted"]["iteration_us"] / 1e3
            c = doc.get("calibration") or {}
            if "slowdown" in c:     # N -> 1: the shared host's slowdown, per pair
                terms = f"slowdown /{c['slowdown']:.3f} (pairs {', '.join(f'{v:.2f}' for v in c['per_pair'])})"
            else:                   # 1 -> N: what the ranks add per hook, and the time outside them
                terms = (f"outside x{c['outside_scale']:.3f} (pairs {', '.join(f'{v:.2f}' for v in c['per_pair_outside'])}); "
                         + "; ".join(f"{h}: {v['intercept_us'] / 1e3:.2f} ms + {v['us_per_element'] * 1e3:.3f} ns/el"
                                     for h, v in c["hooks"].items()) if c else "")
            print(f"| {label} | {base}_r{k} | {ms:.3f} | {mean:.2f} ({min(its):.2f}-{max(its):.2f}) | "
                  f"{100 * (ms - mean) / mean:+.2f}% | {terms} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
