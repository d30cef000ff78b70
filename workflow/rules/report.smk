# The report (`snakemake --report report.html`): which outputs it shows, under which question, and what
# each rests on. A table enters as its CSV, a figure as its PNG (the Markdown and the PDF say the same);
# the captions are workflow/report/tables.rst and figures.rst, one block per name.

# name -> (the report's category: the question it answers, its subcategory: what its numbers rest on)
REPORTED = {
    "replay_real": ("Replay", "real traces"),
    "replay_microbench": ("Replay", "real traces"),
    "replay_h200": ("Replay", "measured on hardware (H200)"),
    "replay_emulated": ("Replay", "emulated"),
    "transfer_real": ("Replay", "real traces"),
    "fig1_breakdown": ("Replay", "emulated"),
    "fig6_timeline": ("Replay", "real traces and emulated"),
    "scaleout": ("Prediction", "emulated"),
    "variants": ("Prediction", "emulated"),
    "speed": ("Prediction", "emulated"),
    "sharded_dp": ("Prediction", "emulated"),
    "from_one_gpu": ("Prediction", "emulated"),
    "llama": ("Prediction", "emulated"),
    "schedules": ("Prediction", "emulated"),
    "moe": ("Prediction", "emulated"),
    "search": ("Prediction", "emulated"),
    "statistics": ("Prediction", "emulated"),
    "h200_whatif": ("Prediction", "measured on hardware (H200)"),
    "fsdp_cpu_whatif": ("Prediction", "measured on this machine (CPU)"),
    "moe_cpu_whatif": ("Prediction", "measured on this machine (CPU)"),
    "endtoend": ("Prediction", "emulated base vs measured on hardware"),
    "fig7_scaleout": ("Prediction", "emulated"),
    "fig8_variants": ("Prediction", "emulated"),
    "fig_error_ci": ("Prediction", "emulated"),
    "fig_h200_whatif": ("Prediction", "measured on hardware (H200)"),
    "fig_endtoend": ("Prediction", "emulated base vs measured on hardware"),
    "ablation": ("Ablation", "real traces and emulated"),
    "ablation_by_trace": ("Ablation", "real traces and emulated"),
    "fig_ablation": ("Ablation", "real traces and emulated"),
    "coverage": ("Intervals", "emulated"),
    "intervals_real": ("Intervals", "real traces"),
    "fig_coverage": ("Intervals", "emulated"),
    "emulator_realism": ("Emulator", "emulated vs measured on hardware"),
    "fig_emulator_realism": ("Emulator", "emulated vs measured on hardware"),
}


def reported(path, kind, name=None):
    """`path` flagged for the report, captioned from workflow/report/{kind}.rst; `name` is the table or
    figure (default: the rule's `name` wildcard). A name missing from REPORTED fails when the report is made."""
    def part(i):
        return (lambda w: REPORTED[w.name][i]) if name is None else REPORTED[name][i]

    return report(path, caption=f"../report/{kind}.rst", category=part(0), subcategory=part(1))


_unreported = [n for n in table_names() + figure_names() if n not in REPORTED]
if _unreported:
    raise ValueError(f"workflow/rules/report.smk: no report category for {_unreported}; add them to REPORTED")
