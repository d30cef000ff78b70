# Prediction vs hardware: for every published data set with a base in it (config `endtoend:`), the base
# emulated with the data set's profile, `lumos predict` to each measured layout, scored against the MEASURED
# time (table endtoend, figure fig_endtoend). A data set on the sweep's base and targets scores the sweep's own
# predictions (no job of its own); any other gets an emulation of its base and one predict job per seed
# (workflow/scripts/endtoend_plan.py says which).


def endtoend_predict_config_files(plan):
    """The predictor's Hydra files and both model shapes of a data set's predictions (as `predict_batch_*`)."""
    cfg_root = Path(os.environ["LUMOS_CONFIG_DIR"])
    files = hydra_inputs("experiment/predict")
    files += [pc._display(cfg_root / "model" / f"{m}.yaml") for m in sorted({plan.base.model}
                                                                           | {t.model for t in plan.targets})]
    files += sorted(pc._display(p) for p in (cfg_root / "predict").rglob("*.yaml"))
    return files


def endtoend_measured_files(plan):
    from lumos.emulator.realism import dataset_files

    return [pc._display(p) for p in dataset_files(plan.measured)]


for _plan in ENDTOEND:
    if _plan.own_base:

        rule:
            name:
                f"emulate_endtoend_{_plan.name}"
            input:
                config=hydra_inputs("emulate", list(_plan.base_overrides)),
                measured=endtoend_measured_files(_plan) if _plan.base_measured else [],   # its point's overrides
            output:
                manifest=f"{R}/endtoend/{_plan.name}/base/seed{{seed}}/manifest.json",
                resolved=f"{R}/endtoend/{_plan.name}/base/seed{{seed}}/config.resolved.yaml",
            wildcard_constraints:
                seed=seed_constraint(_plan.base_seeds()),
            params:
                runs=[_plan.base.name],
                overrides=lambda w, over=_plan.base_overrides: [job_overrides("emulate",
                                                                              list(over) + [f"seed={w.seed}"])],
            log:
                f"{R}/logs/endtoend/{_plan.name}/emulate_seed{{seed}}.log",
            benchmark:
                f"{R}/benchmarks/endtoend/{_plan.name}/emulate_seed{{seed}}.tsv"
            threads: 1
            resources:
                mem_mb=emulate_run_mem_mb(_plan.base.name),
                runtime=30,
            script:
                "../scripts/emulate.py"

    if not _plan.from_sweep:

        rule:
            name:
                f"predict_endtoend_{_plan.name}"
            input:
                base=_plan.base_dir(R, "{seed}") + "/manifest.json",
                config=endtoend_predict_config_files(_plan),
            output:
                json=[_plan.prediction_json(R, t, "{seed}") for t in _plan.targets],
                resolved=[_plan.prediction_json(R, t, "{seed}")[: -len(".json")] + ".config.resolved.yaml"
                          for t in _plan.targets],
            wildcard_constraints:
                seed=seed_constraint(_plan.base_seeds()),
            params:
                base=_plan.base.name,
                targets=[t.name for t in _plan.targets],
                flags=[pc.predict_flags(_plan.base, t) + list(_plan.predict_flags) for t in _plan.targets],
                overrides=job_overrides("experiment/predict"),
            log:
                f"{R}/logs/endtoend/{_plan.name}/predict_seed{{seed}}.log",
            benchmark:
                f"{R}/benchmarks/endtoend/{_plan.name}/predict_seed{{seed}}.tsv"
            threads: 1
            resources:
                mem_mb=2000 + 100 * max(t.pp for t in _plan.targets),
                runtime=10 * len(_plan.targets),
            script:
                "../scripts/predict.py"


def endtoend_params():
    """Each data set as the table's shim reads it: its plan and every prediction file, by target and seed."""
    out = []
    for plan in ENDTOEND:
        out.append({"name": plan.name, "measured": plan.measured, "model": plan.model, "base": plan.base.name,
                    "label": plan.label, "measured_by": plan.measured_by, "from_sweep": plan.from_sweep,
                    "peer": dict(plan.peer),
                    # the base's own layout joins the throughput ranking where the data set measured it
                    "base_layout": plan.shape(plan.base) if plan.base_measured else None,
                    "base_manifests": [f"{plan.base_dir(R, s)}/manifest.json" for s in plan.base_seeds()]
                    if plan.base_measured else [],
                    "targets": [{"target": plan.shape(t), "run": t.name,
                                 "files": {str(s): plan.prediction_json(R, t, s) for s in plan.seeds[t.name]}}
                                for t in plan.targets]})
    return out


rule table_endtoend:
    input:
        predictions=[f for plan in ENDTOEND for f in plan.prediction_jsons(R)],
        bases=[f"{plan.base_dir(R, s)}/manifest.json" for plan in ENDTOEND if plan.base_measured
               for s in plan.base_seeds()],
        measured=sorted({f for plan in ENDTOEND for f in endtoend_measured_files(plan)}),
        peer=[plan.peer["file"] for plan in ENDTOEND if plan.peer.get("file")],
    output:
        data=f"{R}/data/endtoend.csv",
        csv=reported(f"{R}/tables/endtoend.csv", "tables", "endtoend"),
        md=f"{R}/tables/endtoend.md",
    params:
        datasets=endtoend_params(),
        tag=TAG,
        overrides=OVERRIDES,
    log:
        f"{R}/logs/table/endtoend.log",
    benchmark:
        f"{R}/benchmarks/table/endtoend.tsv"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    script:
        "../scripts/table_endtoend.py"
