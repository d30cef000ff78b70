# What-if predictions from the base run, each against the emulated actual run of the same seed: one job
# per batch of targets (`sweep_batches`) and seed, so the process start and numba's cache load are paid
# once for all of a seed's targets; each target keeps its own JSON and resolved config.


def predict_config_files_for(run):
    """The experiment's Hydra files, both model shapes (the what-if question) and the predictor's own group."""
    cfg_root = Path(os.environ["LUMOS_CONFIG_DIR"])
    target = pc.parse_run(run)
    files = hydra_inputs("experiment/predict")
    files += [pc._display(cfg_root / "model" / f"{m}.yaml") for m in sorted({BASE.model, target.model})]
    files += sorted(pc._display(p) for p in (cfg_root / "predict").rglob("*.yaml"))
    return files


def prediction_batches():
    """batch name -> the prediction targets of that sweep batch (its runs less the base)."""
    targets = {run for _, _, run in prediction_targets()}
    out = {}
    for batch, runs in sweep_batches().items():
        runs = [r for r in runs if r in targets]
        if runs:
            out[batch] = runs
    return out


for _batch, _runs in prediction_batches().items():

    rule:
        name:
            f"predict_batch_{_batch}"
        input:
            base=f"{R}/emulated/{BASE.name}/seed{{seed}}/manifest.json",
            actual=[f"{R}/emulated/{run}/seed{{seed}}/manifest.json" for run in _runs],
            config=sorted({f for run in _runs for f in predict_config_files_for(run)}),
        output:
            json=[f"{R}/predict/{run}/seed{{seed}}.json" for run in _runs],
            resolved=[f"{R}/predict/{run}/seed{{seed}}.config.resolved.yaml" for run in _runs],
        wildcard_constraints:
            seed=seed_constraint(seeds_of(_runs[0])),
        params:
            base=BASE.name,
            targets=list(_runs),
            flags=[pc.predict_flags(BASE, pc.parse_run(run)) for run in _runs],
            overrides=job_overrides("experiment/predict"),
        log:
            f"{R}/logs/predict/batch_{_batch}/seed{{seed}}.log",
        benchmark:
            f"{R}/benchmarks/predict/batch_{_batch}/seed{{seed}}.tsv"
        threads: 1
        resources:
            mem_mb=2000 + 100 * max(pc.parse_run(run).pp for run in _runs),
            runtime=10 * len(_runs),
        script:
            "../scripts/predict.py"
