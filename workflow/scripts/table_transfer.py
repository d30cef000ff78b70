"""Shim of rule `table_transfer_real`: the per-trace transfer CSVs into one table with a summary block."""
import sys
from pathlib import Path

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821 (set by Snakemake)
from _shim import logged  # noqa: E402

smk = snakemake  # noqa: F821
with logged(smk):
    import pandas as pd

    from lumos.report import tables as T

    frames = {Path(p).stem: pd.read_csv(p) for p in smk.input}
    rows, summary = T.transfer_real_table(frames)
    title = ("Transfer on real traces (measured on hardware): step k's graph replayed with the durations of "
             "step k+1 (and k-1) vs that step as measured, consecutive steps both ways, warm-up step left out; |error| %")
    T.write_transfer_table(rows, summary, smk.output.csv, smk.output.md, title)
    print(T.to_markdown(summary, title))
