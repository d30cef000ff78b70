# Your own run, scaled (table from_one_gpu; emulated): the scale-out and TP targets of `predict` predicted from
# single-GPU and single-host emulated bases of the same model, micro-batch and sequence, the collectives the
# base lacks added by `lumos predict` (lumos/transform/add_collectives.py) and timed by the default cluster
# profile, each against the emulated actual of its seed; beside them the same targets from the multi-stage
# base (the scaleout table's predictions of those seeds).


def from_one_gpu_jobs():
    """(label, base run, target run, seed) of every prediction of the table."""
    cfg = config.get("from_one_gpu") or {}
    out = []
    for label, shape in (cfg.get("bases") or {}).items():
        base = pc.with_parallel(BASE, shape).name
        for target in cfg.get("targets", []):
            for seed in range(int(cfg.get("seeds", 1))):
                out.append((label, base, pc.with_parallel(BASE, target).name, seed))
    return out


def from_one_gpu_inputs():
    """(files, labels) of the table's long data: each small base's predictions, then the multi-stage base's."""
    files, labels = [], []
    for label, base, run, seed in from_one_gpu_jobs():
        files.append(f"{R}/from_one_gpu/{base}/{run}/seed{seed}.json")
        labels.append({"group": f"{label} ({base.rsplit('-', 1)[1]})", "label": run.rsplit("-", 1)[1], "run": run,
                       "seed": seed})
    scaleout = {run for _, group, run in prediction_targets() if group != "variant"}
    for run, seed in dict.fromkeys((run, seed) for _, _, run, seed in from_one_gpu_jobs()):
        if run in scaleout and seed in seeds_of(run):
            files.append(f"{R}/predict/{run}/seed{seed}.json")
            labels.append({"group": f"multi-stage base ({BASE.name.rsplit('-', 1)[1]})",
                           "label": run.rsplit("-", 1)[1], "run": run, "seed": seed})
    return files, labels


for _base in dict.fromkeys(base for _, base, _, _ in from_one_gpu_jobs()):
    _targets = list(dict.fromkeys(run for _, b, run, _ in from_one_gpu_jobs() if b == _base))

    rule:
        name:
            f"predict_from_one_gpu_{_base.replace('-', '_')}"
        input:
            base=f"{R}/emulated/{_base}/seed{{seed}}/manifest.json",
            actual=[f"{R}/emulated/{run}/seed{{seed}}/manifest.json" for run in _targets],
        output:
            json=[f"{R}/from_one_gpu/{_base}/{run}/seed{{seed}}.json" for run in _targets],
        params:
            base=_base,
            targets=_targets,
            flags=[pc.predict_flags(pc.parse_run(_base), pc.parse_run(run)) for run in _targets],
        log:
            f"{R}/logs/from_one_gpu/{_base}/seed{{seed}}.log",
        benchmark:
            f"{R}/benchmarks/from_one_gpu/{_base}/seed{{seed}}.tsv"
        threads: 1
        resources:
            mem_mb=2000 + 100 * max(pc.parse_run(run).pp for run in _targets),
            runtime=10 * len(_targets),
        script:
            "../scripts/predict.py"
