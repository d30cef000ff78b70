# Measured on hardware: what-if predictions from the H200 base trace, each against both recordings
# of the target configuration (every profiled step), with the run-to-run spread beside the error.


def h200_dirs(config_name):
    """The recorded runs (one directory each) of one H200 configuration."""
    return [d for n, d in config["h200_traces"].items() if n[len("h200_"):].rsplit("_r", 1)[0] == config_name]


def h200_bases():
    return [config["h200_traces"][f"h200_{b}"] for b in config["h200"]["bases"]]


def h200_trace_files(dirs):
    return sorted(str(p) for d in dirs for p in Path(d).iterdir() if p.name.endswith((".json", ".json.gz")))


rule predict_h200:
    input:
        base=lambda w: h200_trace_files(h200_bases()),
        actual=lambda w: h200_trace_files(h200_dirs(config["h200"]["targets"][w.label]["config"])),
    output:
        json=f"{R}/predict_h200/{{label}}.json",
    params:
        bases=lambda w: h200_bases(),
        actual=lambda w: h200_dirs(config["h200"]["targets"][w.label]["config"]),
        flags=lambda w: list(config["h200"]["targets"][w.label]["flags"]),
        samples=config.get("h200", {}).get("samples", 0),
        host_pooled=config.get("h200", {}).get("host_pooled", False),
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
        "../scripts/predict_h200.py"


rule table_h200_whatif:
    input:
        [f"{R}/predict_h200/{label}.json" for label in config.get("h200", {}).get("targets", {})],
    output:
        csv=f"{R}/tables/h200_whatif.csv",
        md=f"{R}/tables/h200_whatif.md",
    log:
        f"{R}/logs/table/h200_whatif.log",
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    script:
        "../scripts/table_h200.py"
