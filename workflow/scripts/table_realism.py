"""Shim of rule `table_emulator_realism`: every emulated vs measured row, the summary per data set, and the
per-configuration breakdown shares where the breakdown was published."""
import sys

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821 (set by Snakemake)
from _shim import logged  # noqa: E402

smk = snakemake  # noqa: F821
with logged(smk):
    import pandas as pd

    from lumos.emulator.realism import DATASETS, score
    from lumos.report import tables as T
    from lumos.trace.atomic import write_text_atomic

    rows = pd.concat([pd.read_csv(p) for p in smk.input], ignore_index=True)
    rows = rows.sort_values(["dataset", "point"], key=lambda c: c.map(DATASETS.index) if c.name == "dataset" else c,
                            kind="stable", ignore_index=True)
    write_text_atomic(smk.output.data, rows.to_csv(index=False))
    summary, configs = T.emulator_realism_table(rows, score(rows.to_dict("records")))
    tag = "" if smk.params.tag == "default" else f" [tag {smk.params.tag}]"
    extra = f"; overrides {list(smk.params.overrides)}" if smk.params.overrides else ""
    title = ("Emulator realism, emulated vs measured (published measurements: the paper's Fig. 1 and Fig. 7 on "
             "H100s, vTrain's single-node A100 runs, Megatron-LM's multi-node A100 runs on Selene from Narayanan "
             "et al. SC'21 and Korthikanti et al. 2022): |error| % of the iteration time per data set, "
             "error = 100 x (emulated - measured) / measured, Spearman rank correlation over the data set and "
             f"the worst over its models with 3+ layouts{tag}{extra}")
    T.write_realism_table(summary, configs, smk.output.csv, smk.output.md, title)
    print(T.to_markdown(summary, title))
