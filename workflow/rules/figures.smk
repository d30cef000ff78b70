# Paper-style figures (matplotlib, Agg): PNG + PDF under figures/{tag}/; emulated plots say so.


def figure_inputs(wildcards):
    fig = config.get("figures", {})
    name = wildcards.name
    if name == "fig1_breakdown":
        return {"replay_emulated": f"{R}/data/replay_emulated.csv"}
    if name == "fig6_timeline":
        out = {}
        if fig.get("timeline_real"):
            out["real"] = f"{R}/timeline/real.csv"
            out["transfer"] = f"{R}/timeline/transfer.csv"
        if fig.get("timeline_emulated"):
            out["emulated"] = f"{R}/timeline/emulated.csv"
        return out
    if name == "fig7_scaleout":
        return {"table": f"{R}/tables/scaleout.csv"}
    if name == "fig8_variants":
        return {"table": f"{R}/tables/variants.csv"}
    if name == "fig_ablation":
        return {"table": f"{R}/tables/ablation.csv"}
    if name == "fig_error_ci":
        return {"table": f"{R}/tables/statistics.csv"}
    if name == "fig_h200_whatif":
        return {"table": f"{R}/tables/h200_whatif.csv"}
    if name == "fig_emulator_realism":
        return {"data": f"{R}/data/emulator_realism.csv", "table": f"{R}/tables/emulator_realism.csv"}
    if name == "fig_coverage":
        return {"table": f"{R}/tables/coverage.csv"}
    if name == "fig_endtoend":
        return {"table": f"{R}/tables/endtoend.csv"}
    raise ValueError(f"unknown figure {name!r}")


rule figure:
    input:
        unpack(figure_inputs),
    output:
        png=reported(f"{F}/{{name}}.png", "figures"),
        pdf=f"{F}/{{name}}.pdf",
    wildcard_constraints:
        name="fig1_breakdown|fig6_timeline|fig7_scaleout|fig8_variants|fig_ablation|fig_error_ci|fig_h200_whatif|fig_emulator_realism|fig_coverage|fig_endtoend",
    params:
        breakdown_run=config.get("figures", {}).get("breakdown_run"),
        timeline_labels={k: config.get("figures", {}).get(f"timeline_{k}") for k in ("real", "emulated")},
    log:
        f"{R}/logs/figure/{{name}}.log",
    benchmark:
        f"{R}/benchmarks/figure/{{name}}.tsv"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    script:
        "../scripts/figures.py"


rule publish_figure:
    """The default tag's figures, where the README points (figures/)."""
    input:
        f"figures/default/{{name}}.{{ext}}",
    output:
        "figures/{name}.{ext}",
    log:
        "results/default/logs/publish/{name}.{ext}.log",
    localrule: True
    shell:
        "cp {input} {output} 2> {log}"
