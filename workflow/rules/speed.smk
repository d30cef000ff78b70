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


rule emulate_speed:
    input:
        config=lambda w: hydra_inputs("emulate", speed_base().emulate_overrides()),
    output:
        manifest=f"{R}/emulated_speed/{{variant}}/seed{{seed}}/manifest.json",
        resolved=f"{R}/emulated_speed/{{variant}}/seed{{seed}}/config.resolved.yaml",
    params:
        overrides=lambda w: job_overrides("emulate", speed_base().emulate_overrides() + [f"seed={w.seed}"]
                                          + ([f"model.micro_batch_size={SPEED['variants'][w.variant]['micro_batch']}"]
                                             if "micro_batch" in SPEED["variants"][w.variant] else [])),
        scale=lambda w: {**{k: float(SPEED["variants"][w.variant].get("compute", 1.0)) for k in SPEED_COMPUTE},
                         **{k: float(SPEED["variants"][w.variant].get("network", 1.0)) for k in SPEED_NETWORK}},
    log:
        f"{R}/logs/emulate_speed/{{variant}}/seed{{seed}}.log",
    threads: 1
    resources:
        mem_mb=3000,
        runtime=20,
    script:
        "../scripts/emulate_speed.py"


rule predict_speed:
    input:
        base=lambda w: f"{R}/emulated/{SPEED['base']}/seed{w.seed}/manifest.json",
        actual=f"{R}/emulated_speed/{{variant}}/seed{{seed}}/manifest.json",
    output:
        json=f"{R}/predict_speed/{{variant}}/seed{{seed}}.json",
    params:
        flags=lambda w: ["--compute-speed", str(SPEED["variants"][w.variant].get("compute", 1.0)),
                         "--network-speed", str(SPEED["variants"][w.variant].get("network", 1.0))]
                        + (["--micro-batch", str(SPEED["variants"][w.variant]["micro_batch"])]
                           if "micro_batch" in SPEED["variants"][w.variant] else []),
    log:
        f"{R}/logs/predict_speed/{{variant}}/seed{{seed}}.log",
    threads: 1
    resources:
        mem_mb=3000,
        runtime=20,
    script:
        "../scripts/predict_speed.py"
