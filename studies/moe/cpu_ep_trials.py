"""EP what-ifs on CPU MoE recordings, every calibration round against every other round (the development check).

    python studies/moe/record_cpu.py --out /work/scratch/moecpu/trial --pin-core --rounds 3
    python studies/moe/cpu_ep_trials.py /work/scratch/moecpu/trial

Measured on this machine: for each round s and each other round c, `lumos predict ep2_rS --ep 4
--ep-calibration ep2_rC ep4_rC` against every profiled step of ep4_rS (and EP 4 -> 2 the same way), with the
slowdown read off each way `lumos.durations.moe_host.SLOWDOWN_FROM` offers. Prints one line per prediction and
the mean |error| per way; the recordings are trial ones (not shipped): the shipped set is scored once, by the
pipeline's table moe_cpu_whatif.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np

from lumos.durations.moe_host import SLOWDOWN_FROM
from lumos.predict.moe_host import predict_host_ep
from lumos.predict.prediction import measured_steps
from lumos.trace import load_run


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trial", type=Path, help="directory of ep{1,2,4}_rK recordings")
    ap.add_argument("--rounds", nargs="*", default=None, help="rounds to use (default: every one with EP 2 and 4)")
    a = ap.parse_args(argv)
    found = {m.group(1) for p in a.trial.iterdir() if (m := re.fullmatch(r"ep[24]_r(\d+)", p.name))}
    rounds = sorted(a.rounds or [r for r in found if (a.trial / f"ep2_r{r}").is_dir() and (a.trial / f"ep4_r{r}").is_dir()],
                    key=int)
    runs = {(ep, r): load_run(a.trial / f"ep{ep}_r{r}") for ep in (2, 4) for r in rounds}
    measured = {(ep, r): [x["iteration_us"] / 1e3 for x in measured_steps(a.trial / f"ep{ep}_r{r}")]
                for ep in (2, 4) for r in rounds}
    for (ep, r), its in sorted(measured.items()):
        print(f"ep{ep}_r{r}: measured {', '.join(f'{x:.1f}' for x in its)} ms")
    errors: dict = {how: [] for how in SLOWDOWN_FROM}
    for s in rounds:
        for c in rounds:
            if c == s:
                continue
            for a_ep, b_ep in ((2, 4), (4, 2)):
                m = float(np.mean(measured[(b_ep, s)]))
                line = [f"ep{a_ep}_r{s} -> EP {b_ep}, calibrated on r{c}: measured {m:.1f} ms"]
                for how in SLOWDOWN_FROM:
                    doc = predict_host_ep(runs[(a_ep, s)], b_ep, [(runs[(a_ep, c)], runs[(b_ep, c)])], slowdown_from=how)
                    p = doc["predicted"]["iteration_us"] / 1e3
                    err = 100.0 * (p - m) / m
                    errors[how].append(err)
                    line.append(f"{how} {p:.1f} ({err:+.1f}%)")
                print("; ".join(line), flush=True)
    for how, e in errors.items():
        print(f"{how}: mean |error| {np.mean(np.abs(e)):.1f}%, signed {np.mean(e):+.1f}%, worst {max(e, key=abs):+.1f}% "
              f"over {len(e)} predictions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
