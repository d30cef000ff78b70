"""How much the emulator's statistical DP peers move the ground truth (EMULATED;
docs/notes/2026-12-06-stand-in-peers.md).

    python studies/emulator/peer_standins.py [--mode fsdp|zero1|none] [--seeds 0 1 2] [--targets 2x2x8 ...]
                                       [--set KEY=VALUE ...] [--out DIR] [--workers 2]

By default (`ranks=stage`) the emulator runs one rank per pipeline stage and lets statistical stand-ins
play its TP and DP peers. `ranks=all write_ranks=stage` runs every rank (each collective waits for its
real peers) and writes the same stage ranks' traces. For each seed this emulates the 15B 2x2x4 base and
each target both ways, predicts each target from the base of the same way and seed (`lumos predict`'s
defaults) and prints the emulated iterations and the prediction errors side by side, then the mean,
the mean |error| and the sd over seeds of each. `--set` adds emulate overrides to every run, e.g.
`emulator.granularity=fine` (`auto` turns an emulation of many ranks coarse, every rank counted).
"""

from __future__ import annotations

import argparse
import statistics
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

WAYS = {"stand-ins": ["ranks=stage"], "every rank": ["ranks=all", "write_ranks=stage"]}


def _shape(label: str) -> tuple[int, int, int]:
    tp, pp, dp = (int(x) for x in label.split("x"))
    return tp, pp, dp


def _emulate(job: tuple) -> tuple:
    from lumos.emulator.emulate import emulate, write_result

    mode, way, label, seed, out, extra = job
    tp, pp, dp = _shape(label)
    res = emulate(["model=gpt3_15b", f"parallel.tp={tp}", f"parallel.pp={pp}", f"parallel.dp={dp}",
                   f"training.dp_sharding={mode}", f"seed={seed}", *WAYS[way], *extra], progress=False)
    write_result(res, out)
    return job, res.iteration_us / 1e3, res.wall_s


def _predict(job: tuple) -> tuple:
    from lumos.predict.prediction import predict
    from lumos.trace import load_run

    way, label, seed, base_dir, actual_dir = job
    tp, pp, dp = _shape(label)
    doc = predict(load_run(base_dir), {"tp": tp, "pp": pp, "dp": dp}, actual_tables=load_run(actual_dir))
    return job, doc["error_pct"], doc["measured"]["iteration_us"] / 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", default="fsdp", help="training.dp_sharding of every run (none: Megatron DP)")
    ap.add_argument("--seeds", nargs="+", type=int, default=list(range(10)))
    ap.add_argument("--targets", nargs="+", default=["2x2x8", "2x2x16", "2x2x32"])
    ap.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="emulate overrides of every run")
    ap.add_argument("--out", type=Path, default=Path("/tmp/lumos-peer-standins"))
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    labels = ["2x2x4", *args.targets]
    dirs = {(w, lab, s): args.out / args.mode / w.replace(" ", "_") / lab / f"seed{s}"
            for w in WAYS for lab in labels for s in args.seeds}
    with ProcessPoolExecutor(args.workers) as pool:
        emulated = {(w, lab, s): (it, wall) for (_, w, lab, s, _, _), it, wall in
                    pool.map(_emulate, [(args.mode, w, lab, s, d, args.set) for (w, lab, s), d in dirs.items()])}
        jobs = [(w, t, s, dirs[(w, "2x2x4", s)], dirs[(w, t, s)]) for w in WAYS for t in args.targets
                for s in args.seeds]
        errors = {(w, t, s): e for (w, t, s, _, _), e, _ in pool.map(_predict, jobs)}
    print(f"mode {args.mode}; iteration ms as emulated (EMULATED), error % of `lumos predict` from the base "
          f"of the same way and seed")
    print(f"{'seed':>4} {'run':>7} | {'stand-ins ms':>12} {'error %':>8} | {'every rank ms':>13} {'error %':>8}")
    for s in args.seeds:
        for lab in labels:
            cells = []
            for w in WAYS:
                err = errors.get((w, lab, s))
                cells.append(f"{emulated[(w, lab, s)][0]:>12.1f} {'' if err is None else f'{err:+.2f}':>8}")
            print(f"{s:>4} {lab:>7} | {cells[0]} | {cells[1]:>22}")
    print(f"{'run':>7} {'way':>10} {'mean ms':>8} {'sd ms':>6} {'mean err %':>10} {'mean |err| %':>12} "
          f"{'sd err':>6} {'emulation s':>11}")
    for lab in labels:
        for w in WAYS:
            its = [emulated[(w, lab, s)][0] for s in args.seeds]
            walls = [emulated[(w, lab, s)][1] for s in args.seeds]
            errs = [errors[(w, lab, s)] for s in args.seeds] if lab != "2x2x4" else []
            sd = statistics.stdev(its) if len(its) > 1 else 0.0
            e = (f"{statistics.mean(errs):>+10.2f} {statistics.mean(map(abs, errs)):>12.2f} "
                 f"{statistics.stdev(errs) if len(errs) > 1 else 0.0:>6.2f}") if errs else f"{'':>10} {'':>12} {'':>6}"
            print(f"{lab:>7} {w:>10} {statistics.mean(its):>8.1f} {sd:>6.1f} {e} {statistics.median(walls):>11.2f}")


if __name__ == "__main__":
    main()
