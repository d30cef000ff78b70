"""Shim of rule `coverage_actuals`: the emulated actual of every coverage seed of one configuration."""
import sys

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821 (set by Snakemake)
from _shim import logged  # noqa: E402

smk = snakemake  # noqa: F821
with logged(smk):
    import pandas as pd

    from lumos.emulator.actuals import emulate_actuals
    from lumos.report.tables import write_csv

    rows = emulate_actuals(list(smk.params.overrides), smk.params.seeds, log=lambda m: print(m, flush=True))
    df = pd.DataFrame(rows)
    df.insert(0, "run", smk.wildcards.run)
    df["source"] = "emulated"
    write_csv(df, smk.output.csv)
