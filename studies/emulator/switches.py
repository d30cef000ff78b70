"""Emulated iteration time with each multi-node physics switch (added with the multi-node ground
truth) on, against all off.

Two layouts: vTrain's A100 stack at GPT-3 175B TP8 PP8 DP8 (global batch 512, 64 hosts) and the
H100 base, GPT-3 15B TP2 PP2 DP32 (16 hosts). Seed 0 unless `--seed`. `--quiet-noise` also turns every jitter,
slowness, straggler, peer-drift and host-stall draw off, so that a switch's row differs from
`off` by its physics alone: with noise on, a switch that adds or removes random draws (a new
collective, one fewer TP all-reduce) also shifts every later draw, which moves the iteration by
about as much as a small physical effect. Everything printed is emulated; nothing is written.

    python studies/emulator/switches.py [--quiet-noise] [--seed N] [--layouts a100_175b h100_15b]
"""

from __future__ import annotations

import argparse
import time

LAYOUTS = {
    "a100_175b": ["cluster=a100_vtrain", "training=vtrain", "model=gpt3_175b", "parallel.tp=8", "parallel.pp=8",
                  "parallel.dp=8", "model.micro_batch_size=1", "model.global_batch_size=512"],
    "h100_15b": ["model=gpt3_15b", "parallel.tp=2", "parallel.pp=2", "parallel.dp=32"],
}
# each switch's off and on value; every run sets all of them at the training layer, which overrides the
# defaults and the profile's own choice (a100_vtrain and training=vtrain turn three of them on)
KNOBS = {"comm.algorithm": ("hier_ring", "nccl"), "comm.ring_form": ("serial", "pipelined"),
         "comm.placement": ("rail", "shared"),
         "schedule.p2p_scatter_gather": ("false", "true"), "schedule.grad_norm_group": ("tp", "model_parallel")}
SWITCHES = {"off": []} | {(k if on == "true" else f"{k}={on}"): [k] for k, (_off, on) in KNOBS.items()}
SWITCHES["all"] = list(KNOBS)


def overrides(on: list[str]) -> list[str]:
    return [f"++training.emulator.{k}={KNOBS[k][k in on]}" for k in KNOBS]


QUIET = ["emulator.comm.jitter_sigma=0", "emulator.compute.jitter_sigma=0", "emulator.rank.slowness_sigma=0",
         "emulator.rank.straggler_prob=0", "emulator.peers.noise_sigma=0", "emulator.host.jitter_sigma=0",
         "emulator.host.block_jitter_sigma=0", "emulator.host.stall_prob=0"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quiet-noise", action="store_true", help="every random draw off")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layouts", nargs="+", default=list(LAYOUTS), choices=list(LAYOUTS))
    args = ap.parse_args()
    from lumos.emulator import emulate

    extra = [f"seed={args.seed}"] + (QUIET if args.quiet_noise else [])
    print(f"{'layout':10} {'switch':40} {'iteration ms':>13} {'vs off':>8} {'emulate s':>9}")
    for layout in args.layouts:
        off = None
        for name, on in SWITCHES.items():
            t0 = time.perf_counter()
            result = emulate(LAYOUTS[layout] + extra + overrides(on), progress=False)
            it = result.iteration_us / 1e3
            del result
            off = it if off is None else off
            print(f"{layout:10} {name:40} {it:13.1f} {100 * (it / off - 1):+7.2f}% {time.perf_counter() - t0:9.1f}",
                  flush=True)


if __name__ == "__main__":
    main()
