"""Shim of rule `table_h200_whatif`: predictions from the H200 base vs the measured runs, one row a target."""
import json
import sys

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821 (set by Snakemake)
from _shim import logged  # noqa: E402

smk = snakemake  # noqa: F821
with logged(smk):
    from lumos.report import tables as T

    docs = [json.load(open(p)) for p in smk.input]
    df = T.h200_whatif_table(docs, calibration=smk.config["h200"].get("clock_calibration", []))
    title = ("What-if predictions from the H200 base trace vs measured on hardware (one H200, bundled GPT, "
             "bf16): measured = mean over 2 recordings x 3 profiled steps; spread = (max - min) / mean of those; "
             "clock x = the sustained-clock model's factor on compute kernels, fitted on the `clock calibration` "
             "target's recordings (config/predict/cluster.yaml); lo90/hi90 = the prediction's 90% interval "
             "(host work drawn one profiled step of the base at a time, compute at one profiled step's clock), "
             "width in % of the measured mean, measured_in_90 = share of the measured iterations inside it")
    T.write_table(df, smk.output.csv, smk.output.md, title)
    print(T.to_markdown(df, title))
