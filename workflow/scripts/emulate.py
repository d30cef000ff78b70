"""Shim of every emulating rule (`emulate`, `emulate_batch_*`, `emulate_endtoend_*`, `emulate_speed`,
`emulate_sharded_*`): emulated iterations (per-rank traces + manifest), one run or a batch of runs at one
seed, in this one process. The rules differ only by their arguments: each run's overrides and, for the
speed variants, the cluster fields scaled (params.scale)."""
import sys
from pathlib import Path

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821 (set by Snakemake)
from _shim import as_list, compose_saved, emulate_into, logged  # noqa: E402

smk = snakemake  # noqa: F821
with logged(smk):
    runs, manifests = list(smk.params.runs), as_list(smk.output.manifest)
    scales = list(smk.params.scale) if "scale" in smk.params.keys() else [{}] * len(runs)
    for run, overrides, scale, manifest, saved in zip(runs, smk.params.overrides, scales, manifests,
                                                      as_list(smk.output.resolved)):
        out = Path(manifest).parent
        cfg = compose_saved("emulate", list(overrides) + [f"out={out}", "progress=false"], saved, scale)
        print(f"{run}: {emulate_into(cfg, out)}", flush=True)
