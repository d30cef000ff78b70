# Your own run, scaled (table from_one_gpu; emulated): the scale-out and TP targets of `predict` predicted from
# single-GPU and single-host emulated bases of the same model, micro-batch and sequence, the collectives the
# base lacks added by `lumos predict` (lumos/transform/add_collectives.py) and timed by the default cluster
# profile or, for the bases `nccl_tests` names, by the emulated cluster's nccl-tests output (`lumos emulate
# --nccl-tests`, `lumos predict --nccl-tests`), each against the emulated actual of its seed; beside them the
# same targets from the multi-stage base (the scaleout table's predictions of those seeds).
NCCL_TESTS_SUFFIX = "+nccl_tests"


def from_one_gpu_jobs():
    """(label, base key, target run, seed) of every prediction of the table; the key is the base run's name,
    with NCCL_TESTS_SUFFIX where its collectives are timed by the nccl-tests output."""
    cfg = config.get("from_one_gpu") or {}
    out = []
    bases = [(label, pc.with_parallel(BASE, shape).name) for label, shape in (cfg.get("bases") or {}).items()]
    bases += [(f"{label} + nccl-tests", base + NCCL_TESTS_SUFFIX) for label, base in bases
              if label in (cfg.get("nccl_tests") or [])]
    for label, base in bases:
        for target in cfg.get("targets", []):
            for seed in range(int(cfg.get("seeds", 1))):
                out.append((label, base, pc.with_parallel(BASE, target).name, seed))
    return out


def nccl_tests_files():
    """The emulated nccl-tests outputs of the base's cluster (`lumos emulate --nccl-tests`)."""
    from lumos.emulator.nccl_tests import LAYOUTS, TESTS

    return [f"{R}/nccl_tests/{BASE.name}/{test}.{h}x{g}.txt" for h, g in LAYOUTS for test in TESTS]


rule emulate_nccl_tests:
    """What nccl-tests would print on the emulated cluster of the base run (deterministic: no seed)."""
    input:
        config=hydra_inputs("emulate", BASE.emulate_overrides()),
    output:
        nccl_tests_files(),
    params:
        overrides=job_overrides("emulate", BASE.emulate_overrides()),
        out=f"{R}/nccl_tests/{BASE.name}",
    log:
        f"{R}/logs/nccl_tests/{BASE.name}.log",
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    script:
        "../scripts/emulate_nccl_tests.py"


def from_one_gpu_inputs():
    """(files, labels) of the table's long data: each small base's predictions, then the multi-stage base's."""
    files, labels = [], []
    for label, base, run, seed in from_one_gpu_jobs():
        files.append(f"{R}/from_one_gpu/{base}/{run}/seed{seed}.json")
        shape = base.removesuffix(NCCL_TESTS_SUFFIX).rsplit("-", 1)[1]
        labels.append({"group": f"{label} ({shape})", "label": run.rsplit("-", 1)[1], "run": run,
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
    _run = _base.removesuffix(NCCL_TESTS_SUFFIX)
    _measured = nccl_tests_files() if _base != _run else []

    rule:
        name:
            f"predict_from_one_gpu_{_base.replace('-', '_').replace('+', '_')}"
        input:
            base=f"{R}/emulated/{_run}/seed{{seed}}/manifest.json",
            actual=[f"{R}/emulated/{run}/seed{{seed}}/manifest.json" for run in _targets],
            nccl_tests=_measured,
        output:
            json=[f"{R}/from_one_gpu/{_base}/{run}/seed{{seed}}.json" for run in _targets],
        params:
            base=_run,
            targets=_targets,
            flags=[pc.predict_flags(pc.parse_run(_run), pc.parse_run(run)) + (["--nccl-tests", *_measured] if _measured else [])
                   for run in _targets],
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
