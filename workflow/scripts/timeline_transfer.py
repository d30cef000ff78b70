"""Shim of rule `timeline_transfer`: the real trace's step k graph with step k+1's durations, duty cycle per bin."""
import sys

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821 (set by Snakemake)
from _shim import logged  # noqa: E402

smk = snakemake  # noqa: F821
with logged(smk):
    from lumos.report.tables import write_csv
    from lumos.report.transfer_timeline import transfer_timeline_frame
    from lumos.trace import load_run

    table = min(load_run(str(smk.params.path)), key=lambda t: t.rank)  # a directory of ranks: its lowest rank
    df = transfer_timeline_frame(table, bin_us=float(smk.params.bin_us))
    df.insert(0, "label", smk.params.label)
    df.insert(1, "source", "real")
    write_csv(df, smk.output.csv)
    if df.empty:
        print(f"{smk.params.label} (rank {table.rank}): fewer than two replayable steps, no transfer")
    else:
        k, k1 = df["step"].iloc[0], df["durations_from_step"].iloc[0]
        print(f"{smk.params.label} (rank {table.rank}): step {k}'s graph with step {k1}'s durations vs step {k1}")
        for curve, c in df.groupby("curve", sort=False):
            err = c["error_pct"].iloc[0]
            print(f"  {curve}: {c['iteration_ms'].iloc[0]:.3f} ms{'' if err != err else f', error {err:+.3f}%'}, "
                  f"{len(c)} bins")
