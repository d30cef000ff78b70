"""Shim of rule `table`: long data -> one presentation table (CSV + Markdown, emulated ones labelled)."""
import sys

sys.path.insert(0, snakemake.scriptdir)  # noqa: F821 (set by Snakemake)
from _shim import logged  # noqa: E402

smk = snakemake  # noqa: F821
with logged(smk):
    import pandas as pd

    from lumos.report import tables as T

    name = smk.wildcards.name
    data = {k: pd.read_csv(v) for k, v in smk.input.items()}
    tag = "" if smk.params.tag == "default" else f" [tag {smk.params.tag}]"
    extra = f"; overrides {list(smk.params.overrides)}" if smk.params.overrides else ""
    if name == "replay_real":
        df = T.replay_real_table(data[name])
        title = "Replay of real Kineto training traces: measured vs Lumos replay (and dPRO-style), per rank"
    elif name == "replay_microbench":
        df = T.replay_real_table(data[name])
        title = "Replay of real synchronization microbenchmark traces (not training iterations)"
    elif name == "replay_h200":
        df = T.replay_real_table(data[name], source="measured on hardware (H200)")
        title = ("Replay of the H200 traces (measured on hardware: bundled GPT, bf16, one H200): "
                 "measured vs Lumos replay and dPRO-style")
    elif name == "replay_emulated":
        df = T.replay_emulated_table(data[name])
        title = "Replay accuracy on emulated runs (emulated): Lumos vs dPRO-style, mean over seeds with 95% CI"
    elif name in ("scaleout", "variants"):
        df = T.prediction_table(data[name])
        what = "the nine scale-out counterfactuals (Fig. 7 analogue) and TP changes from the 15B 2x2x4 base" \
            if name == "scaleout" \
            else "architecture variants V1-V4 from the 15B 2x2x4 base (Fig. 8 analogue)"
        title = f"Prediction vs emulated actual (emulated): {what}, mean over seeds with 95% CI"
    elif name == "speed":
        df = T.prediction_table(data[name])
        title = ("Faster / slower hardware and micro-batch-size what-ifs vs the emulated actual (emulated): the "
                 "base re-emulated with compute (peak FLOP/s, HBM) or collective bandwidth (NVLink, NICs) scaled, "
                 "or another micro-batch size, mean over seeds")
    elif name == "sharded_dp":
        df = T.prediction_table(data[name])
        title = ("Sharded data parallelism (emulated): DP and PP changes of runs emulated with FSDP2 FULL_SHARD "
                 "(training.dp_sharding=fsdp) or Megatron's distributed optimizer (zero1), `lumos predict` from the "
                 "base of the same mode vs the emulated actual, and the strategy change FULL_SHARD -> SHARD_GRAD_OP "
                 "(`--fsdp-strategy shard_grad_op` from the FULL_SHARD base vs runs emulated with fsdp_grad_op), "
                 "mean over seeds")
    elif name == "from_one_gpu":
        df = T.prediction_table(data[name])
        title = ("Your own run, scaled (emulated): the scale-out and TP targets predicted from a single-GPU and a "
                 "single-host base of the same model, micro-batch and sequence (the collectives the base lacks added "
                 "by `lumos predict` and timed by the h100_roce cluster profile, or, `+ nccl-tests`, fitted on the emulated "
                 "cluster's nccl-tests output), beside the same targets from the "
                 "multi-stage base, each against its emulated actual, mean over seeds")
    elif name == "llama":
        df = T.prediction_table(data[name])
        title = ("Llama-style what-ifs (emulated): PP, DP, TP, width, KV-head and layer changes predicted from an "
                 "emulated Llama 3 8B 2x2x4 base (grouped-query attention, SwiGLU, RMSNorm, RoPE) vs the emulated "
                 "actual, mean over seeds")
    elif name == "schedules":
        df = T.prediction_table(data[name])
        title = ("Pipeline schedules and context parallelism (emulated): Megatron's interleaved 1F1B (vV: V model "
                 "chunks per stage, batched exchange) from an emulated Llama 3 8B base, its chunks per stage (V), its "
                 "schedule to and from 1F1B, and PP, DP and TP changes of an interleaved base; context parallelism (cC: "
                 "C ranks per sequence, Llama 3's all-gather of keys and values), its degree and DP, PP, TP changes of a "
                 "CP base; DP, TP and PP changes of a torchtitan FSDP2 + TP base (every rank emulated), and DP, TP, PP "
                 "and layer changes of one with per-layer selective AC (-torchtitan_sac2: every 2nd block checkpointed); "
                 "the CP degree "
                 "and a DP change of a ring-form CP base (-ring: Transformer Engine's p2p ring); V, PP and DP changes "
                 "of an interleaved base with Megatron's overlapped exchange (-overlap: --overlap-p2p-communication); "
                 "predicted vs the "
                 "emulated actual, mean over seeds")
    elif name == "ablation":
        df = T.ablation_summary(data[name])
        title = "Ablation of the execution graph (real traces and emulated runs, emulated rows marked)"
    elif name == "ablation_by_trace":
        df = T.ablation_by_source(data[name])
        title = ("Ablation per trace (real traces; emulated runs marked emulated): every variant on every "
                 "shipped real training trace and emulated run; random drops: mean and 95% CI over seeds")
    elif name == "statistics":
        preds = [data[k] for k in ("scaleout", "variants") if k in data]
        df = T.statistics_table(data.get("replay_emulated"), preds)
        title = ("Run-to-run spread of the actual iteration time vs error (emulated): "
                 "beyond_noise = mean |error| > 2 x CV")
    else:
        raise ValueError(f"unknown table {name!r}")
    if df.empty:
        raise ValueError(f"table {name} came out empty")
    if name.startswith("replay_"):
        title += ("; iteration = the step period for Lumos (step start to next step start), the GPU span for the "
                  "dPRO-style baseline (it has no CPU side)")
    T.write_table(df, smk.output.csv, smk.output.md, title + tag + extra)
    print(T.to_markdown(df, title))
