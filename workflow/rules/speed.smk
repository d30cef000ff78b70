# Faster / slower hardware and other micro-batch sizes, checked on the emulator (emulated): the base run
# re-emulated with the cluster's compute (peak FLOP/s and HBM bandwidth) or collective bandwidth (NVLink
# and NICs) scaled, or with another micro-batch size (same micro-batch count), and
# `lumos predict BASE --compute-speed X --network-speed Y [--micro-batch M]` from the unchanged base.

SPEED = config.get("speed", {})
SPEED_COMPUTE = ("peak_bf16_tflops", "hbm_tb_s")
SPEED_NETWORK = ("nvlink_busbw_gb_s", "nvlink_p2p_gb_s", "nic_gbps")


def speed_base():
    return pc.parse_run(SPEED["base"])


def speed_seeds():
    return list(range(int(SPEED.get("seeds", 1))))


def speed_jsons():
    return [f"{R}/predict_speed/{v}/seed{s}.json" for v in SPEED.get("variants", {}) for s in speed_seeds()]


def speed_flags(variant):
    v = SPEED["variants"][variant]
    return (["--compute-speed", str(v.get("compute", 1.0)), "--network-speed", str(v.get("network", 1.0))]
            + (["--micro-batch", str(v["micro_batch"])] if "micro_batch" in v else []))


# One job per seed emulates every variant, one predicts them (start-up paid once per batch:
# docs/notes/2026-12-02-per-job-cost.md).
rule emulate_speed:
    input:
        config=lambda w: hydra_inputs("emulate", speed_base().emulate_overrides()),
    output:
        manifest=[f"{R}/emulated_speed/{v}/seed{{seed}}/manifest.json" for v in SPEED.get("variants", {})],
        resolved=[f"{R}/emulated_speed/{v}/seed{{seed}}/config.resolved.yaml" for v in SPEED.get("variants", {})],
    params:
        runs=list(SPEED.get("variants", {})),
        overrides=lambda w: [job_overrides("emulate", speed_base().emulate_overrides() + [f"seed={w.seed}"]
                                           + ([f"model.micro_batch_size={v['micro_batch']}"] if "micro_batch" in v
                                              else []))
                             for v in SPEED["variants"].values()],
        scale=lambda w: [{**{k: float(v.get("compute", 1.0)) for k in SPEED_COMPUTE},
                          **{k: float(v.get("network", 1.0)) for k in SPEED_NETWORK}}
                         for v in SPEED["variants"].values()],
    log:
        f"{R}/logs/emulate_speed/seed{{seed}}.log",
    benchmark:
        f"{R}/benchmarks/emulate_speed/seed{{seed}}.tsv"
    threads: 1
    resources:
        mem_mb=3000,
        runtime=lambda w: 10 * len(SPEED["variants"]),
    script:
        "../scripts/emulate.py"


rule predict_speed:
    input:
        base=lambda w: f"{R}/emulated/{SPEED['base']}/seed{w.seed}/manifest.json",
        actual=[f"{R}/emulated_speed/{v}/seed{{seed}}/manifest.json" for v in SPEED.get("variants", {})],
    output:
        json=[f"{R}/predict_speed/{v}/seed{{seed}}.json" for v in SPEED.get("variants", {})],
    params:
        targets=list(SPEED.get("variants", {})),
        flags=[speed_flags(v) for v in SPEED.get("variants", {})],
    log:
        f"{R}/logs/predict_speed/seed{{seed}}.log",
    benchmark:
        f"{R}/benchmarks/predict_speed/seed{{seed}}.tsv"
    threads: 1
    resources:
        mem_mb=3000,
        runtime=lambda w: 5 * len(SPEED["variants"]),
    script:
        "../scripts/predict.py"
