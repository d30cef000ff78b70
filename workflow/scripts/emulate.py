"""Shim of rule `emulate`: one emulated iteration (per-rank traces + manifest) for one run and seed."""
import sys
from pathlib import Path

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821 (set by Snakemake)
from _shim import compose_saved, logged  # noqa: E402

smk = snakemake  # noqa: F821
with logged(smk):
    from lumos.emulator import emulate_config, write_result

    out = Path(smk.output.manifest).parent
    for stale in out.glob("rank*.json*"):  # a rerun with fewer ranks must not leave old ones behind
        stale.unlink()
    cfg = compose_saved("emulate", list(smk.params.overrides) + [f"out={out}", "progress=false"],
                        smk.output.resolved)
    result = emulate_config(cfg, progress=False)
    write_result(result, out)
    print(f"emulated {len(result.ranks)} ranks, iteration {result.iteration_us / 1e3:.3f} ms (emulated), "
          f"wall {result.wall_s:.2f} s")
