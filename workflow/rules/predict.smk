# What-if predictions from the base run, each against the emulated actual run of the same seed.


def predict_config_files(wildcards):
    return predict_config_files_for(wildcards.run)


def predict_config_files_for(run):
    """The experiment's Hydra files, both model shapes (the what-if question) and the predictor's own group."""
    cfg_root = Path(os.environ["LUMOS_CONFIG_DIR"])
    target = pc.parse_run(run)
    files = hydra_inputs("experiment/predict")
    files += [pc._display(cfg_root / "model" / f"{m}.yaml") for m in sorted({BASE.model, target.model})]
    files += sorted(pc._display(p) for p in (cfg_root / "predict").rglob("*.yaml"))
    return files


rule predict:
    input:
        base=f"{R}/emulated/{BASE.name}/seed{{seed}}/manifest.json",
        actual=f"{R}/emulated/{{run}}/seed{{seed}}/manifest.json",
        config=predict_config_files,
    output:
        json=f"{R}/predict/{{run}}/seed{{seed}}.json",
        resolved=f"{R}/predict/{{run}}/seed{{seed}}.config.resolved.yaml",
    params:
        base=BASE.name,
        overrides=job_overrides("experiment/predict"),
    log:
        f"{R}/logs/predict/{{run}}/seed{{seed}}.log",
    benchmark:
        f"{R}/benchmarks/predict/{{run}}/seed{{seed}}.tsv"
    threads: 1
    resources:
        mem_mb=lambda w: 2000 + 100 * pc.parse_run(w.run).pp,
        runtime=30,
    script:
        "../scripts/predict.py"
