# Ablations: full Lumos, dPRO-style, each edge class dropped, random drops over seeds, gap threshold swept.


rule ablation_real:
    input:
        trace=lambda w: trace_files(w.trace),
        config=lambda w: hydra_inputs("experiment/ablation"),
    output:
        csv=f"{R}/ablation/real/{{trace}}.csv",
        resolved=f"{R}/ablation/real/{{trace}}.config.resolved.yaml",
    params:
        path=lambda w: trace_path(w.trace),
        source=lambda w: w.trace,
        emulated=False,
        overrides=job_overrides("experiment/ablation"),
    log:
        f"{R}/logs/ablation/real/{{trace}}.log",
    benchmark:
        f"{R}/benchmarks/ablation/real/{{trace}}.tsv"
    threads: 1
    resources:
        mem_mb=3000,
        runtime=60,
    script:
        "../scripts/ablation.py"


rule ablation_emulated:
    input:
        manifest=f"{R}/emulated/{{run}}/seed{{seed}}/manifest.json",
        config=lambda w: hydra_inputs("experiment/ablation"),
    output:
        csv=f"{R}/ablation/emulated/{{run}}/seed{{seed}}.csv",
        resolved=f"{R}/ablation/emulated/{{run}}/seed{{seed}}.config.resolved.yaml",
    params:
        path=lambda w: emulated_dir(w.run, w.seed),
        source=lambda w: f"{w.run}/seed{w.seed}",
        emulated=True,
        overrides=job_overrides("experiment/ablation"),
    log:
        f"{R}/logs/ablation/emulated/{{run}}/seed{{seed}}.log",
    benchmark:
        f"{R}/benchmarks/ablation/emulated/{{run}}/seed{{seed}}.tsv"
    threads: 1
    resources:
        mem_mb=lambda w: 2000 + 40 * pc.parse_run(w.run).pp * 16,
        runtime=120,
    script:
        "../scripts/ablation.py"
