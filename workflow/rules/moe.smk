# Mixture-of-experts what-ifs (table moe; emulated): EP, expert-count, top-k, expert-width and DP changes predicted
# from emulated Mixtral-style bases (seeds 0 ..) against the mean of each target's emulated runs, and the base
# configuration's routing interval (`lumos predict --samples`) against independent emulated runs
# (workflow/scripts/moe_check.py, lumos/report/moe_table.py).

MOE = config.get("moe") or {}

if MOE.get("targets"):

    rule moe_check:
        output:
            csv=f"{R}/moe/check.csv",
        params:
            base=MOE.get("base", []),
            targets=MOE.get("targets", {}),
            seeds=int(MOE.get("seeds", 1)),
            base_seeds=int(MOE.get("base_seeds", 1)),
            interval=MOE.get("interval", {}),
        log:
            f"{R}/logs/moe/check.log",
        benchmark:
            f"{R}/benchmarks/moe/check.tsv"
        threads: 1
        resources:
            mem_mb=3000,
            runtime=60,
        script:
            "../scripts/moe_check.py"

    rule table_moe:
        input:
            csv=f"{R}/moe/check.csv",
        output:
            csv=reported(f"{R}/tables/moe.csv", "tables", "moe"),
            md=f"{R}/tables/moe.md",
        log:
            f"{R}/logs/table/moe.log",
        threads: 1
        resources:
            mem_mb=1000,
            runtime=10,
        script:
            "../scripts/table_moe.py"


# Measured on this machine (CPU): EP what-ifs on the MoE CPU captures over gloo (resources/traces/moe_cpu;
# lumos/transform/moe_host.py). Each target from each base recording (and again with every base recording's
# profiled steps, --other-recordings), the host's slowdown and gloo's collectives at the target's EP fitted on
# calibration recordings of other rounds (--ep-calibration), against every profiled step of the target's
# recordings (table moe_cpu_whatif).
MOE_CPU = config.get("moe_cpu") or {}


rule predict_moe_cpu:
    input:
        base=lambda w: recorded_files(moe_cpu_dirs(w.label, "bases")),
        actual=lambda w: recorded_files(moe_cpu_dirs(w.label, "actual")),
        calibration=lambda w: recorded_files([str(Path(MOE_CPU["dir"]) / d) for pair in
                                              MOE_CPU["targets"][w.label]["calibration"] for d in pair]),
    output:
        json=f"{R}/predict_moe_cpu/{{label}}.json",
    params:
        bases=lambda w: moe_cpu_dirs(w.label, "bases"),
        actual=lambda w: moe_cpu_dirs(w.label, "actual"),
        flags=lambda w: list(MOE_CPU["targets"][w.label]["flags"]),
        extra=lambda w: moe_cpu_calibration_flags(w.label),
        samples=0,
        steps_pooled=MOE_CPU.get("steps_pooled", False),
        source="measured on this machine (CPU)",
    wildcard_constraints:
        label=r"[A-Za-z0-9_.+-]+",
    log:
        f"{R}/logs/predict_moe_cpu/{{label}}.log",
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    script:
        "../scripts/predict_recorded.py"


rule table_moe_cpu_whatif:
    input:
        [f"{R}/predict_moe_cpu/{label}.json" for label in MOE_CPU.get("targets", {})],
    output:
        csv=reported(f"{R}/tables/moe_cpu_whatif.csv", "tables", "moe_cpu_whatif"),
        md=f"{R}/tables/moe_cpu_whatif.md",
    params:
        calibration=[],
        title=("Expert parallelism over gloo, measured on this machine (CPU captures; the bundled MoE model, 4 "
               "experts, top-2, resources/traces/moe_cpu): EP 2 -> 4 and 4 -> 2 (`lumos predict BASE --ep N "
               "--ep-calibration ...`: the host's slowdown and gloo's collectives at EP N fitted on the same program "
               "recorded at both EPs in other rounds), predicted from each base recording vs the mean of every "
               "profiled step of every rank of the target's recordings; spread = (max - min) / mean of those; steps "
               "from = host work the median over the base's own profiled steps, or over all base recordings' "
               "(`--other-recordings`)"),
    log:
        f"{R}/logs/table/moe_cpu_whatif.log",
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    script:
        "../scripts/table_recorded.py"
