"""Shim of rule `emulate_nccl_tests`: what nccl-tests would print on the base run's emulated cluster
(`lumos emulate --nccl-tests`), for the predictions from one GPU that fit their collectives on it."""
import sys

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821 (set by Snakemake)
from _shim import logged  # noqa: E402

smk = snakemake  # noqa: F821
with logged(smk):
    from lumos.config import compose
    from lumos.emulator.nccl_tests import write_sweeps

    cfg = compose("emulate", [str(o) for o in smk.params.overrides] + [f"out={smk.params.out}"])
    written = write_sweeps(cfg, smk.params.out)
    print(f"{len(written)} emulated nccl-tests outputs in {smk.params.out} (cluster {cfg.cluster.name})", flush=True)
