# Are the prediction intervals honest? (emulated) For the base and every prediction target: the interval
# from the base run of one seed (`lumos replay --samples` for the base, `lumos predict --samples` for the
# targets) against the emulated actual of many other seeds, emulated in one job per configuration without
# writing traces. Table coverage, figure fig_coverage.

COVERAGE = config.get("coverage") or {}


def coverage_experiments():
    """(label, group, run) of every coverage experiment: the base replayed, then the prediction targets."""
    if not COVERAGE:
        return []
    skip = set(COVERAGE.get("skip_groups") or [])
    return [("base", "replay", BASE.name)] + [t for t in prediction_targets() if t[1] not in skip]


def coverage_seeds():
    first = int(COVERAGE.get("first_seed", 1000))
    return list(range(first, first + int(COVERAGE.get("seeds", 30))))


def coverage_fit_seed():
    return int(COVERAGE.get("fit_seed", 0))


def coverage_inputs():
    exps = coverage_experiments()
    return {"intervals": [f"{R}/coverage/intervals/{label}.json" for label, _, _ in exps],
            "actuals": [f"{R}/coverage/actuals/{run}.csv" for _, _, run in exps]}


rule coverage_actuals:
    input:
        config=lambda w: hydra_inputs("emulate", pc.parse_run(w.run).emulate_overrides()),
    output:
        csv=f"{R}/coverage/actuals/{{run}}.csv",
    params:
        overrides=lambda w: job_overrides("emulate", pc.parse_run(w.run).emulate_overrides()),
        seeds=coverage_seeds(),
    log:
        f"{R}/logs/coverage_actuals/{{run}}.log",
    benchmark:
        f"{R}/benchmarks/coverage_actuals/{{run}}.tsv"
    threads: 1
    resources:
        mem_mb=emulate_mem_mb,
        runtime=30,
    script:
        "../scripts/coverage_actuals.py"


def coverage_target(label):
    for lab, group, run in coverage_experiments():
        if lab == label:
            return group, run
    raise ValueError(f"coverage: no experiment labelled {label!r}")


rule coverage_interval:
    input:
        base=f"{R}/emulated/{BASE.name}/seed{coverage_fit_seed()}/manifest.json",
        config=lambda w: predict_config_files_for(coverage_target(w.label)[1]),
    output:
        json=f"{R}/coverage/intervals/{{label}}.json",
    wildcard_constraints:
        label=r"[A-Za-z0-9_.+-]+",
    params:
        base=BASE.name,
        run=lambda w: coverage_target(w.label)[1],
        group=lambda w: coverage_target(w.label)[0],
        samples=int(COVERAGE.get("samples", 1000)),
        fit_seed=coverage_fit_seed(),
    log:
        f"{R}/logs/coverage_interval/{{label}}.log",
    benchmark:
        f"{R}/benchmarks/coverage_interval/{{label}}.tsv"
    threads: 1
    resources:
        mem_mb=lambda w: 2000 + 100 * pc.parse_run(coverage_target(w.label)[1]).pp,
        runtime=30,
    script:
        "../scripts/coverage_interval.py"


rule table_coverage:
    input:
        **coverage_inputs(),
    output:
        csv=reported(f"{R}/tables/coverage.csv", "tables", "coverage"),
        md=f"{R}/tables/coverage.md",
    params:
        experiments=coverage_experiments(),
    log:
        f"{R}/logs/table/coverage.log",
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    script:
        "../scripts/table_coverage.py"


# Real traces (measured): each trace's interval (`other_iterations`: the default step sampled, the model
# fitted on every profiled step) and the share of its other profiled steps inside the 90% interval.
rule interval_real:
    input:
        lambda w: trace_files(w.trace),
    output:
        json=f"{R}/coverage/real/{{trace}}.json",
    params:
        path=lambda w: config["real_traces"][w.trace],
        samples=int(COVERAGE.get("samples_real", 2000)),
    log:
        f"{R}/logs/interval_real/{{trace}}.log",
    benchmark:
        f"{R}/benchmarks/interval_real/{{trace}}.tsv"
    threads: 1
    resources:
        mem_mb=3000,
        runtime=10,
    script:
        "../scripts/interval_real.py"


rule table_intervals_real:
    input:
        [f"{R}/coverage/real/{t}.json" for t in config.get("real_traces", {})],
    output:
        csv=reported(f"{R}/tables/intervals_real.csv", "tables", "intervals_real"),
        md=f"{R}/tables/intervals_real.md",
    params:
        traces=list(config.get("real_traces", {})),
    log:
        f"{R}/logs/table/intervals_real.log",
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    script:
        "../scripts/table_intervals_real.py"
