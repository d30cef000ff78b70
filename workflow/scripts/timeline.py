"""Shim of rule `timeline`: stream duty cycle per bin, measured vs Lumos replay (data of the Fig. 6 analogue)."""
import sys

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821 (set by Snakemake)
from _shim import compose_saved, logged  # noqa: E402

smk = snakemake  # noqa: F821
with logged(smk):
    from lumos.report.figures import timeline_frame
    from lumos.report.tables import write_csv

    cfg = compose_saved("experiment/replay", smk.params.overrides, smk.output.resolved)
    df = timeline_frame(smk.params.path, step=cfg.step, drop=list(cfg.ablation.drop),
                        gap_threshold_us=float(cfg.simulator.gap_threshold_us), bin_us=float(smk.params.bin_us))
    df.insert(0, "label", smk.params.label)
    df.insert(1, "source", "emulated" if smk.params.emulated else "real")
    write_csv(df, smk.output.csv)
    print(f"{len(df)} bins")
