# Aggregate: per-job results -> long data tables (data/) -> presentation tables (tables/, CSV + Markdown).


def collect_inputs(kind):
    """(files, labels) of one long data table; labels say which trace/run/seed/simulator each file is."""
    if kind in ("replay_real", "replay_microbench", "replay_h200"):
        group = {"replay_real": "real_traces", "replay_microbench": "microbenchmarks",
                 "replay_h200": "h200_traces"}[kind]
        labels = [{"trace": t, "simulator": s} for t in config.get(group, {}) for s in SIMULATORS]
        return replay_real_jsons(group), labels
    if kind == "replay_emulated":
        labels = [{"run": run, "seed": seed, "simulator": s}
                  for run in config["replay"]["emulated"] for seed in seeds_of(run) for s in SIMULATORS]
        return replay_emulated_jsons(), labels
    if kind in ("scaleout", "variants"):
        labels = [{"label": label, "group": group, "run": run, "seed": seed}
                  for label, group, run in prediction_targets() if (group == "variant") == (kind == "variants")
                  for seed in seeds_of(run)]
        return prediction_jsons(kind), labels
    if kind == "speed":
        labels = [{"label": v, "group": "micro-batch" if "micro_batch" in config["speed"]["variants"][v] else "speed",
                   "run": config["speed"]["base"], "seed": s}
                  for v in config["speed"]["variants"] for s in range(int(config["speed"].get("seeds", 1)))]
        return speed_jsons(), labels
    if kind == "sharded_dp":
        return sharded_jsons(), sharded_labels()
    if kind == "from_one_gpu":
        return from_one_gpu_inputs()
    if kind == "llama":
        return llama_inputs()
    if kind == "schedules":
        return schedule_inputs()
    if kind == "ablation":
        abl = config.get("ablation", {})
        labels = ([{"source": t, "emulated": False} for t in abl.get("real", [])]
                  + [{"source": f"{run}/seed{seed}", "emulated": True} for run in abl.get("emulated", [])
                     for seed in range(int(abl.get("seeds", 1)))])
        return ablation_csvs(), labels
    raise ValueError(f"unknown data table {kind!r}")


rule collect:
    input:
        lambda w: collect_inputs(w.kind)[0],
    output:
        csv=f"{R}/data/{{kind}}.csv",
    wildcard_constraints:
        kind="replay_real|replay_microbench|replay_h200|replay_emulated|scaleout|variants|speed|sharded_dp|from_one_gpu|llama|schedules|ablation",
    params:
        labels=lambda w: collect_inputs(w.kind)[1],
    log:
        f"{R}/logs/collect/{{kind}}.log",
    benchmark:
        f"{R}/benchmarks/collect/{{kind}}.tsv"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    script:
        "../scripts/collect.py"


def table_inputs(wildcards):
    name = wildcards.name
    if name == "statistics":
        out = {}
        if config["replay"]["emulated"]:
            out["replay_emulated"] = f"{R}/data/replay_emulated.csv"
        if prediction_jsons("scaleout"):
            out["scaleout"] = f"{R}/data/scaleout.csv"
        if prediction_jsons("variants"):
            out["variants"] = f"{R}/data/variants.csv"
        return out
    if name == "ablation_by_trace":
        return {name: f"{R}/data/ablation.csv"}
    return {name: f"{R}/data/{name}.csv"}


rule table:
    input:
        unpack(table_inputs),
    output:
        csv=reported(f"{R}/tables/{{name}}.csv", "tables"),
        md=f"{R}/tables/{{name}}.md",
    wildcard_constraints:
        name="replay_real|replay_microbench|replay_h200|replay_emulated|scaleout|variants|speed|sharded_dp|from_one_gpu|llama|schedules|ablation|ablation_by_trace|statistics",
    params:
        tag=TAG,
        overrides=OVERRIDES,
    log:
        f"{R}/logs/table/{{name}}.log",
    benchmark:
        f"{R}/benchmarks/table/{{name}}.tsv"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    script:
        "../scripts/tables.py"


rule publish_table:
    """The default tag's tables, where the README points (results/tables/)."""
    input:
        f"results/default/tables/{{name}}.{{ext}}",
    output:
        "results/tables/{name}.{ext}",
    log:
        "results/default/logs/publish/{name}.{ext}.log",
    localrule: True
    shell:
        "cp {input} {output} 2> {log}"
