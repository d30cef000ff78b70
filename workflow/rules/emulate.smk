# Emulated "actual" runs: one iteration of a Megatron-style GPT on the emulated cluster, per seed.
# Ground truth for every emulated table; the predictor never sees the emulator, only its traces.
# The prediction sweep's runs are emulated in batches (one job per batch and seed: `emulate_batch_*`);
# any other run, or a sweep run at a seed outside its batch, one job per run and seed (`emulate`).


def emulate_mem_mb(wildcards):
    return emulate_run_mem_mb(wildcards.run)


def emulate_run_mem_mb(name):
    run = pc.parse_run(name)
    return 2000 + 60 * run.pp * (1 if run.gpus < 128 else 4)


rule emulate:
    input:
        config=lambda w: hydra_inputs("emulate", pc.parse_run(w.run).emulate_overrides()),
    output:
        manifest=f"{R}/emulated/{{run}}/seed{{seed}}/manifest.json",
        resolved=f"{R}/emulated/{{run}}/seed{{seed}}/config.resolved.yaml",
    params:
        runs=lambda w: [w.run],
        overrides=lambda w: [job_overrides("emulate", pc.parse_run(w.run).emulate_overrides() + [f"seed={w.seed}"])],
    log:
        f"{R}/logs/emulate/{{run}}/seed{{seed}}.log",
    benchmark:
        f"{R}/benchmarks/emulate/{{run}}/seed{{seed}}.tsv"
    threads: 1
    resources:
        mem_mb=emulate_mem_mb,
        runtime=30,
    script:
        "../scripts/emulate.py"


for _batch, _runs in sweep_batches().items():

    rule:
        name:
            f"emulate_batch_{_batch}"
        input:
            config=sorted({f for run in _runs for f in hydra_inputs("emulate", pc.parse_run(run).emulate_overrides())}),
        output:
            manifest=[f"{R}/emulated/{run}/seed{{seed}}/manifest.json" for run in _runs],
            resolved=[f"{R}/emulated/{run}/seed{{seed}}/config.resolved.yaml" for run in _runs],
        wildcard_constraints:
            seed=seed_constraint(seeds_of(_runs[0])),
        params:
            runs=list(_runs),
            overrides=lambda w, runs=tuple(_runs): [
                job_overrides("emulate", pc.parse_run(run).emulate_overrides() + [f"seed={w.seed}"]) for run in runs],
        log:
            f"{R}/logs/emulate/batch_{_batch}/seed{{seed}}.log",
        benchmark:
            f"{R}/benchmarks/emulate/batch_{_batch}/seed{{seed}}.tsv"
        threads: 1
        resources:
            mem_mb=max(emulate_run_mem_mb(run) for run in _runs),
            runtime=30 * len(_runs),
        script:
            "../scripts/emulate.py"

    workflow.ruleorder(f"emulate_batch_{_batch}", "emulate")
