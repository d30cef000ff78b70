"""Shim of rule `figure`: one paper-style figure (PNG + PDF) from the pipeline's data/tables CSVs."""
import sys

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821 (set by Snakemake)
from _shim import logged  # noqa: E402

smk = snakemake  # noqa: F821
with logged(smk):
    import pandas as pd

    from lumos.report import figures as Fg

    name = smk.wildcards.name
    data = {k: pd.read_csv(v) for k, v in smk.input.items()}
    if name == "fig1_breakdown":
        fig = Fg.breakdown_figure(data["replay_emulated"], smk.params.breakdown_run)
    elif name == "fig6_timeline":
        fig = Fg.timeline_figure(data)
    elif name == "fig7_scaleout":
        fig = Fg.prediction_figure(data["table"], "The nine scale-out counterfactuals (Fig. 7 analogue) and six TP changes from 15B 2x2x4")
    elif name == "fig8_variants":
        fig = Fg.prediction_figure(data["table"], "Architecture variants V1-V4 at 2x2x4 (Fig. 8 analogue)")
    elif name == "fig_ablation":
        fig = Fg.ablation_figure(data["table"])
    elif name == "fig_error_ci":
        fig = Fg.error_ci_figure(data["table"])
    elif name == "fig_h200_whatif":
        fig = Fg.h200_whatif_figure(data["table"])
    elif name == "fig_emulator_realism":
        fig = Fg.realism_figure(data["data"], data["table"][data["table"]["row"] == "summary"])
    elif name == "fig_coverage":
        fig = Fg.coverage_figure(data["table"])
    elif name == "fig_endtoend":
        fig = Fg.endtoend_figure(data["table"])
    else:
        raise ValueError(f"unknown figure {name!r}")
    Fg.save_figure(fig, smk.output.png, smk.output.pdf)
    print(f"wrote {smk.output.png} and {smk.output.pdf}")
