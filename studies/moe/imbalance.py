"""How the emulator's routing imbalance moves an MoE iteration (EMULATED): Mixtral's layers (2 of them) at EP 8,
every other noise source off, one seed, each imbalance; stand-in peers (ranks=stage) beside every rank emulated
(ranks=all), whose iterations the `Comm.lead` of the stand-ins should match.

    python studies/moe/imbalance.py
"""

from lumos.emulator import emulate

QUIET = ["emulator.comm.jitter_sigma=0", "emulator.compute.jitter_sigma=0", "emulator.rank.slowness_sigma=0",
         "emulator.rank.straggler_prob=0", "emulator.peers.noise_sigma=0"]
BASE = ["model=mixtral_8x7b", "model.num_layers=2", "parallel.tp=1", "parallel.pp=1", "parallel.dp=8",
        "parallel.ep=8", "emulator.granularity=coarse", *QUIET]
CASES = {"uniform": ["model.moe_imbalance=uniform"],
         "Dirichlet 8": ["model.moe_imbalance=dirichlet", "model.moe_imbalance_param=8.0"],
         "Dirichlet 1": ["model.moe_imbalance=dirichlet", "model.moe_imbalance_param=1.0"],
         "Zipf 1": ["model.moe_imbalance=zipf", "model.moe_imbalance_param=1.0"]}

print(f"{'imbalance':<13} {'ranks=stage ms':>15} {'ranks=all ms':>13}")
for name, over in CASES.items():
    its = [emulate(BASE + over + [f"ranks={r}"], progress=False).iteration_us / 1e3 for r in ("stage", "all")]
    print(f"{name:<13} {its[0]:>15.1f} {its[1]:>13.1f}")
