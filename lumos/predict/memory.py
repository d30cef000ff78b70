"""Peak memory per GPU of a (predicted) configuration, per pipeline stage, and whether it fits.

    memory(stage) = parameters(stage) x bytes per parameter
                  + activations per layer x layers(stage) x micro-batches in flight(stage)
                  + the last stage's logits + a workspace constant

Sources of each term:
- Bytes per parameter, mixed-precision Adam (Megatron-LM, "Distributed Optimizer" guide):
  bf16 parameters with fp32 gradients and fp32 master copy and Adam moments = 18 bytes;
  with the distributed optimizer (optimizer state sharded over DP) 6 + 12 / dp. A model
  trained in plain bf16 with AdamW (like `lumos capture gpt`) keeps parameters, gradients
  and both moments in bf16: 8 bytes (`bytes_per_param: 8`).
- Sharded data parallelism (`sharding`), after ZeRO (Rajbhandari et al. 2020, Fig. 1: stage 1
  shards the optimizer state, stage 2 the gradients too, stage 3 the parameters too). The bytes
  per parameter split into the 16-bit parameter P, its gradient G and the optimizer state O
  (18 = 2 + 4 + 12, 16 = 2 + 2 + 12; a plain-precision 8 = 2 + 2 + 4): zero1 keeps
  P + G + O / dp (Megatron's distributed optimizer, `distributed_optimizer: true`), zero2
  P + (G + O) / dp (FSDP SHARD_GRAD_OP keeps every gathered parameter from the forward to its
  backward, so the same), zero3 (FSDP FULL_SHARD) (P + G + O) / dp plus the unsharded buffers
  in flight: the unit being computed and the one prefetched (2 layers x P) and one layer's
  full gradient before its reduce-scatter (G) (FSDP2's default prefetch of one unit ahead,
  torch `distributed/fsdp/_fully_shard/_fsdp_param_group.py`).
- A mixture-of-experts layer (`shape.moe_experts`): its dense part (attention, router, shared expert) as
  above, its routed experts (the rank's E / EP, expert TP 1) with their optimizer state sharded over the
  expert data-parallel ranks (TP x DP / EP) under the distributed optimizer; activations: each token's k
  routed copies keep their permuted input and an expert's MLP terms, at the mean share (a busier rank of an
  uneven router holds more).
- Activations of one transformer layer for one micro-batch (Korthikanti et al. 2022,
  "Reducing Activation Recomputation in Large Transformer Models", Table 2; Llama-style layers, with
  grouped-query attention and SwiGLU, by the same accounting term by term, `activation_bytes_per_layer`), s sequence,
  b micro-batch, h hidden, a heads, t TP degree, in bytes (16-bit activations; 32-bit ones,
  `activation_bytes: 4`, scale every term by 4/2, the 1-byte dropout masks with them):
  no recomputation         s b h (10 + 24/t + 5 a s / (h t))
  sequence parallel        s b h (34 + 5 a s / h) / t
  selective recomputation  s b h (10 + 24/t)       (with SP: 34 s b h / t)
  full recomputation       2 s b h                  (the layer's input only)
  A fused (flash / cuDNN) attention kernel keeps no s x s scores, which is the selective
  case: `flash_attention: true` drops the 5 a s / h term.
- torchtitan's checkpointing (torchtitan/distributed/activation_checkpoint.py; `checkpointed_bytes_per_layer`):
  `selective_op`, per-op SelectiveAC, keeps the block's input and the outputs of the ops it saves: every
  other matmul of the forward counted from the first (Llama's wq wk wv wo w1 w3 w2: wq, wv, w1, w2; GPT's
  fused QKV and FC1) and attention's output with its fp32 log-sum-exp; `selective_layer` with `ac_every` N,
  per-layer selective AC, keeps a stage's every N-th block's input only (as `full`) and every other block's
  activations whole (as `none`).
- Micro-batches in flight under non-interleaved 1F1B (Narayanan et al. 2021): stage s of p
  holds min(p - s, m) micro-batches' activations at its peak.
- The last stage keeps one micro-batch's fp32 logits for the loss: 4 s b V / t bytes.
- A workspace constant (CUDA context, cuBLAS/cuDNN workspaces, NCCL buffers, allocator
  fragmentation) from the cluster profile, or calibrated from a base trace's GPU `[memory]`
  events (`memory_calibration.py`); `workspace_source` says which.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

GIB = float(1 << 30)
SHARDING = ("none", "zero1", "zero2", "zero3")
# Korthikanti's none / selective / full, torchtitan's per-op SelectiveAC and per-layer selective AC
RECOMPUTE = ("none", "selective", "full", "selective_op", "selective_layer")


@dataclass(frozen=True)
class MemorySettings:
    bytes_per_param: float = 18.0
    distributed_optimizer: bool = False
    recompute: str = "selective"          # none | selective | full | selective_op | selective_layer (RECOMPUTE)
    sequence_parallel: bool = False
    flash_attention: bool = True
    workspace_gib: float = 1.0
    gpu_memory_gib: float = 79.2
    activation_bytes: float = 2.0         # bytes per activation element: 2 (bf16/fp16), 4 (fp32)
    workspace_source: str = "profile"     # where workspace_gib came from: profile / flags, or a trace
    sharding: str = "none"                # none | zero1 | zero2 | zero3 (data-parallel sharding)
    ac_every: int = 0                     # selective_layer: every ac_every-th block of a stage checkpointed

    @classmethod
    def from_profile(cls, profile: dict | None, **overrides) -> "MemorySettings":
        base = dict((profile or {}).get("memory", {}))
        base.update({k: v for k, v in overrides.items() if v is not None})
        s = cls(**base)
        if s.recompute not in RECOMPUTE:
            raise ValueError(f"recompute must be one of {', '.join(RECOMPUTE)}, got {s.recompute!r}")
        if (s.recompute == "selective_layer") != (s.ac_every >= 1) or isinstance(s.ac_every, bool) \
                or not isinstance(s.ac_every, int):
            raise ValueError(f"ac_every (every N-th block checkpointed) must be an integer >= 1 with recompute="
                             f"selective_layer and 0 otherwise, got ac_every={s.ac_every!r} with "
                             f"recompute={s.recompute}")
        if s.sharding not in SHARDING:
            raise ValueError(f"sharding must be one of {', '.join(SHARDING)}, got {s.sharding!r}")
        if s.activation_bytes <= 0:
            raise ValueError(f"activation_bytes must be > 0, got {s.activation_bytes!r}")
        return s


def activation_bytes_per_layer(seq: int, micro_batch: int, hidden: int, heads: int, tp: int,
                               m: MemorySettings, shape=None) -> float:
    """Korthikanti's Table 2 (GPT, FFN 4h). With a Llama-style `shape` (grouped-query attention or SwiGLU)
    the same accounting term by term: of the 24 s b h a TP rank holds a 1/t of, the queries and the
    projection's input keep 2 + 2, the keys and the values 2 r each (r = KV heads / heads), and the MLP
    4 f / h with GELU (its input and FC2's), 6 f / h with SwiGLU (the fused gate-and-up output, 2f wide,
    and the down projection's input)."""
    s, b, h, a, t = float(seq), float(micro_batch), float(hidden), float(heads), float(tp)
    sbh = s * b * h * m.activation_bytes / 2.0    # Table 2 counts 2-byte activations
    if m.recompute == "full":
        return 2.0 * sbh
    if m.recompute == "selective_op":
        return checkpointed_bytes_per_layer(seq, micro_batch, hidden, heads, tp, m, shape)
    scores = 0.0 if (m.recompute == "selective" or m.flash_attention) else 5.0 * a * s / h
    sharded = 24.0
    if shape is not None and (not shape.gpt_layout or getattr(shape, "moe_experts", 0)):
        r = shape.kv / max(shape.heads, 1)
        mlp = (6.0 if shape.gated else 4.0) / shape.hidden
        sharded = 4.0 + 4.0 * r + mlp * shape.ffn
        if shape.moe_experts:   # k routed copies, each its permuted input (2) and an expert's MLP; the shared expert
            sharded = 4.0 + 4.0 * r + shape.moe_top_k * (2.0 + mlp * shape.ffn) + mlp * shape.moe_shared_ffn
    if m.sequence_parallel:
        return sbh * (10.0 + sharded + scores) / t
    return sbh * (10.0 + sharded / t + scores / t)


def checkpointed_bytes_per_layer(seq: int, micro_batch: int, hidden: int, heads: int, tp: int, m: MemorySettings,
                                 shape=None) -> float:
    """What one layer under torchtitan's per-op SelectiveAC keeps for its backward, on one TP rank
    (`SelectiveAC._get_custom_policy`, read at b5bcd76): the checkpoint's input (s b h; h / t under sequence
    parallelism), the output of every other matmul counted from the first (a row-parallel projection's partial
    sum is h wide), attention's output (h / t) and its fp32 log-sum-exp (a / t per token), and under sequence
    parallelism the two reduce-scatters' outputs (h / t each). The matmuls in forward order: Llama's wq, wk, wv,
    wo, w1, w3 (SwiGLU's up projection), w2 (torchtitan's layer); GPT's fused QKV, projection, FC1 and FC2."""
    s, b, h, a, t = float(seq), float(micro_batch), float(hidden), float(heads), float(tp)
    if shape is not None and getattr(shape, "moe_experts", 0):
        raise ValueError("recompute=selective_op: what SelectiveAC keeps of a mixture-of-experts layer is not modelled")
    if shape is None or shape.gpt_layout:
        f = float(shape.ffn) if shape is not None else 4.0 * h
        mms = [3.0 * h / t, h, f / t, h]
    else:
        q, kv, f = float(shape.heads * shape.dhead), float(shape.kv * shape.dhead), float(shape.ffn)
        mms = [q / t, kv / t, kv / t, h] + ([f / t, f / t] if shape.gated else [f / t]) + [h]
    sp = m.sequence_parallel
    kept = (h / t if sp else h) + sum(mms[0::2]) + h / t + (2.0 * h / t if sp else 0.0)
    return s * b * (kept * m.activation_bytes + 4.0 * a / t)


def stage_activation_bytes(shape, layers: int, m: MemorySettings) -> float:
    """Activations of a stage's `layers` for one micro-batch: each layer's, or under per-layer selective AC
    (`selective_layer`) the input of its every `ac_every`-th block (layers // N of them: each stage counts its
    own, as torchtitan's `_apply_layer_sac` does) and the whole of every other block."""
    if m.recompute != "selective_layer":
        return layers * activation_bytes_per_layer(shape.seq, shape.micro_batch, shape.hidden, shape.heads, shape.tp,
                                                   m, shape)
    wrapped = layers // m.ac_every
    full, none = (activation_bytes_per_layer(shape.seq, shape.micro_batch, shape.hidden, shape.heads, shape.tp,
                                             replace(m, recompute=r, ac_every=0), shape) for r in ("full", "none"))
    return wrapped * full + (layers - wrapped) * none


def state_bytes(m: MemorySettings) -> tuple[float, float, float]:
    """(parameter, gradient, optimizer state) bytes per parameter, summing to `bytes_per_param`."""
    if m.bytes_per_param >= 16:      # 16-bit parameter, fp32 master + Adam moments (12), the rest gradient
        return 2.0, m.bytes_per_param - 14.0, 12.0
    quarter = m.bytes_per_param / 4.0     # one dtype throughout: parameter, gradient, two moments
    return quarter, quarter, 2.0 * quarter


def param_bytes(params: float, dp: int, m: MemorySettings, layer_params: float = 0.0) -> float:
    """Parameters with their gradients and optimizer state on one GPU, sharded as `m.sharding` says
    (`distributed_optimizer` is zero1); `layer_params`: one layer's, for zero3's unsharded buffers."""
    p, g, o = state_bytes(m)
    d = float(max(dp, 1))
    stage = "zero1" if m.distributed_optimizer and m.sharding == "none" else m.sharding
    if stage == "zero1":
        return params * (p + g + o / d)
    if stage == "zero2":
        return params * (p + (g + o) / d)
    if stage == "zero3":
        return params * (p + g + o) / d + layer_params * (2.0 * p + g)
    return params * m.bytes_per_param


def inflight_microbatches(stage: int, pp: int, microbatches: int, chunks: int = 1) -> float:
    """Micro-batches whose activations a stage holds at its peak, in whole-stage units: 1F1B's warm-up
    forwards plus the one in flight; interleaved, the warm-up of 2 (pp - s - 1) + (V - 1) pp chunk-steps
    plus one, each 1/V of the stage (Korthikanti et al. 2022, Sec. 4.2.3: the first stage holds
    (1 + (p - 1) / (p V)) times 1F1B's)."""
    m = max(microbatches, 1)
    if chunks <= 1:
        return min(pp - stage, m)
    return min(2 * (pp - stage - 1) + (chunks - 1) * pp + 1, m * chunks) / chunks


def stage_memory(shape, layers_in_stage: int, stage: int, pp: int, dp: int, microbatches: int,
                 m: MemorySettings, ndigits: int | None = 3, chunks: int = 1) -> dict:
    """GiB of one GPU of `stage`: parameters (with optimizer state), activations, logits, workspace;
    rounded to `ndigits` (None: not rounded, for comparing MiB-sized models with a measurement);
    `chunks` model chunks per stage (interleaved 1F1B)."""
    first, last = stage == 0, stage == pp - 1
    params = layers_in_stage * shape.layer_params() + shape.embed_params() * (first + last)
    experts = layers_in_stage * shape.expert_params() if hasattr(shape, "expert_params") else 0.0   # an MoE's
    inflight = inflight_microbatches(stage, pp, microbatches, chunks)
    act = stage_activation_bytes(shape, layers_in_stage, m)
    logits = 4.0 * shape.seq * shape.micro_batch * shape.vocab / shape.tp if last else 0.0
    parts = {"parameters_gib": (param_bytes(params, dp, m, shape.layer_params() if layers_in_stage else 0.0)
                                + param_bytes(experts, getattr(shape, "moe_edp", 1), m)) / GIB,
             "activations_gib": act * inflight / GIB,
             "logits_gib": logits / GIB, "workspace_gib": m.workspace_gib}
    parts["total_gib"] = sum(parts.values())
    parts["inflight_microbatches"] = inflight
    return {k: round(v, ndigits) if isinstance(v, float) and ndigits is not None else v for k, v in parts.items()}


def plan_memory(shape, layers_per_stage: list[int], pp: int, dp: int, microbatches: int,
                m: MemorySettings, chunks: int = 1) -> dict:
    stages = [stage_memory(shape, n, s, pp, dp, microbatches, m, chunks=chunks) for s, n in enumerate(layers_per_stage)]
    peak = max(st["total_gib"] for st in stages)
    return {"memory_gib_per_gpu": round(peak, 3), "gpu_memory_gib": m.gpu_memory_gib,
            "fits": bool(peak <= m.gpu_memory_gib), "per_stage": stages,
            "assumptions": {"bytes_per_param": m.bytes_per_param, "distributed_optimizer": m.distributed_optimizer,
                            "sharding": m.sharding,
                            "recompute": m.recompute, "sequence_parallel": m.sequence_parallel,
                            "flash_attention": m.flash_attention, "activation_bytes": m.activation_bytes,
                            "workspace_gib": m.workspace_gib, "workspace_source": m.workspace_source,
                            **({"ac_every": m.ac_every} if m.recompute == "selective_layer" else {})}}
