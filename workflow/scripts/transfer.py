"""Shim of rule `transfer_real`: every consecutive step pair of one trace, both directions (one CSV)."""
import sys

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821 (set by Snakemake)
from _shim import logged  # noqa: E402

smk = snakemake  # noqa: F821
with logged(smk):
    from lumos.analysis.transfer import transfer_steps
    from lumos.report.tables import write_csv
    from lumos.trace import load_run

    table = min(load_run(str(smk.params.path)), key=lambda t: t.rank)  # a directory of ranks: its lowest rank
    df = transfer_steps(table)
    write_csv(df, smk.output.csv)
    print(f"{smk.wildcards.trace} (rank {table.rank}): {len(df)} predictions")
