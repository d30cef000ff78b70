# Measured on hardware: what-if predictions from the H200 base trace, each against both recordings
# of the target configuration (every profiled step), with the run-to-run spread beside the error.


def h200_dirs(config_name):
    """The recorded runs (one directory each) of one H200 configuration."""
    return [d for n, d in config["h200_traces"].items() if n[len("h200_"):].rsplit("_r", 1)[0] == config_name]


def h200_bases():
    return [config["h200_traces"][f"h200_{b}"] for b in config["h200"]["bases"]]


def recorded_files(dirs):
    """The trace files of recorded runs (one directory each; also the rules of fsdp_cpu)."""
    return sorted(str(p) for d in dirs for p in Path(d).iterdir() if p.name.endswith((".json", ".json.gz")))


rule predict_h200:
    input:
        base=lambda w: recorded_files(h200_bases()),
        actual=lambda w: recorded_files(h200_dirs(config["h200"]["targets"][w.label]["config"])),
    output:
        json=f"{R}/predict_h200/{{label}}.json",
    params:
        bases=lambda w: h200_bases(),
        actual=lambda w: h200_dirs(config["h200"]["targets"][w.label]["config"]),
        flags=lambda w: list(config["h200"]["targets"][w.label]["flags"]),
        samples=config.get("h200", {}).get("samples", 0),
        steps_pooled=config.get("h200", {}).get("steps_pooled", False),
        source="measured on hardware (H200)",
    wildcard_constraints:
        label=r"[A-Za-z0-9_.+-]+",
    log:
        f"{R}/logs/predict_h200/{{label}}.log",
    benchmark:
        f"{R}/benchmarks/predict_h200/{{label}}.tsv"
    threads: 1
    resources:
        mem_mb=3000,
        runtime=20,
    script:
        "../scripts/predict_recorded.py"


rule table_h200_whatif:
    input:
        [f"{R}/predict_h200/{label}.json" for label in config.get("h200", {}).get("targets", {})],
    output:
        csv=reported(f"{R}/tables/h200_whatif.csv", "tables", "h200_whatif"),
        md=f"{R}/tables/h200_whatif.md",
    params:
        calibration=config.get("h200", {}).get("clock_calibration", []),
        title=("What-if predictions from the H200 base trace vs measured on hardware (one H200, bundled GPT, "
               "bf16): measured = mean over 2 recordings x 3 profiled steps; spread = (max - min) / mean of those; "
               "clock x = the sustained-clock model's factor on compute kernels, fitted on the `clock calibration` "
               "target's recordings (config/predict/clusters/h100_roce.yaml); lo90/hi90 = the prediction's 90% interval "
               "(host work drawn one profiled step of the base at a time, compute at one profiled step's clock), "
               "width in % of the measured mean, measured_in_90 = share of the measured iterations inside it; "
               "steps from = host work and kernels the median over the base's own profiled steps, or over all "
               "base recordings' (`lumos predict --other-recordings`)"),
    log:
        f"{R}/logs/table/h200_whatif.log",
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    script:
        "../scripts/table_recorded.py"
