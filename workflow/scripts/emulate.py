"""Shim of rules `emulate` and `emulate_batch_*`: emulated iterations (per-rank traces + manifest), one
run or a batch of runs at one seed, in this one process."""
import sys
from pathlib import Path

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821 (set by Snakemake)
from _shim import as_list, compose_saved, emulate_into, logged  # noqa: E402

smk = snakemake  # noqa: F821
with logged(smk):
    for run, overrides, manifest, saved in zip(smk.params.runs, smk.params.overrides, as_list(smk.output.manifest),
                                               as_list(smk.output.resolved)):
        out = Path(manifest).parent
        cfg = compose_saved("emulate", list(overrides) + [f"out={out}", "progress=false"], saved)
        print(f"{run}: {emulate_into(cfg, out)}", flush=True)
