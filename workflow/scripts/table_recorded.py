"""Shim of rules `table_h200_whatif` and `table_fsdp_cpu_whatif`: predictions from recorded base runs
vs the recorded target runs, one row per target, base and host (`lumos.report.tables.recorded_whatif_table`)."""
import json
import sys

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821 (set by Snakemake)
from _shim import logged  # noqa: E402

smk = snakemake  # noqa: F821
with logged(smk):
    from lumos.report import tables as T

    docs = [json.load(open(p)) for p in smk.input]
    df = T.recorded_whatif_table(docs, calibration=list(smk.params.calibration))
    T.write_table(df, smk.output.csv, smk.output.md, smk.params.title)
    print(T.to_markdown(df, smk.params.title))
