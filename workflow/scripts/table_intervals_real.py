"""Shim of rule `table_intervals_real`: every real trace's interval, measured (table intervals_real)."""
import json
import sys
from pathlib import Path

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821 (set by Snakemake)
from _shim import logged  # noqa: E402

smk = snakemake  # noqa: F821
with logged(smk):
    from lumos.report import tables as T

    docs = {t: json.loads(Path(p).read_text()) for t, p in zip(smk.params.traces, smk.input)}
    table = T.real_interval_table(docs)
    T.write_table(table, smk.output.csv, smk.output.md,
                  "Intervals on real traces (measured): the default step replayed with sampled durations, the "
                  "model fitted on every profiled step; the share of the other profiled steps (step periods) "
                  "inside the 90% interval")
    print(table.to_string())
