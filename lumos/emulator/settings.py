"""Typed, validated view of the composed Hydra config, so the hot loops read attributes, not dicts."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

from omegaconf import DictConfig, OmegaConf


class SettingsError(ValueError):
    """A configuration the emulator cannot run (printed as one line by the CLI)."""


@dataclass(frozen=True)
class ModelShape:
    name: str
    num_layers: int
    hidden: int
    ffn_hidden: int
    num_heads: int
    head_dim: int
    vocab_size: int
    seq_length: int
    micro_batch_size: int
    num_microbatches: int
    global_batch_size: int
    num_kv_heads: int = 0           # grouped-query attention's key/value heads (0: as many as num_heads)
    ffn_activation: str = "gelu"    # gelu: FC1, GeLU, FC2; swiglu: gate and up (one GEMM), SiLU x up, down
    norm: str = "layernorm"         # layernorm | rmsnorm
    rope: bool = False              # rotary embeddings applied to the queries and keys
    moe: MoEShape | None = None     # mixture-of-experts MLPs (every layer's); None: dense


@dataclass(frozen=True)
class MoEShape:
    """A mixture-of-experts MLP as Megatron-Core builds it (megatron/core/transformer/moe/moe_layer.py): a top-k
    router over `experts` experts of width `ffn_hidden`, an optional shared expert, and the imbalance the
    router's choices are drawn from (`lumos/emulator/routing.py`)."""
    experts: int
    top_k: int
    ffn_hidden: int
    shared_ffn_hidden: int = 0      # the shared expert's width (0: none)
    imbalance: str = "dirichlet"    # uniform | dirichlet | zipf
    imbalance_param: float = 8.0    # dirichlet: concentration per expert; zipf: exponent
    capacity_factor: float = 0.0    # 0: dropless; else each expert takes at most cf x its fair share of a rank's tokens
    pad_to_capacity: bool = False   # with a capacity factor: every expert's input padded to its capacity


@dataclass(frozen=True)
class Settings:
    model: ModelShape
    tp: int
    pp: int
    dp: int
    seed: int
    ranks: str
    legacy: bool
    step: int
    base_ts_us: float
    cluster: SimpleNamespace
    knobs: SimpleNamespace  # emulator/default.yaml, then cluster.emulator, then training.emulator
    progress: str
    training: SimpleNamespace = None   # training/*.yaml: recompute, DP all-reduce placement, schedule
    write_ranks: str = "emulated"      # emulated: a trace per emulated rank; stage: the stage ranks only
    vp: int = 1                        # model chunks per pipeline rank (Megatron's interleaved 1F1B when > 1)
    cp: int = 1                        # context-parallel ranks: each holds 1/cp of every sequence
    stage_layers: tuple = ()           # transformer layers of each pipeline stage (`pipeline_split`)
    chunk_layers: tuple = ()           # per stage, the transformer layers of each of its model chunks
    ep: int = 1                        # expert-parallel ranks: each holds 1/ep of every MoE layer's experts

    def chunks_of(self, stage: int) -> tuple:
        """Layers of each model chunk of `stage` (one chunk unless interleaved)."""
        if self.chunk_layers:
            return self.chunk_layers[stage]
        n = self.stage_layers[stage] if self.stage_layers else self.model.num_layers // self.pp
        return (n // self.vp,) * self.vp

    @property
    def world_size(self) -> int:
        return self.tp * self.pp * self.dp * self.cp


def _ns(obj):
    if isinstance(obj, dict):
        return SimpleNamespace(**{k: _ns(v) for k, v in obj.items()})
    return obj


def _merge(base: dict, over: dict, where: str) -> dict:
    """Knob overrides: every key must exist in the base (a typo must not pass silently)."""
    out = dict(base)
    for k, v in (over or {}).items():
        if k not in base:
            raise SettingsError(f"{where}.{k} is not an emulator knob (known: {', '.join(sorted(base))})")
        out[k] = _merge(base[k], v, f"{where}.{k}") if isinstance(v, dict) else v
    return out


# none: gradients all-reduced in buckets; fsdp: FSDP2 FULL_SHARD; fsdp_grad_op: FSDP2 with
# reshard_after_forward=False (SHARD_GRAD_OP); zero1: Megatron's distributed optimizer; fsdp_default:
# torchtitan's policy, fsdp without pipeline parallelism and fsdp_grad_op with it (`from_config` resolves it)
DP_SHARDING = ("none", "fsdp", "fsdp_grad_op", "zero1", "fsdp_default")
TRAINING_DEFAULT = {"name": "megatron_lm", "recompute": "none", "dp_allreduce": "bucketed",
                    "after_backward_bucket_mparams": 500.0, "schedule": "1f1b", "ffn_ratio": None,
                    "attention": "flash", "dp_sharding": "none", "cp_form": "allgather",
                    "moe_dispatcher": "alltoall", "moe_grouped_gemm": True, "ac_every": None, "overlap_p2p": False}
MOE_DISPATCHERS = ("alltoall", "allgather", "deepep")
# none; full: every layer's forward re-run in its backward (Megatron's --recompute-granularity full, torchtitan's
# FullAC); selective_op: torchtitan's SelectiveAC, the forward's outputs of attention and of every other matmul
# kept, the rest re-run (torchtitan/distributed/activation_checkpoint.py, `SelectiveAC._get_custom_policy`);
# selective_layer: torchtitan's per-layer selective AC (activation_checkpoint.py at 1f029641b, `_apply_layer_sac`,
# `selective_ac_option` a number N, removed upstream in 114151ad4): every N-th block (training.ac_every) of a
# rank fully checkpointed, the others not (`checkpointed_layers`)
RECOMPUTE = ("none", "full", "selective_op", "selective_layer")
CP_FORMS = ("allgather", "ring")
MOE_IMBALANCE = ("uniform", "dirichlet", "zipf")


def _training(c: dict) -> dict:
    t = {**TRAINING_DEFAULT, **{k: v for k, v in (c.get("training") or {}).items() if k != "emulator"}}
    if t["recompute"] not in RECOMPUTE:
        raise SettingsError(f"training.recompute must be one of {', '.join(RECOMPUTE)}, got {t['recompute']!r}")
    _check_ac_every(t)
    if t["dp_allreduce"] not in ("bucketed", "after_backward"):
        raise SettingsError(f"training.dp_allreduce must be 'bucketed' or 'after_backward', got {t['dp_allreduce']!r}")
    if t["attention"] not in ("flash", "unfused"):
        raise SettingsError(f"training.attention must be 'flash' or 'unfused', got {t['attention']!r}")
    if t["dp_sharding"] not in DP_SHARDING:
        raise SettingsError(f"training.dp_sharding must be one of {', '.join(DP_SHARDING)}, got {t['dp_sharding']!r}")
    if t["dp_sharding"] != "none" and t["dp_allreduce"] != "bucketed":
        raise SettingsError(f"training.dp_sharding={t['dp_sharding']} reduces the gradients as the backward makes "
                            "them; it takes no dp_allreduce=after_backward")
    if t["cp_form"] not in CP_FORMS:
        raise SettingsError(f"training.cp_form must be one of {', '.join(CP_FORMS)}, got {t['cp_form']!r} (allgather: "
                            "Llama 3's all-gather of keys and values; ring: Megatron / Transformer Engine's p2p ring)")
    if t["moe_dispatcher"] not in MOE_DISPATCHERS:
        raise SettingsError(f"training.moe_dispatcher must be one of {', '.join(MOE_DISPATCHERS)}, "
                            f"got {t['moe_dispatcher']!r}")
    if not isinstance(t["moe_grouped_gemm"], bool):
        raise SettingsError(f"training.moe_grouped_gemm must be true or false, got {t['moe_grouped_gemm']!r}")
    if not isinstance(t["overlap_p2p"], bool):
        raise SettingsError(f"training.overlap_p2p must be true or false, got {t['overlap_p2p']!r}")
    if t["schedule"] != "1f1b":
        raise SettingsError(f"training.schedule {t['schedule']!r} is not emulated (only 1f1b)")
    return t


def _check_ac_every(t: dict) -> None:
    """training.ac_every: the N of per-layer selective AC, an integer >= 1, given with recompute=selective_layer
    and only with it (torchtitan's `selective_ac_option` "0" wraps every block: that is recompute=full here)."""
    n = t["ac_every"]
    if t["recompute"] != "selective_layer":
        if n is not None:
            raise SettingsError(f"training.ac_every={n!r} needs training.recompute=selective_layer "
                                f"(got recompute={t['recompute']})")
        return
    if n is None:
        raise SettingsError("training.recompute=selective_layer needs training.ac_every (checkpoint every N-th block)")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise SettingsError(f"training.ac_every must be an integer >= 1 (checkpoint every N-th block), got {n!r}")


def checkpointed_layers(layers, every: int) -> frozenset:
    """The layers of `layers` (a rank's, in the order its model parts build them) that torchtitan's per-layer
    selective AC wraps in checkpoint_wrapper: `_apply_layer_sac` increments a process-wide count before it
    tests `count % N == 0`, so the N-th, 2N-th, ... block a rank builds, counted from 1 (layer N - 1 of a
    single stage, not layer 0); with PP each stage counts its own blocks."""
    return frozenset(l for k, l in enumerate(layers, 1) if k % every == 0)


MICROBATCH_RULES = ("tp_x_pp", "fixed")

# the switchable multi-node physics (config/emulator/default.yaml says where each comes from)
KNOB_CHOICES = {("comm", "algorithm"): ("hier_ring", "nccl"),
                ("comm", "ring_form"): ("serial", "pipelined"),
                ("comm", "gather_ring_form"): ("serial", "pipelined"),
                ("comm", "placement"): ("rail", "shared"),
                ("schedule", "grad_norm_group"): ("tp", "model_parallel"),
                ("schedule", "p2p_scatter_gather"): (False, True)}


def _check_choices(knobs: dict) -> None:
    for (group, key), allowed in KNOB_CHOICES.items():
        v = knobs[group][key]
        if v not in allowed or (isinstance(allowed[0], bool) and not isinstance(v, bool)):
            raise SettingsError(f"emulator.{group}.{key} must be one of {', '.join(map(str, allowed))}, got {v!r}")


def _microbatches(m: dict, mbs: int, tp: int, pp: int, dp: int) -> tuple[int, int]:
    """Micro-batches per pipeline and the global batch, as (num_microbatches, global_batch_size).

    Precedence: `global_batch_size` (nmb = gbs / (mbs * dp)) > an explicit `num_microbatches` >
    `microbatch_rule`. The rule `tp_x_pp` is the Lumos paper's scale-out protocol (MLSys 2025, Fig. 4
    caption: 1F1B with "the number of micro-batches equal to TP x PP"), so a PP change keeps the
    pipeline as full as the base's and a DP change keeps each replica's work (weak scaling). `fixed`
    (the default of a model config that names no rule) needs `num_microbatches`.
    """
    rule = str(m.get("microbatch_rule") or "fixed")
    if rule not in MICROBATCH_RULES:
        raise SettingsError(f"model.microbatch_rule must be one of {', '.join(MICROBATCH_RULES)}, got {rule!r}")
    if m.get("global_batch_size"):
        gbs = int(m["global_batch_size"])
        if gbs % (mbs * dp):
            raise SettingsError(f"global_batch_size={gbs} is not a multiple of micro_batch_size*dp={mbs * dp}")
        nmb = gbs // (mbs * dp)
    elif m.get("num_microbatches") is not None:
        nmb = int(m["num_microbatches"])
    elif rule == "fixed":
        raise SettingsError("model.microbatch_rule=fixed needs model.num_microbatches "
                            "(or model.global_batch_size); neither is set")
    else:
        nmb = tp * pp
    if nmb < 1:
        raise SettingsError("need at least one micro-batch per pipeline")
    return nmb, nmb * mbs * dp


def from_config(cfg: DictConfig) -> Settings:
    """Check the parallel layout against the model and derive micro-batch counts."""
    c = OmegaConf.to_container(cfg, resolve=True)
    m, par = dict(c["model"]), c["parallel"]
    training = _training(c)
    if training["ffn_ratio"]:
        m["ffn_hidden"] = int(round(float(training["ffn_ratio"]) * int(m["hidden"])))
    knobs = _merge(c["emulator"], (c["cluster"].get("emulator") or {}), "cluster.emulator")
    knobs = _merge(knobs, ((c.get("training") or {}).get("emulator") or {}), "training.emulator")
    _check_choices(knobs)
    tp, pp, dp = int(par["tp"]), int(par["pp"]), int(par["dp"])
    if min(tp, pp, dp) < 1:
        raise SettingsError(f"parallel degrees must be >= 1, got tp={tp} pp={pp} dp={dp}")
    gph = int(c["cluster"]["gpus_per_host"])
    if gph % tp and tp % gph:
        raise SettingsError(f"tp={tp} must divide gpus_per_host={gph} or be a multiple of it "
                            f"(a TP group fills whole hosts)")
    if training["dp_sharding"] == "fsdp_default":   # torchtitan/distributed/fsdp.py, reshard_after_forward "default"
        training["dp_sharding"] = "fsdp" if pp == 1 else "fsdp_grad_op"
    vp = 1 if par.get("vp") is None else int(par["vp"])     # 0 is refused below, never read as "the default"
    cp = 1 if par.get("cp") is None else int(par["cp"])
    if cp < 1:
        raise SettingsError(f"parallel.cp must be >= 1, got {cp}")
    if cp > 1 and int(m["seq_length"]) % (2 * cp):
        raise SettingsError(f"parallel.cp={cp} splits each sequence into 2 x cp chunks (Megatron's load-balanced causal "
                            f"split): model.seq_length={m['seq_length']} is not a multiple of {2 * cp}")
    if cp > 1 and training["attention"] != "flash":
        raise SettingsError("parallel.cp > 1 needs training.attention=flash (context parallelism splits flash attention)")
    chunk_layers = chunk_split(int(m["num_layers"]), pp, vp, par.get("first_stage_layers"),
                               par.get("last_stage_layers"), bool(par.get("embedding_in_split")),
                               bool(par.get("loss_in_split")))
    stage_layers = tuple(sum(c) for c in chunk_layers)
    for key in ("hidden", "ffn_hidden", "vocab_size", "num_heads"):
        if m[key] % tp:
            raise SettingsError(f"tp={tp} must divide model.{key}={m[key]}")
    mbs = int(m["micro_batch_size"])
    nmb, gbs = _microbatches(m, mbs, tp, pp, dp)
    if vp > 1:
        _check_interleaved(nmb, pp, training)
    elif training["overlap_p2p"]:   # megatron/training/arguments.py turns it off without the interleaved schedule
        raise SettingsError(f"training.overlap_p2p=true needs the interleaved schedule (parallel.vp > 1), got vp={vp}")
    if training["overlap_p2p"] and knobs["schedule"]["p2p_scatter_gather"]:
        raise SettingsError("training.overlap_p2p=true with emulator.schedule.p2p_scatter_gather is not emulated "
                            "(the overlapped exchange posts whole activations)")
    ranks = str(c.get("ranks", "stage"))
    if ranks not in ("stage", "all"):
        raise SettingsError(f"ranks must be 'stage' or 'all', got {ranks!r}")
    write_ranks = str(c.get("write_ranks", "emulated"))
    if write_ranks not in ("emulated", "stage"):
        raise SettingsError(f"write_ranks must be 'emulated' or 'stage', got {write_ranks!r}")
    kv = int(m.get("num_kv_heads") or m["num_heads"])
    if int(m["num_heads"]) % kv or kv % tp:
        raise SettingsError(f"model.num_kv_heads={kv} must divide num_heads={m['num_heads']} and be a multiple of "
                            f"tp={tp} (Megatron-Core splits the query groups over the TP ranks)")
    for key, allowed in (("ffn_activation", ("gelu", "swiglu")), ("norm", ("layernorm", "rmsnorm"))):
        if str(m.get(key) or allowed[0]) not in allowed:
            raise SettingsError(f"model.{key} must be one of {', '.join(allowed)}, got {m.get(key)!r}")
    shape = ModelShape(name=str(m["name"]), num_layers=int(m["num_layers"]), hidden=int(m["hidden"]),
                       ffn_hidden=int(m["ffn_hidden"]), num_heads=int(m["num_heads"]),
                       head_dim=int(m["head_dim"]), vocab_size=int(m["vocab_size"]),
                       seq_length=int(m["seq_length"]), micro_batch_size=mbs, num_microbatches=nmb,
                       global_batch_size=gbs, num_kv_heads=kv if kv != int(m["num_heads"]) else 0,
                       ffn_activation=str(m.get("ffn_activation") or "gelu"), norm=str(m.get("norm") or "layernorm"),
                       rope=bool(m.get("rope", False)), moe=_moe(m))
    ep = 1 if par.get("ep") is None else int(par["ep"])
    _check_ep(shape, ep, tp, dp, cp, training)
    tr = c.get("trace", {})
    return Settings(model=shape, tp=tp, pp=pp, dp=dp, seed=int(c.get("seed", 0)), ranks=ranks,
                    legacy=bool(tr.get("legacy", False)), step=int(tr.get("step", 5)),
                    base_ts_us=float(tr.get("base_ts_us", 1.0e9)), cluster=_ns(c["cluster"]),
                    knobs=_ns(knobs), progress=str(c.get("progress", "auto")), training=_ns(training),
                    write_ranks=write_ranks, vp=vp, stage_layers=stage_layers, chunk_layers=chunk_layers, cp=cp, ep=ep)


def _moe(m: dict) -> MoEShape | None:
    """The model's MoE keys, checked; None for a dense model (`moe_num_experts` null or 0)."""
    experts = m.get("moe_num_experts")
    if not experts:
        return None
    experts, k = int(experts), int(m.get("moe_top_k") or 0)
    if experts < 2 or not 1 <= k <= experts:
        raise SettingsError(f"model.moe_num_experts={experts} and moe_top_k={m.get('moe_top_k')!r}: need at least "
                            "2 experts and 1 <= top-k <= experts")
    imb = str(m.get("moe_imbalance") or "dirichlet")
    if imb not in MOE_IMBALANCE:
        raise SettingsError(f"model.moe_imbalance must be one of {', '.join(MOE_IMBALANCE)}, got {imb!r}")
    param = float(m.get("moe_imbalance_param") if m.get("moe_imbalance_param") is not None else 8.0)
    if imb != "uniform" and param <= 0:
        raise SettingsError(f"model.moe_imbalance_param must be > 0 for {imb}, got {param}")
    cf = float(m.get("moe_capacity_factor") or 0.0)
    if cf < 0:
        raise SettingsError(f"model.moe_capacity_factor must be >= 0 (0 or null: dropless), got {cf}")
    pad = bool(m.get("moe_pad_to_capacity", False))
    if pad and not cf:
        raise SettingsError("model.moe_pad_to_capacity needs a model.moe_capacity_factor (Megatron's "
                            "--moe-pad-expert-input-to-capacity acts only with --moe-expert-capacity-factor)")
    ffn = int(m.get("moe_ffn_hidden") or m["ffn_hidden"])
    return MoEShape(experts=experts, top_k=k, ffn_hidden=ffn,
                    shared_ffn_hidden=int(m.get("moe_shared_expert_ffn") or 0),
                    imbalance=imb, imbalance_param=param, capacity_factor=cf, pad_to_capacity=pad)


def _check_ep(shape: ModelShape, ep: int, tp: int, dp: int, cp: int, training: dict) -> None:
    """Expert parallelism as Megatron-Core lays it out with --expert-tensor-parallel-size 1: the EP ranks are
    drawn from a stage's TP x DP ranks (expert data parallelism: TP x DP / EP), so `ep` divides TP x DP and
    the experts."""
    if ep < 1:
        raise SettingsError(f"parallel.ep must be >= 1, got {ep}")
    moe = shape.moe
    if moe is None:
        if ep > 1:
            raise SettingsError(f"parallel.ep={ep} needs a mixture-of-experts model (model.moe_num_experts)")
        return
    if (tp * dp) % ep or moe.experts % ep:
        raise SettingsError(f"parallel.ep={ep} must divide tp x dp = {tp * dp} (the expert-parallel ranks are a "
                            f"stage's TP x DP ranks) and model.moe_num_experts={moe.experts}")
    if cp > 1:
        raise SettingsError("mixture-of-experts with parallel.cp > 1 is not emulated")
    if training["recompute"] == "selective_op":
        raise SettingsError("mixture-of-experts with training.recompute=selective_op is not emulated (which of the "
                            "router's and experts' outputs torchtitan's SelectiveAC keeps is not modelled)")
    if training["dp_sharding"] != "none":
        raise SettingsError(f"mixture-of-experts with training.dp_sharding={training['dp_sharding']} is not emulated "
                            "(the experts' gradients are all-reduced over the expert data-parallel group)")


def pipeline_split(layers: int, pp: int, vp: int = 1, first: int | None = None, last: int | None = None) -> tuple:
    """Transformer layers of each pipeline stage, as Megatron-Core splits them
    (megatron/core/transformer/transformer_block.py, get_num_layers_to_build): `first` / `last` layers on the
    first / last stage where set (num_layers_in_first/last_pipeline_stage), the rest spread evenly over the
    other stages, each stage's layers an equal share for each of its `vp` model chunks."""
    if vp < 1:
        raise SettingsError(f"parallel.vp must be >= 1 (model chunks per pipeline rank), got {vp}")
    if vp > 1 and pp < 3:   # megatron/training/arguments.py: without p2p overlap, two stages would exchange
        # several sends and receives between the same two ranks in one batch
        raise SettingsError(f"parallel.vp={vp} interleaves model chunks over pipeline stages: Megatron's batched "
                            f"(non-overlapped) exchange needs pp > 2, got pp={pp}")
    ends = {0: first, pp - 1: last}
    for where, n in (("first", first), ("last", last)):
        if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
            raise SettingsError(f"parallel.{where}_stage_layers must be a positive integer or null, got {n!r}")
    if pp == 1 and (first is not None or last is not None):
        raise SettingsError("parallel.first_stage_layers / last_stage_layers need pp >= 2")
    fixed = {s: n for s, n in ends.items() if n is not None}
    rest, left = layers - sum(fixed.values()), pp - len(fixed)
    if rest < 0 or (left == 0 and rest) or (left and (rest % left or rest < left)):
        raise SettingsError(f"{layers} layers do not split over pp={pp}" + (
            f" with {first} on the first and {last} on the last stage: the {max(rest, 0)} left must be a positive "
            f"multiple of the {left} other stages" if fixed else " evenly (pp must divide num_layers)"))
    out = tuple(fixed.get(s, rest // left if left else 0) for s in range(pp))
    bad = [s for s, n in enumerate(out) if n % vp]
    if bad:
        raise SettingsError(f"parallel.vp={vp} must divide the layers of every stage; stage {bad[0]} holds "
                            f"{out[bad[0]]}")
    return out


def chunk_split(layers: int, pp: int, vp: int = 1, first: int | None = None, last: int | None = None,
                embedding: bool = False, loss: bool = False) -> tuple:
    """Per stage, the transformer layers of each model chunk. `embedding` / `loss`: the embedding and the
    output and loss count as one layer each in the split (Megatron-Core's account_for_embedding_in_pipeline_split
    and account_for_loss_in_pipeline_split, transformer_block.get_num_layers_to_build): the first chunk of the
    first stage and the last chunk of the last stage then build one transformer layer fewer (Llama 3 405B's
    layout: 126 layers + 2 over 16 stages of 8, 8 chunks of one each, the first only the embedding, the last
    only the output and loss)."""
    if not (embedding or loss):
        return tuple((n // vp,) * vp for n in pipeline_split(layers, pp, vp, first, last))
    if first is not None or last is not None:
        raise SettingsError("parallel.embedding_in_split / loss_in_split take no first_stage_layers / "
                            "last_stage_layers (Megatron-Core refuses the two together)")
    slots = layers + embedding + loss
    per_chunk = pipeline_split(slots, pp, vp)[0] // vp
    out = [[per_chunk] * vp for _ in range(pp)]
    out[0][0] -= embedding
    out[-1][-1] -= loss
    if min(out[0][0], out[-1][-1]) < 0:
        raise SettingsError(f"{layers} layers with the embedding and loss in the split leave no room in the "
                            "first or last chunk")
    return tuple(tuple(c) for c in out)


def _check_interleaved(m: int, pp: int, training: dict) -> None:
    """Megatron's interleaved schedule takes micro-batches in groups of `pp`
    (microbatch_group_size_per_vp_stage, default pp) and refuses a last group of fewer than pp
    (megatron/core/pipeline_parallel/schedules.py, forward_backward_pipelining_with_interleaving)."""
    if m % pp:   # with groups of pp, a last group is either whole or shorter than pp
        raise SettingsError(f"the interleaved schedule (parallel.vp > 1) needs micro-batches in groups of pp={pp}: "
                            f"{m} micro-batches per iteration is not a multiple of {pp}")
    if training["dp_sharding"] in ("fsdp", "fsdp_grad_op"):
        raise SettingsError(f"training.dp_sharding={training['dp_sharding']} with parallel.vp > 1 is not emulated")
