# Sharded data parallelism, checked on the emulator (emulated; issue 32): the base and every target run
# emulated with FSDP2 FULL_SHARD (training.dp_sharding=fsdp), and `lumos predict BASE --dp D` from the
# sharded base of the same seed against the target's emulated actual.

SHARDED = config.get("sharded") or {}
SHARDED_OVERRIDES = ["training.dp_sharding=fsdp"]


def sharded_runs():
    """label -> run: `base`, then every target shape (TPxPPxDP) of the sharded base's model."""
    if not SHARDED:
        return {}
    base = pc.parse_run(SHARDED["base"])
    return {"base": base, **{shape: pc.with_parallel(base, shape) for shape in SHARDED.get("targets", [])}}


def sharded_seeds():
    return list(range(int(SHARDED.get("seeds", 1))))


def sharded_jsons():
    return [f"{R}/predict_sharded/{t}/seed{s}.json" for t in SHARDED.get("targets", []) for s in sharded_seeds()]


def sharded_group(base, target):
    """What a target changes, `DP (FSDP)`, `PP (FSDP)` or `DP+PP (FSDP)`."""
    parts = [name for name, a, b in (("TP", base.tp, target.tp), ("PP", base.pp, target.pp),
                                     ("DP", base.dp, target.dp)) if a != b]
    return "+".join(sorted(parts, key=["DP", "PP", "TP"].index) or ["none"]) + " (FSDP)"


def sharded_flags(shape):
    run = sharded_runs()[shape]
    return ["--tp", str(run.tp), "--pp", str(run.pp), "--dp", str(run.dp)]


# One job per seed emulates the base and every target, one predicts the targets (as the speed rules do).
rule emulate_sharded:
    input:
        config=lambda w: hydra_inputs("emulate", sharded_runs()["base"].emulate_overrides() + SHARDED_OVERRIDES),
    output:
        manifest=[f"{R}/emulated_sharded/{label}/seed{{seed}}/manifest.json" for label in sharded_runs()],
        resolved=[f"{R}/emulated_sharded/{label}/seed{{seed}}/config.resolved.yaml" for label in sharded_runs()],
    params:
        overrides=lambda w: [job_overrides("emulate", run.emulate_overrides() + SHARDED_OVERRIDES + [f"seed={w.seed}"])
                             for run in sharded_runs().values()],
        scale=lambda w: [{} for _ in sharded_runs()],
    log:
        f"{R}/logs/emulate_sharded/seed{{seed}}.log",
    benchmark:
        f"{R}/benchmarks/emulate_sharded/seed{{seed}}.tsv"
    threads: 1
    resources:
        mem_mb=4000,
        runtime=lambda w: 10 * len(sharded_runs()),
    script:
        "../scripts/emulate_variants.py"


rule predict_sharded:
    input:
        base=f"{R}/emulated_sharded/base/seed{{seed}}/manifest.json",
        actual=[f"{R}/emulated_sharded/{t}/seed{{seed}}/manifest.json" for t in SHARDED.get("targets", [])],
    output:
        json=[f"{R}/predict_sharded/{t}/seed{{seed}}.json" for t in SHARDED.get("targets", [])],
    params:
        variants=list(SHARDED.get("targets", [])),
        flags=[sharded_flags(t) for t in SHARDED.get("targets", [])],
    log:
        f"{R}/logs/predict_sharded/seed{{seed}}.log",
    benchmark:
        f"{R}/benchmarks/predict_sharded/seed{{seed}}.tsv"
    threads: 1
    resources:
        mem_mb=4000,
        runtime=lambda w: 5 * len(SHARDED.get("targets", [])),
    script:
        "../scripts/predict_variants.py"
