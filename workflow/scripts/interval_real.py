"""Shim of rule `interval_real`: one real trace's interval and its other steps inside it (lowest rank)."""
import sys

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821 (set by Snakemake)
from _shim import logged, write_json  # noqa: E402

smk = snakemake  # noqa: F821
with logged(smk):
    from lumos.analysis.uncertainty import other_iterations
    from lumos.trace import load_run

    table = min(load_run(str(smk.params.path)), key=lambda t: t.rank)  # a directory of ranks: its lowest rank
    doc = other_iterations(table, samples=int(smk.params.samples), seed=0)
    doc["rank"] = int(table.rank)
    write_json(smk.output.json, doc)
    print(f"{smk.wildcards.trace} (rank {table.rank}, step {doc['step']}): 90% width {doc['width_pct_90']}% "
          f"of the median; other steps inside: {doc['inside_90']}")
