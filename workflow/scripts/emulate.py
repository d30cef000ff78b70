"""Shim of rules `emulate` and `emulate_batch_*`: emulated iterations (per-rank traces + manifest), one
run or a batch of runs at one seed, in this one process."""
import gc
import sys
from pathlib import Path

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821 (set by Snakemake)
from _shim import as_list, compose_saved, logged  # noqa: E402

smk = snakemake  # noqa: F821
with logged(smk):
    from lumos.emulator import emulate_config, write_result

    manifests, resolved = as_list(smk.output.manifest), as_list(smk.output.resolved)
    for run, overrides, manifest, saved in zip(smk.params.runs, smk.params.overrides, manifests, resolved):
        out = Path(manifest).parent
        for stale in out.glob("rank*.json*"):  # a rerun with fewer ranks must not leave old ones behind
            stale.unlink()
        cfg = compose_saved("emulate", list(overrides) + [f"out={out}", "progress=false"], saved)
        result = emulate_config(cfg, progress=False)
        write_result(result, out)
        print(f"{run}: emulated {len(result.ranks)} ranks, iteration {result.iteration_us / 1e3:.3f} ms (emulated), "
              f"wall {result.wall_s:.2f} s", flush=True)
        del result
        gc.collect()
