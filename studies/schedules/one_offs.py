"""The one-off figures of docs/notes/2026-12-07-interleaved-pipelines.md that no pipeline table holds (EMULATED).

    python studies/schedules/one_offs.py [--out DIR] [--only interleaving,cp,torchtitan,scatter]

- interleaving: GPT-3 15B (TP 2, PP 4, DP 1, 8 micro-batches) emulated at V 1, 2 and 4 with every random
  draw off: the iteration, and V's gain or loss against 1F1B.
- cp: Llama 3 8B at TP 2 x PP 2 x DP 2 (table schedules' base without CP), CP 1 -> 2 and 4 predicted from the
  CP 1 base (the gathers added by `lumos predict`), against the emulated runs, seed 0.
- torchtitan: Llama 3 8B with `training=torchtitan` from a 2x1x4 base to DP 8 and 16, TP 4 and PP 2
  (`--fsdp-strategy shard_grad_op`), seed 0, with stand-in peers and with every rank emulated.
- scatter: Llama 3 405B's layout at 16,384 GPUs without the p2p scatter/gather (benchmarks/bench_scale_405b.py
  runs it with): the iteration and the median send kernel of a middle stage.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from lumos.emulator import emulate, write_result
from lumos.predict.options import PredictOptions
from lumos.predict.prediction import predict
from lumos.trace import load_run

QUIET = ["emulator.comm.jitter_sigma=0", "emulator.compute.jitter_sigma=0", "emulator.rank.slowness_sigma=0",
         "emulator.rank.straggler_prob=0", "emulator.peers.noise_sigma=0"]
EVERY_RANK = ["ranks=all", "write_ranks=stage", "emulator.granularity=fine"]


def _run(root: Path, name: str, overrides: list[str]) -> Path:
    out = root / name
    if not (out / "manifest.json").exists():
        write_result(emulate(overrides, progress=False), out)
    return out


def _error(base: Path, target: dict, actual: Path, options: PredictOptions = PredictOptions()) -> float:
    doc = predict(load_run(base), target, options, actual_tables=load_run(actual), actual_manifest={"emulated": True})
    return doc["error_pct"]


def interleaving(root: Path) -> None:
    over = ["model=gpt3_15b", "parallel.tp=2", "parallel.pp=4", "parallel.dp=1", *QUIET]
    t = {v: emulate([*over, f"parallel.vp={v}"], progress=False).iteration_us / 1e3 for v in (1, 2, 4)}
    print("interleaving, GPT-3 15B 2x4x1, 8 micro-batches: " + ", ".join(
        f"V {v} {ms:.1f} ms ({100 * (ms - t[1]) / t[1]:+.2f}% vs 1F1B)" for v, ms in t.items()))


def cp(root: Path) -> None:
    over = ["model=llama3_8b", "parallel.tp=2", "parallel.pp=2", "parallel.dp=2", "seed=0"]
    runs = {c: _run(root, f"cp{c}", [*over, f"parallel.cp={c}"]) for c in (1, 2, 4)}
    print("cp, from a base without CP (Llama 3 8B 2x2x2, seed 0): "
          + ", ".join(f"CP {c} {_error(runs[1], {'cp': c}, runs[c]):+.2f}%" for c in (2, 4)))


def torchtitan(root: Path) -> None:
    targets = {"DP 8": ((2, 1, 8), {"dp": 8}), "DP 16": ((2, 1, 16), {"dp": 16}), "TP 4": ((4, 1, 4), {"tp": 4}),
               "PP 2": ((2, 2, 4), {"pp": 2})}
    for how, extra in (("stand-in peers", []), ("every rank emulated", EVERY_RANK)):
        def run(tp, pp, dp):
            return _run(root, f"titan_{tp}x{pp}x{dp}{'_all' if extra else ''}",
                        ["model=llama3_8b", "training=torchtitan", f"parallel.tp={tp}", f"parallel.pp={pp}",
                         f"parallel.dp={dp}", "seed=0", *extra])
        base = run(2, 1, 4)
        errs = []
        for label, (layout, tgt) in targets.items():
            opts = PredictOptions(fsdp_strategy="shard_grad_op") if "pp" in tgt else PredictOptions()
            errs.append(f"{label} {_error(base, tgt, run(*layout), opts):+.2f}%")
        print(f"torchtitan, from 2x1x4 ({how}, seed 0): " + ", ".join(errs))


def scatter(root: Path) -> None:
    over = ["model=llama3_405b", "parallel.tp=8", "parallel.pp=16", "parallel.vp=8", "parallel.embedding_in_split=true",
            "parallel.loss_in_split=true", "model.microbatch_rule=fixed", "parallel.dp=128",
            "model.global_batch_size=2048", "seed=0"]
    r = emulate(over, progress=False)
    middle = r.recorders[r.ranks[len(r.ranks) // 2]]
    sends = [g[1] - g[0] for g in middle.gpu if g[4] == 28]
    print(f"405B without the p2p scatter/gather: iteration {r.iteration_us / 1e6:.2f} s, median send kernel "
          f"{statistics.median(sends) / 1e3:.1f} ms")


PARTS = {"interleaving": interleaving, "cp": cp, "torchtitan": torchtitan, "scatter": scatter}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None, help="where the emulated runs go (default: a temporary directory)")
    ap.add_argument("--only", default=",".join(PARTS), help="comma-separated parts")
    a = ap.parse_args(argv)
    root = Path(a.out or tempfile.mkdtemp(prefix="lumos-schedules-"))
    print("# EMULATED; docs/notes/2026-12-07-interleaved-pipelines.md")
    for name in a.only.split(","):
        PARTS[name.strip()](root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
