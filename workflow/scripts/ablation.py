"""Shim of rules `ablation_real` / `ablation_emulated`: the ablation table of one trace or run."""
import sys

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821 (set by Snakemake)
from _shim import compose_saved, logged  # noqa: E402

smk = snakemake  # noqa: F821
with logged(smk):
    from lumos.analysis.ablation import ablation_table
    from lumos.report.tables import write_csv
    from lumos.trace import load_run

    cfg = compose_saved("experiment/ablation", smk.params.overrides, smk.output.resolved)
    tables = load_run(smk.params.path)
    df = ablation_table(tables, step=cfg.step, engine=str(cfg.simulator.engine),
                        seeds=list(range(int(cfg.sweep.random_seeds))),
                        fractions=[float(f) for f in cfg.sweep.random_fractions],
                        gap_thresholds=[float(g) for g in cfg.sweep.gap_thresholds_us],
                        label=str(smk.params.source))
    df.insert(0, "source", smk.params.source)
    df.insert(1, "emulated", bool(smk.params.emulated))
    write_csv(df, smk.output.csv)
    print(df.to_string())
