"""Shim of rule `table_moe`: the MoE what-ifs against the emulated runs' mean, and the routing interval's coverage."""
import sys

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821 (set by Snakemake)
from _shim import logged  # noqa: E402

smk = snakemake  # noqa: F821
with logged(smk):
    import pandas as pd

    from lumos.report import tables as T
    from lumos.report.moe_table import moe_table

    table = moe_table(pd.read_csv(smk.input.csv))
    T.write_table(table, smk.output.csv, smk.output.md,
                  "Mixture-of-experts what-ifs (emulated): each target predicted from each Mixtral-style base "
                  "(seeds 0..) against the mean of its emulated runs (error_pct: the mean over the bases; "
                  "parts_max_pts: the worst component's distance, points of the iteration); last rows: the 90% "
                  "interval of the base configuration over routing draws (lumos predict --samples) and the share "
                  "of independent emulated runs inside it")
    print(table.to_string())
