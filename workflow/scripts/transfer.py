"""Shim of rules `transfer_real` / `transfer_h200`: every consecutive step pair of each trace of the batch,
both directions (one CSV per trace), in this one process."""
import sys

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821 (set by Snakemake)
from _shim import as_list, logged  # noqa: E402

smk = snakemake  # noqa: F821
with logged(smk):
    from lumos.analysis.transfer import transfer_steps
    from lumos.report.tables import write_csv
    from lumos.trace import load_run

    for name, path, out in zip(smk.params.traces, smk.params.path, as_list(smk.output.csv)):
        table = min(load_run(str(path)), key=lambda t: t.rank)  # a directory of ranks: its lowest rank
        df = transfer_steps(table)
        write_csv(df, out)
        print(f"{name} (rank {table.rank}): {len(df)} predictions", flush=True)
