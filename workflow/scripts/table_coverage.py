"""Shim of rule `table_coverage`: intervals vs the emulated actuals of other seeds (table coverage)."""
import json
import sys
from pathlib import Path

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821 (set by Snakemake)
from _shim import logged  # noqa: E402

smk = snakemake  # noqa: F821
with logged(smk):
    import pandas as pd

    from lumos.report import tables as T

    intervals = [json.loads(Path(p).read_text()) for p in smk.input.intervals]
    actuals = {}
    for p in smk.input.actuals:
        df = pd.read_csv(p)
        actuals[str(df["run"].iloc[0])] = df
    table = T.coverage_table(T.coverage_rows(intervals, actuals))
    first = intervals[0]
    title = (f"Interval coverage (emulated): the interval of each experiment, fitted on the base run of seed "
             f"{first['fit_seed']} ({first['interval']['samples']} samples), against the emulated actual "
             f"iteration of {int(table['seeds'].iloc[0])} other seeds; coverage = share of actuals inside (%)")
    T.write_table(table, smk.output.csv, smk.output.md, title)
    print(table.to_string())
