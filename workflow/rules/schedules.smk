# Pipeline schedules (table schedules; emulated): Megatron's interleaved 1F1B (a run named MODEL-TPxPPxDPvV
# runs V model chunks per stage, `parallel.vp`). Each base's targets are predicted with `lumos predict BASE
# --tp/--pp/--dp/--vp` (flags from the run names) against the emulated actual of the same seed.


def schedule_jobs():
    """(base key, group, base run, target run, seed) of every prediction of the table."""
    cfg = config.get("schedules") or {}
    return [(key, group, spec["base"], run, seed) for key, spec in (cfg.get("predictions") or {}).items()
            for group, runs in (spec.get("targets") or {}).items() for run in runs
            for seed in range(int(cfg.get("seeds", 1)))]


def schedule_inputs():
    """(files, labels) of the table's long data."""
    jobs = schedule_jobs()
    files = [f"{R}/schedules/{key}/{run}/seed{seed}.json" for key, _, _, run, seed in jobs]
    labels = [{"group": f"{group} (from {base})", "label": run, "run": run, "seed": seed, "base_run": base}
              for _, group, base, run, seed in jobs]
    return files, labels


for _key, _spec in ((config.get("schedules") or {}).get("predictions") or {}).items():
    _base = _spec["base"]
    _targets = list(dict.fromkeys(run for runs in _spec["targets"].values() for run in runs))

    rule:
        name:
            f"predict_schedules_{_key}"
        input:
            base=f"{R}/emulated/{_base}/seed{{seed}}/manifest.json",
            actual=[f"{R}/emulated/{run}/seed{{seed}}/manifest.json" for run in _targets],
        output:
            json=[f"{R}/schedules/{_key}/{run}/seed{{seed}}.json" for run in _targets],
        params:
            base=_base,
            targets=_targets,
            flags=[pc.predict_flags(pc.parse_run(_base), pc.parse_run(run)) for run in _targets],
        log:
            f"{R}/logs/schedules/{_key}/seed{{seed}}.log",
        benchmark:
            f"{R}/benchmarks/schedules/{_key}/seed{{seed}}.tsv"
        threads: 1
        resources:
            mem_mb=2000 + 100 * max(pc.parse_run(run).pp for run in _targets),
            runtime=10 * len(_targets),
        script:
            "../scripts/predict.py"
