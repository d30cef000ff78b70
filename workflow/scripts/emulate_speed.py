"""Shim of rule `emulate_speed`: the base run emulated on a cluster with scaled compute or bandwidth (or
another micro-batch size), every variant of one seed in this one process."""
import sys
from pathlib import Path

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821 (set by Snakemake)
from _shim import as_list, emulate_into, logged  # noqa: E402

smk = snakemake  # noqa: F821
with logged(smk):
    from lumos.config import compose, to_yaml
    from lumos.trace.atomic import write_text_atomic

    for manifest, resolved, overrides, scale in zip(as_list(smk.output.manifest), as_list(smk.output.resolved),
                                                    smk.params.overrides, smk.params.scale):
        out = Path(manifest).parent
        cfg = compose("emulate", list(overrides) + [f"out={out}", "progress=false"])
        for key, factor in scale.items():
            cfg.cluster[key] = float(cfg.cluster[key]) * float(factor)
        write_text_atomic(resolved, f"# cluster scaled by {dict(scale)}\n" + to_yaml(cfg))
        print(f"{out}: {emulate_into(cfg, out)}", flush=True)
