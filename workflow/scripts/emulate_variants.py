"""Shim of rules `emulate_speed` and `emulate_sharded`: one seed's variants of a run (a cluster with scaled
compute or bandwidth, another micro-batch size, sharded DP at other degrees) emulated in this one process."""
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
        write_text_atomic(resolved, (f"# cluster scaled by {dict(scale)}\n" if scale else "") + to_yaml(cfg))
        print(f"{out}: {emulate_into(cfg, out)}", flush=True)
