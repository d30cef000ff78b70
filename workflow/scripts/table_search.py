"""Shim of rule `table_search`: the searched layouts, predicted vs emulated, and the rank correlation."""
import sys

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821 (set by Snakemake)
from _shim import logged  # noqa: E402

smk = snakemake  # noqa: F821
with logged(smk):
    import pandas as pd

    from lumos.report import tables as T

    table = T.search_table(pd.read_csv(smk.input.csv))
    T.write_table(table, smk.output.csv, smk.output.md,
                  "lumos search, checked (emulated): the base's top layouts by predicted iteration, each emulated "
                  "over the seeds with the same micro-batch size and count; last row: the Spearman rank correlation "
                  "of the two orders (column emulated_rank) and the mean |error| (column error_pct)")
    print(table.to_string())
