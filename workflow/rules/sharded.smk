# Sharded data parallelism (FSDP / ZeRO), checked on the emulator (emulated): for each emulator mode
# (training.dp_sharding: fsdp = FSDP2 FULL_SHARD, zero1 = Megatron's distributed optimizer) the base and
# every target emulated in that mode, and `lumos predict BASE --tp T --pp P --dp D` from the base of the
# same mode and seed against the target's emulated actual. A strategy change (`strategies`: fsdp_grad_op =
# FSDP2 SHARD_GRAD_OP) is predicted from the FULL_SHARD base with `--fsdp-strategy` against runs emulated
# with the new strategy.

SHARDED = config.get("sharded") or {}
SHARDED_MODES = dict(SHARDED.get("modes") or {})
SHARDED_STRATEGIES = dict(SHARDED.get("strategies") or {})
MODE_LABEL = {"fsdp": "FSDP", "zero1": "ZeRO-1", "fsdp_grad_op": "SHARD_GRAD_OP"}
# strategy mode -> (the mode whose base it is predicted from, the flags that change the strategy)
STRATEGY_FROM = {"fsdp_grad_op": ("fsdp", ["--fsdp-strategy", "shard_grad_op"])}


def sharded_base():
    return pc.parse_run(SHARDED["base"])


def sharded_runs(mode):
    """label -> run: `base`, then every target shape (TPxPPxDP) of the mode; a strategy mode's targets only
    (its base is the FULL_SHARD one)."""
    base = sharded_base()
    if mode in SHARDED_STRATEGIES:
        return {shape: pc.with_parallel(base, shape) for shape in SHARDED_STRATEGIES[mode]}
    return {"base": base, **{shape: pc.with_parallel(base, shape) for shape in SHARDED_MODES[mode]}}


def sharded_targets():
    """mode -> target shapes: the modes, then the strategy changes."""
    return {**SHARDED_MODES, **SHARDED_STRATEGIES}


def sharded_ranks():
    """Emulate overrides of every sharded run: every rank (each collective waits for its real peers),
    the stage ranks' traces written, at the fine granularity of a stage-rank run (`auto` counts every
    emulated rank and could turn a large target coarse); or the default statistical stand-ins."""
    if SHARDED.get("ranks", "all") != "all":
        return []
    return ["ranks=all", "write_ranks=stage", "emulator.granularity=fine"]


def sharded_seeds():
    return list(range(int(SHARDED.get("seeds", 1))))


def sharded_jsons():
    return [f"{R}/predict_sharded/{mode}/{t}/seed{s}.json" for mode, targets in sharded_targets().items()
            for t in targets for s in sharded_seeds()]


def sharded_group(mode, base, target):
    """What a target changes and the mode: `DP (FSDP)`, `PP (FSDP)`, `DP+PP (ZeRO-1)`, and for a strategy
    change `strategy (FSDP -> SHARD_GRAD_OP)`, `DP+strategy (FSDP -> SHARD_GRAD_OP)`, ..."""
    parts = [name for name, a, b in (("DP", base.dp, target.dp), ("PP", base.pp, target.pp),
                                     ("TP", base.tp, target.tp)) if a != b]
    if mode in STRATEGY_FROM:
        return f"{'+'.join(parts + ['strategy'])} ({MODE_LABEL[STRATEGY_FROM[mode][0]]} -> {MODE_LABEL[mode]})"
    return f"{'+'.join(parts) or 'none'} ({MODE_LABEL.get(mode, mode)})"


def sharded_labels():
    base = sharded_base()
    return [{"label": t, "group": sharded_group(mode, base, pc.with_parallel(base, t)),
             "run": pc.with_parallel(base, t).name, "seed": s}
            for mode, targets in sharded_targets().items() for t in targets for s in sharded_seeds()]


def sharded_flags(shape, mode=None):
    run = pc.with_parallel(sharded_base(), shape)
    return ["--tp", str(run.tp), "--pp", str(run.pp), "--dp", str(run.dp)] + \
        (STRATEGY_FROM[mode][1] if mode in STRATEGY_FROM else [])


# Per mode, one job per seed emulates the base and every target, one predicts the targets (as the speed
# rules do); the rules are made per mode since each has its own targets.
for _mode, _targets in sharded_targets().items():
    _labels = list(sharded_runs(_mode))
    _base_mode = STRATEGY_FROM[_mode][0] if _mode in STRATEGY_FROM else _mode

    rule:
        name: f"emulate_sharded_{_mode}"
        input:
            config=hydra_inputs("emulate", sharded_base().emulate_overrides() + [f"training.dp_sharding={_mode}"]
                                + sharded_ranks()),
        output:
            manifest=[f"{R}/emulated_sharded/{_mode}/{label}/seed{{seed}}/manifest.json" for label in _labels],
            resolved=[f"{R}/emulated_sharded/{_mode}/{label}/seed{{seed}}/config.resolved.yaml" for label in _labels],
        params:
            runs=list(_labels),
            overrides=lambda w, mode=_mode: [job_overrides("emulate", run.emulate_overrides()
                                                           + [f"training.dp_sharding={mode}", f"seed={w.seed}"]
                                                           + sharded_ranks())
                                             for run in sharded_runs(mode).values()],
        log:
            f"{R}/logs/emulate_sharded/{_mode}/seed{{seed}}.log",
        benchmark:
            f"{R}/benchmarks/emulate_sharded/{_mode}/seed{{seed}}.tsv"
        threads: 1
        resources:
            mem_mb=4000,
            runtime=10 * len(_labels),
        script:
            "../scripts/emulate.py"

    rule:
        name: f"predict_sharded_{_mode}"
        input:
            base=f"{R}/emulated_sharded/{_base_mode}/base/seed{{seed}}/manifest.json",
            actual=[f"{R}/emulated_sharded/{_mode}/{t}/seed{{seed}}/manifest.json" for t in _targets],
        output:
            json=[f"{R}/predict_sharded/{_mode}/{t}/seed{{seed}}.json" for t in _targets],
        params:
            targets=list(_targets),
            flags=[sharded_flags(t, _mode) for t in _targets],
        log:
            f"{R}/logs/predict_sharded/{_mode}/seed{{seed}}.log",
        benchmark:
            f"{R}/benchmarks/predict_sharded/{_mode}/seed{{seed}}.tsv"
        threads: 1
        resources:
            mem_mb=4000,
            runtime=5 * len(_targets),
        script:
            "../scripts/predict.py"


# Measured on this machine (CPU): FSDP2 and DDP over gloo (resources/traces/fsdp_cpu, fsdp_cpu_sizes,
# dp_cpu_sizes). The DP changes a host-collective base is predicted for (lumos/transform/dp_host.py): N
# ranks -> 1 (`lumos predict BASE --dp 1`), and 1 -> 2 or 4 with what the ranks add fitted on other model
# sizes (`--dp-calibration`), from each base recording against every recording of the target.
FSDP_CPU = config.get("fsdp_cpu") or {}


def fsdp_cpu_bases(label):
    t = fsdp_cpu_target(label)
    return [str(Path(t["dir"]) / b) for b in t["bases"]]


def fsdp_cpu_actual(label):
    t = fsdp_cpu_target(label)
    return fsdp_cpu_dirs(t["config"], t["dir"])


def fsdp_cpu_calibration_flags(label):
    """The target's calibration pairs as `--dp-calibration AT_DP AT_ONE`."""
    return [x for pair in fsdp_cpu_calibration(label) for x in ("--dp-calibration", *pair)]


rule predict_fsdp_cpu:
    input:
        base=lambda w: recorded_files(fsdp_cpu_bases(w.label)),
        actual=lambda w: recorded_files(fsdp_cpu_actual(w.label)),
        calibration=lambda w: recorded_files([d for pair in fsdp_cpu_calibration(w.label) for d in pair]),
    output:
        json=f"{R}/predict_fsdp_cpu/{{label}}.json",
    params:
        bases=lambda w: fsdp_cpu_bases(w.label),
        actual=lambda w: fsdp_cpu_actual(w.label),
        flags=lambda w: list(fsdp_cpu_target(w.label)["flags"]),
        extra=lambda w: fsdp_cpu_calibration_flags(w.label),
        samples=0,
        steps_pooled=FSDP_CPU.get("steps_pooled", False),
        source="measured on this machine (CPU)",
    wildcard_constraints:
        label=r"[A-Za-z0-9_.+-]+",
    log:
        f"{R}/logs/predict_fsdp_cpu/{{label}}.log",
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    script:
        "../scripts/predict_recorded.py"


rule table_fsdp_cpu_whatif:
    input:
        [f"{R}/predict_fsdp_cpu/{label}.json" for label in FSDP_CPU.get("targets", {})],
    output:
        csv=reported(f"{R}/tables/fsdp_cpu_whatif.csv", "tables", "fsdp_cpu_whatif"),
        md=f"{R}/tables/fsdp_cpu_whatif.md",
    params:
        calibration=[],
        title=("FSDP2 and DDP over gloo, measured on this machine (CPU; the bundled GPT): FSDP2 2 ranks -> 1 "
               "(`lumos predict BASE --dp 1`; one_rank: resources/traces/fsdp_cpu, one_rank_pinned: "
               "resources/traces/fsdp_cpu_sizes), 1 -> 2 (two_ranks: `--dp 2 --dp-calibration`, what 2 ranks add "
               "in each FSDP2 hook fitted on two other model sizes recorded at 1 and 2 ranks in the same rounds, "
               "resources/traces/fsdp_cpu_sizes) and 1 -> 4 (four_ranks, resources/traces/dp_cpu_sizes); DDP "
               "2 ranks -> 1 (ddp_one_rank), 1 -> 2 and 1 -> 4 (ddp_two_ranks, ddp_four_ranks: what the ranks add "
               "per bucket fitted on two other sizes; resources/traces/dp_cpu_sizes, recorded on the idle "
               "shared the 2 cores); predicted from each base recording vs the mean of every profiled "
               "step of every rank of the target's recordings; spread = (max - min) / mean of those; steps from = "
               "host work the median over the base's own profiled steps, or over all base recordings' "
               "(`--other-recordings`)"),
    log:
        f"{R}/logs/table/fsdp_cpu_whatif.log",
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    script:
        "../scripts/table_recorded.py"
