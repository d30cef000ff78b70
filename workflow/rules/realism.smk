# Is the emulator realistic? Every published measurement it can be checked against (resources/measurements/),
# emulated and compared: emulated vs measured iteration time (and, where published, the breakdown).
# vTrain's single-node A100 rows run as `realism.shards` single-core jobs; Fig. 1 and Fig. 7 as one job; each
# multi-node Selene data set (Narayanan et al. SC'21 Tables 1-2, Korthikanti et al. 2022) as one job.

REALISM = config.get("realism") or {}
REALISM_PAPER = [d for d in ("fig1", "fig7") if d in REALISM.get("datasets", [])]
REALISM_MULTI = [d for d in ("sc21_table1", "sc21_table2", "korthikanti_2022") if d in REALISM.get("datasets", [])]


def realism_shards():
    if "vtrain_single" not in REALISM.get("datasets", []):
        return []
    return list(range(int(REALISM.get("shards", 8))))


def realism_csvs():
    return ([f"{R}/realism/vtrain_single/shard{k}.csv" for k in realism_shards()]
            + ([f"{R}/realism/paper.csv"] if REALISM_PAPER else [])
            + [f"{R}/realism/multinode/{d}.csv" for d in REALISM_MULTI])


def realism_inputs(datasets):
    """What the points of these data sets read: the Hydra group files their emulations compose (so a
    recalibrated cluster or training config re-runs them) and the measurement files."""
    from lumos.emulator import realism as rz

    files = []
    for ds in datasets:
        files += hydra_inputs("emulate", list(rz.dataset_points(ds)[0].overrides))
        files += [pc._display(p) for p in rz.dataset_files(ds)]
    return list(dict.fromkeys(files))


rule realism_vtrain:
    input:
        realism_inputs(["vtrain_single"]) if realism_shards() else [],
    output:
        csv=f"{R}/realism/vtrain_single/shard{{shard}}.csv",
    params:
        sample=REALISM.get("vtrain_sample"),
        shards=len(realism_shards()),
        overrides=job_overrides("emulate"),
    wildcard_constraints:
        shard=r"\d+",
    log:
        f"{R}/logs/realism/vtrain_single/shard{{shard}}.log",
    benchmark:
        f"{R}/benchmarks/realism/vtrain_single/shard{{shard}}.tsv"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=30,
    script:
        "../scripts/realism.py"


rule realism_paper:
    input:
        realism_inputs(REALISM_PAPER) if REALISM_PAPER else [],
    output:
        csv=f"{R}/realism/paper.csv",
    params:
        datasets=REALISM_PAPER,
        overrides=job_overrides("emulate"),
    log:
        f"{R}/logs/realism/paper.log",
    benchmark:
        f"{R}/benchmarks/realism/paper.tsv"
    threads: 1
    resources:
        mem_mb=4000,   # as rule emulate: the 175B emulation (about 0.4 GB, 35 s)
        runtime=20,
    script:
        "../scripts/realism.py"


rule realism_multinode:
    """A multi-node A100 data set (NVIDIA Selene, 8-3072 GPUs), one job each: 1-2 CPU-minutes."""
    input:
        lambda w: realism_inputs([w.dataset]),
    output:
        csv=f"{R}/realism/multinode/{{dataset}}.csv",
    params:
        datasets=lambda w: [w.dataset],
        overrides=job_overrides("emulate"),
    wildcard_constraints:
        dataset="|".join(REALISM_MULTI) or "none",
    log:
        f"{R}/logs/realism/multinode/{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/realism/multinode/{{dataset}}.tsv"
    threads: 1
    resources:
        mem_mb=4000,
        runtime=20,
    script:
        "../scripts/realism.py"


rule table_emulator_realism:
    input:
        realism_csvs(),
    output:
        data=f"{R}/data/emulator_realism.csv",
        csv=reported(f"{R}/tables/emulator_realism.csv", "tables", "emulator_realism"),
        md=f"{R}/tables/emulator_realism.md",
    params:
        tag=TAG,
        overrides=job_overrides("emulate"),
    log:
        f"{R}/logs/table/emulator_realism.log",
    benchmark:
        f"{R}/benchmarks/table/emulator_realism.tsv"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    script:
        "../scripts/table_realism.py"
