"""Predictions from a torchtitan base with per-layer selective AC (EMULATED; docs/notes/2026-12-08-layer-sac.md).

    python studies/schedules/layer_sac.py [--out DIR] [--seeds 3] [--recompute selective_layer|full|selective_op]
                                          [--every 2] [--layers 4] [--no-matching]

Llama 3 8B at `--layers` layers (4: a small stand-in for the 32, as the SelectiveAC note did), `training=torchtitan`
with every rank emulated (the pipeline's `-torchtitan` runs: ranks=all, write_ranks=stage, granularity fine), base
TP 2 x PP 1 x DP 4 with `training.recompute=selective_layer training.ac_every=N`; targets DP 8, TP 4, PP 2
(`--fsdp-strategy shard_grad_op`, torchtitan's policy under PP), layers + 2, layers + 1, and PP 2 with layers + 2
(an odd number of layers a stage where N = 2: each stage counts its own blocks), each predicted with `lumos predict`'s
Python entry point against the emulated actual of the same seed. `--no-matching` predicts with every target layer
taking base layer l mod L, as before the rebuild knew which blocks checkpoint (the ablation).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from lumos.emulator import emulate, write_result
from lumos.predict.options import PredictOptions
from lumos.predict.prediction import predict
from lumos.trace import load_run
from lumos.transform.templates import Templates

EVERY_RANK = ["ranks=all", "write_ranks=stage", "emulator.granularity=fine"]


def targets(layers: int) -> dict:
    """label -> ((TP, PP, DP, layers), `predict` target, whether torchtitan keeps the weights gathered)."""
    return {"DP 8": ((2, 1, 8, layers), {"dp": 8}), "TP 4": ((4, 1, 4, layers), {"tp": 4}),
            "PP 2": ((2, 2, 4, layers), {"pp": 2}),
            f"layers {layers + 2}": ((2, 1, 4, layers + 2), {"layers": layers + 2}),
            f"layers {layers + 1}": ((2, 1, 4, layers + 1), {"layers": layers + 1}),
            f"PP 2, layers {layers + 2}": ((2, 2, 4, layers + 2), {"pp": 2, "layers": layers + 2})}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="where the emulated runs go (default: a temporary folder)")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--recompute", default="selective_layer", choices=("selective_layer", "full", "selective_op"))
    ap.add_argument("--every", type=int, default=2, help="training.ac_every of selective_layer")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--no-matching", action="store_true", help="every target layer takes base layer l mod L")
    a = ap.parse_args()
    if a.no_matching:
        Templates.checkpointed = lambda self, layers: None
    rc = [f"training.recompute={a.recompute}"] + ([f"training.ac_every={a.every}"]
                                                    if a.recompute == "selective_layer" else [])
    root = a.out or Path(tempfile.mkdtemp(prefix="layer_sac_"))
    errors: dict[str, list] = {}
    for seed in range(a.seeds):
        def run(name: str, tp: int, pp: int, dp: int, layers: int) -> Path:
            out = root / f"{a.recompute}{a.every}_s{seed}_{name}"
            if not (out / "manifest.json").exists():
                write_result(emulate(["model=llama3_8b", "training=torchtitan", *EVERY_RANK, *rc, f"seed={seed}",
                                      f"model.num_layers={layers}", f"parallel.tp={tp}", f"parallel.pp={pp}",
                                      f"parallel.dp={dp}"], progress=False), out)
            return out
        base = run("base", 2, 1, 4, a.layers)
        for label, ((tp, pp, dp, layers), tgt) in targets(a.layers).items():
            actual = run(f"{tp}x{pp}x{dp}_l{layers}", tp, pp, dp, layers)
            opts = PredictOptions(fsdp_strategy="shard_grad_op" if pp > 1 else None)
            doc = predict(load_run(base), tgt, opts, actual_tables=load_run(actual), actual_manifest={"emulated": True})
            errors.setdefault(label, []).append(doc["error_pct"])
    rows = [(k, v) for k, v in errors.items()]
    print(f"{a.recompute}" + (f" every {a.every}" if a.recompute == "selective_layer" else "")
          + f", Llama 3 8B {a.layers} layers 2x1x4 torchtitan, seeds 0-{a.seeds - 1}"
          + (", l mod L templates (--no-matching)" if a.no_matching else ""))
    for k, v in rows:
        print(f"  {k:20s} " + " ".join(f"{e:+6.2f}" for e in v) + f"   mean |error| {statistics.mean(map(abs, v)):.2f}%")
    print(f"  all: mean |error| {statistics.mean(abs(e) for _, v in rows for e in v):.2f}%")


if __name__ == "__main__":
    main()
