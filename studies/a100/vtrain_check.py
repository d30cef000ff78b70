"""TP, PP, DP, micro-batch and global-batch changes on the A100 profile with vTrain's training setup
(EMULATED actuals; vTrain's measured single-node times beside them).

    python studies/a100/vtrain_check.py [--per-size 6] [--out /tmp/lumos_a100]   # about 6 minutes

For each of vTrain's eight model sizes (hidden 1024 / 2048 x 12-24 layers, 16 heads, sequence
1024) one base is emulated with traces on the A100 profile (`cluster=a100_vtrain training=vtrain`,
the overrides `lumos.emulator.measured.vtrain_overrides` gives the realism experiment): TP 2 x PP
2 x DP 2, micro-batch 2, global batch 16, seed 0. The targets are rows of vTrain's single-node
data set (`ground_truth_single.csv`, 8 GPUs or fewer), `--per-size` per model size taken from
the stratified sample the pipeline's realism table uses (`realism.dataset_points`, seed 0),
skipping the base's own layout. Each target is predicted from its size's base (`lumos predict`
with --tp --pp --dp --micro-batch --global-batch), emulated without traces (seed 0; the
longest GPU span, as `measure_run` reads traces: `lumos.emulator.actuals`) and compared with
both: the error against the emulated actual is the predictor's; against vTrain's measured time it
adds the emulator's own error (table `emulator_realism`).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

BASE = dict(gbs=16, mbs=2, tp=2, pp=2, dp=2)
LABEL = re.compile(r"h(\d+)_L(\d+)_mbs(\d+)_gbs(\d+)_(\d+)x(\d+)x(\d+)$")


def emulate_base(out: Path, hidden: int, layers: int) -> Path:
    from lumos.emulator.emulate import emulate, write_result
    from lumos.emulator.measured import vtrain_overrides

    if not (out / "manifest.json").exists():
        ov = vtrain_overrides(BASE["gbs"], BASE["mbs"], hidden, 16, layers, 1024, BASE["tp"], BASE["dp"], BASE["pp"])
        write_result(emulate(list(ov) + ["seed=0"], progress=False), out)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--per-size", type=int, default=6)
    ap.add_argument("--out", type=Path, default=Path("/tmp/lumos_a100"))
    args = ap.parse_args()
    from lumos.predict.options import PredictOptions
    from lumos.predict.prediction import predict
    from lumos.emulator import realism
    from lumos.emulator.actuals import emulate_actuals
    from lumos.trace import load_run

    by_size: dict[tuple, list] = {}
    for p in realism.dataset_points("vtrain_single", 360):
        h, L, mbs, gbs, tp, pp, dp = (int(x) for x in LABEL.match(p.label).groups())
        if (tp, pp, dp, mbs, gbs) != (BASE["tp"], BASE["pp"], BASE["dp"], BASE["mbs"], BASE["gbs"]):
            by_size.setdefault((h, L), []).append((p, dict(tp=tp, pp=pp, dp=dp, mbs=mbs, gbs=gbs)))
    rows, t0 = [], time.time()
    for (h, L), pts in sorted(by_size.items()):
        base = load_run(emulate_base(args.out / f"h{h}_L{L}", h, L))
        for p, t in pts[:args.per_size]:
            actual = emulate_actuals(p.overrides, [0])[0]["iteration_us"] / 1e3
            doc = predict(base, {"tp": t["tp"], "pp": t["pp"], "dp": t["dp"]},
                          PredictOptions(global_batch=t["gbs"], micro_batch=t["mbs"]))
            pred = doc["predicted"]["iteration_us"] / 1e3
            rows.append((p.label, pred, actual, p.total_ms, 100 * (pred / actual - 1), 100 * (pred / p.total_ms - 1)))
        print(f"h{h} L{L} done ({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)
    print("EMULATED actuals (A100 profile, vTrain setup, seed 0); measured = vTrain's single-node A100 times\n")
    print("| target (hidden, layers, micro-batch, global batch, TPxPPxDP) | predicted ms | emulated ms | "
          "measured ms | error vs emulated % | error vs measured % |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, pred, act, meas, e1, e2 in rows:
        print(f"| {label} | {pred:.1f} | {act:.1f} | {meas:.1f} | {e1:+.2f} | {e2:+.2f} |")
    e_act = [abs(r[4]) for r in rows]
    e_meas = [abs(r[5]) for r in rows]
    print(f"\n{len(rows)} targets from 8 bases: vs emulated mean |error| {statistics.mean(e_act):.2f}%, "
          f"median {statistics.median(e_act):.2f}%, worst {max(e_act):.2f}%; vs measured mean |error| "
          f"{statistics.mean(e_meas):.2f}%, median {statistics.median(e_meas):.2f}%, worst {max(e_meas):.2f}%")


if __name__ == "__main__":
    main()
