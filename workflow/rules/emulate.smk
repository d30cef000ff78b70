# Emulated "actual" runs: one iteration of a Megatron-style GPT on the emulated cluster, per seed.
# Ground truth for every emulated table; the predictor never sees the emulator, only its traces.


def emulate_mem_mb(wildcards):
    run = pc.parse_run(wildcards.run)
    return 2000 + 60 * run.pp * (1 if run.gpus < 128 else 4)


rule emulate:
    input:
        config=lambda w: hydra_inputs("emulate", pc.parse_run(w.run).emulate_overrides()),
    output:
        manifest=f"{R}/emulated/{{run}}/seed{{seed}}/manifest.json",
        resolved=f"{R}/emulated/{{run}}/seed{{seed}}/config.resolved.yaml",
    params:
        overrides=lambda w: job_overrides("emulate", pc.parse_run(w.run).emulate_overrides() + [f"seed={w.seed}"]),
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
