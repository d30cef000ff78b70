"""A small self-contained GPT training script for recording Lumos reference traces.

Pure torch (no model libraries): token + position embedding, `layers`
pre-norm transformer blocks (causal multi-head self-attention and a GELU MLP
of width `ffn`), a final LayerNorm and an untied LM head; cross-entropy on
random tokens; AdamW. It runs on CPU (torch's CPU build) or CUDA:

    python -m lumos.capture.gpt --layers 2 --hidden 64 --ffn 256 --heads 2 \\
        --seq 32 --micro-batch 2 --steps 3 --out traces/tiny
    lumos capture gpt --layers 12 --hidden 2048 --ffn 8192 --heads 16 \\
        --seq 2048 --micro-batch 4 --micro-batches 2 --steps 3 --out traces/base  # same flags

It profiles `wait` (1) + `warmup` + `steps` iterations through
`lumos.capture.profile.lumos_profile` and writes `<out>/rank{R}.json.gz`.
Under `torchrun` (WORLD_SIZE > 1) it joins a process group (NCCL on CUDA,
gloo on CPU), trains data-parallel and all-reduces the gradient buckets.

Annotations (`torch.profiler.record_function` ranges, category
`user_annotation` in the trace) a predictor can key on, per iteration; `mb{j}`
is the micro-batch, j = 0 .. micro_batches-1 (`--micro-batches`, gradient
accumulation; the names are the contract of `lumos.trace.annotation`, the ones
`lumos.model.structure` reads and the emulator writes):

- `ProfilerStep#N`                one training iteration (written by the profiler)
- `forward`                       one micro-batch's forward pass, containing
  - `embedding/forward/mb{j}`     token + position embedding
  - `layer_{i}/forward/mb{j}`     transformer block i, i = 0 .. layers-1
  - `head/forward/mb{j}`          final LayerNorm, LM head and loss
- `backward`                      that micro-batch's backward (`loss.backward()`), containing
  - `head/backward/mb{j}`         the loss and LM head's backward
  - `layer_{i}/backward/mb{j}`    block i's backward, i = layers-1 .. 0,
  - `embedding/backward/mb{j}`    the embeddings' backward. Each backward range is
    opened when the gradient reaches the part's output and closed when it leaves
    its input (identity autograd markers at both ends; the embedding's when its
    weights' gradients are accumulated), so it holds every autograd op of that
    part; on CUDA it lies on the autograd device thread.
  - `grad_bucket_{i}/reduce`      the communication-like reduction of block i's
    gradients, launched in the last micro-batch as soon as they are all
    accumulated (see below)
- `grad_sync`                     the main stream waiting for the side stream
- `optimizer`                     AdamW step (contains torch's own
                                  `Optimizer.step#AdamW.step`)
- `zero_grad`                     `optimizer.zero_grad(set_to_none=True)`
- `loss_item`                     `loss.item()` (a device-to-host sync on CUDA)

`--no-annotate` writes none of these but `ProfilerStep#N`, and no autograd
marker: the trace anybody's training loop gives, for checking that the
predictor finds the layers without our ranges.

Side stream (CUDA only, `--no-side-stream` turns it off; never on CPU): every block's gradients
form one bucket, reduced DDP-style on a side stream (cudaEventRecord / cudaStreamWaitEvent, then
flatten -> all-reduce, or with one GPU a copy through a buffer -> unflatten) while the earlier
blocks' backward continues; the embedding and head parameters form a final bucket, and the
compute stream waits for the side stream before the optimizer step. `--fsdp` (`sharding`) and
`--ddp` (`ddp`) replace these buckets with torch's own FSDP2 or DistributedDataParallel.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from lumos.trace.annotation import EMBEDDING, HEAD, layer_block, range_name

from . import require_torch
from .affinity import cores, pin_to_core
from .group import ensure_process_group, join_group, resolve_device
from .sharding import MODES as FSDP_MODES


@dataclass
class GPTConfig:
    layers: int = 2
    hidden: int = 64
    ffn: int = 256
    heads: int = 2
    seq: int = 32
    micro_batch: int = 2
    vocab: int = 1024
    dropout: float = 0.0
    attention: str = "sdpa"  # "sdpa" (fused kernel) or "math" (explicit bmm + softmax)

    def __post_init__(self) -> None:
        for name in ("layers", "hidden", "ffn", "heads", "seq", "micro_batch", "vocab"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be divisible by heads ({self.heads})")
        if self.attention not in ("sdpa", "math"):
            raise ValueError("attention must be 'sdpa' or 'math'")

    def parameter_count(self) -> int:
        h, f, v, s = self.hidden, self.ffn, self.vocab, self.seq
        block = 2 * 2 * h + (3 * h * h + 3 * h) + (h * h + h) + (h * f + f) + (f * h + h)
        return v * h + s * h + self.layers * block + 2 * h + h * v


@functools.lru_cache(maxsize=None)
def _model_classes():
    """Define the nn.Modules on first use, so importing this module needs no torch."""
    torch = require_torch()
    nn = torch.nn
    F = torch.nn.functional
    record_function = torch.profiler.record_function

    from .annotate import Range
    from .annotate import markers

    _OpenInBackward, _CloseInBackward = markers()

    class CausalSelfAttention(nn.Module):
        def __init__(self, cfg: GPTConfig):
            super().__init__()
            self.heads = cfg.heads
            self.head_dim = cfg.hidden // cfg.heads
            self.attention = cfg.attention
            self.dropout = cfg.dropout
            self.qkv = nn.Linear(cfg.hidden, 3 * cfg.hidden)
            self.proj = nn.Linear(cfg.hidden, cfg.hidden)
            if cfg.attention == "math":
                mask = torch.ones(cfg.seq, cfg.seq, dtype=torch.bool).tril()
                self.register_buffer("mask", mask, persistent=False)

        def forward(self, x):
            b, s, h = x.shape
            q, k, v = self.qkv(x).split(h, dim=2)
            q, k, v = (t.view(b, s, self.heads, self.head_dim).transpose(1, 2) for t in (q, k, v))
            if self.attention == "sdpa":
                y = F.scaled_dot_product_attention(
                    q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
            else:
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
                att = att.masked_fill(~self.mask[:s, :s], float("-inf"))
                att = F.dropout(F.softmax(att, dim=-1), self.dropout, self.training)
                y = att @ v
            y = y.transpose(1, 2).contiguous().view(b, s, h)
            return self.proj(y)

    class Block(nn.Module):
        def __init__(self, cfg: GPTConfig, index: int):
            super().__init__()
            self.index = index
            self.ln1 = nn.LayerNorm(cfg.hidden)
            self.attn = CausalSelfAttention(cfg)
            self.ln2 = nn.LayerNorm(cfg.hidden)
            self.fc1 = nn.Linear(cfg.hidden, cfg.ffn)
            self.fc2 = nn.Linear(cfg.ffn, cfg.hidden)
            self.drop = nn.Dropout(cfg.dropout)
            self.mb = 0   # the micro-batch being run; set by GPT.forward
            self.annotate = True   # set by GPT.annotate
            self.bwd_range = Range(range_name(layer_block(index), "backward", 0))

        def forward(self, x):
            if not self.annotate:
                return self._body(x)
            mark = torch.is_grad_enabled() and x.requires_grad
            with record_function(range_name(layer_block(self.index), "forward", self.mb)):
                if mark:
                    self.bwd_range = Range(range_name(layer_block(self.index), "backward", self.mb))
                    x = _CloseInBackward.apply(x, self.bwd_range)
                x = self._body(x)
                if mark:
                    x = _OpenInBackward.apply(x, self.bwd_range)
            return x

        def _body(self, x):
            x = x + self.drop(self.attn(self.ln1(x)))
            return x + self.drop(self.fc2(F.gelu(self.fc1(self.ln2(x)))))

    class GPT(nn.Module):
        def __init__(self, cfg: GPTConfig):
            super().__init__()
            self.cfg = cfg
            self.tok = nn.Embedding(cfg.vocab, cfg.hidden)
            self.pos = nn.Embedding(cfg.seq, cfg.hidden)
            self.drop = nn.Dropout(cfg.dropout)
            self.blocks = nn.ModuleList(Block(cfg, i) for i in range(cfg.layers))
            self.ln_f = nn.LayerNorm(cfg.hidden)
            self.head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)
            self.apply(self._init)
            self.head_bwd = Range(range_name(HEAD, "backward", 0))
            self.embed_bwd = Range(range_name(EMBEDDING, "backward", 0))
            self._embed_pending = 0
            self.annotate = True
            self.watch_embedding_grads()

        def watch_embedding_grads(self) -> None:
            """Close the embedding's backward range when its weights' gradients are in; called
            again after FSDP sharding, which replaces the parameters the hooks were on."""
            for p in (self.tok.weight, self.pos.weight):
                p.register_post_accumulate_grad_hook(self._embed_grad_ready)

        def _embed_grad_ready(self, _param) -> None:
            self._embed_pending -= 1
            if self._embed_pending == 0:
                self.embed_bwd.close()

        @staticmethod
        def _init(m) -> None:
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

        def set_annotate(self, on: bool) -> None:
            """Off: no range and no autograd marker of ours, a trace like anybody's model gives."""
            self.annotate = on
            for block in self.blocks:
                block.annotate = on

        def forward(self, idx, targets, mb: int = 0):
            if not self.annotate:
                x = self.drop(self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device)))
                for block in self.blocks:
                    x = block(x)
                logits = self.head(self.ln_f(x))
                return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))
            b, s = idx.shape
            mark = torch.is_grad_enabled()
            with record_function(range_name(EMBEDDING, "forward", mb)):
                pos = torch.arange(s, device=idx.device)
                x = self.drop(self.tok(idx) + self.pos(pos))
                if mark:
                    self.embed_bwd = Range(range_name(EMBEDDING, "backward", mb))
                    self._embed_pending = 2
                    x = _OpenInBackward.apply(x, self.embed_bwd)
            for block in self.blocks:
                block.mb = mb
                x = block(x)
            with record_function(range_name(HEAD, "forward", mb)):
                if mark:
                    self.head_bwd = Range(range_name(HEAD, "backward", mb))
                    x = _CloseInBackward.apply(x, self.head_bwd)
                logits = self.head(self.ln_f(x))
                loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))
                if mark:
                    loss = _OpenInBackward.apply(loss, self.head_bwd)
            return loss

        def close_ranges(self) -> None:
            """Close any backward range a failed backward left open."""
            for block in self.blocks:
                block.bwd_range.close()
            self.head_bwd.close()
            self.embed_bwd.close()

    return GPT


def build_model(cfg: GPTConfig, annotate: bool = True):
    """A fresh GPT for `cfg` (on CPU, float32); `annotate=False`: no ranges of ours."""
    model = _model_classes()(cfg)
    model.set_annotate(annotate)
    return model


def annotation_range(annotate: bool):
    """`record_function`, or with `annotate=False` a range that writes nothing."""
    torch = require_torch()
    return torch.profiler.record_function if annotate else (lambda _name: contextlib.nullcontext())


class GradBuckets:
    """Reduce each block's gradients as soon as they are ready, DDP-style.

    On CUDA with `side_stream=True` the reduction runs on a side stream, ordered by cudaEventRecord /
    cudaStreamWaitEvent; otherwise it runs inline (and only when WORLD_SIZE > 1, since a one-process CPU
    run has nothing to reduce). `finish()` reduces what is left and makes the compute stream wait.
    `exclude`: ids of parameters never reduced (an MoE's experts, local to their rank).
    """

    def __init__(self, model, device, side_stream: bool, annotate: bool = True, exclude: frozenset = frozenset()):
        torch = require_torch()
        self.torch = torch
        self.range = annotation_range(annotate)
        self.device = device
        self.dist = torch.distributed
        self.world = self.dist.get_world_size() if self.dist.is_initialized() else 1
        self.use_stream = side_stream and device.type == "cuda"
        self.stream = torch.cuda.Stream(device=device) if self.use_stream else None
        self.buckets: list[tuple[str, list]] = []
        owned = set(exclude)
        for i, block in enumerate(model.blocks):
            params = [p for p in block.parameters() if p.requires_grad and id(p) not in owned]
            owned.update(id(p) for p in params)
            self.buckets.append((f"grad_bucket_{i}", params))
        rest = [p for p in model.parameters() if p.requires_grad and id(p) not in owned]
        self.rest = ("grad_bucket_rest", rest)
        self.pending: dict[int, int] = {}
        self.reduced: set[int] = set()
        self.armed = True
        self.active = self.use_stream or self.world > 1
        if self.active:
            for b, (_, params) in enumerate(self.buckets):
                for p in params:
                    p.register_post_accumulate_grad_hook(functools.partial(self._ready, b))
        self.reset()

    def reset(self) -> None:
        self.pending = {b: len(params) for b, (_, params) in enumerate(self.buckets)}
        self.reduced = set()

    def _ready(self, bucket: int, _param) -> None:
        if not self.armed:
            return
        self.pending[bucket] -= 1
        if self.pending[bucket] == 0 and bucket not in self.reduced:
            self.reduced.add(bucket)
            self._reduce(*self.buckets[bucket])

    def _reduce(self, name: str, params: list) -> None:
        torch = self.torch
        grads = [p.grad for p in params if p.grad is not None]
        if not grads:
            return
        from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

        with self.range(f"{name}/reduce"):
            if self.use_stream:
                ready = torch.cuda.Event()
                ready.record(torch.cuda.current_stream(grads[0].device))
                self.stream.wait_event(ready)
                ctx = torch.cuda.stream(self.stream)
            else:
                ctx = contextlib.nullcontext()
            with ctx:
                flat = _flatten_dense_tensors(grads)
                if self.world > 1:
                    self.dist.all_reduce(flat)
                    flat.div_(self.world)
                else:  # stand-in for a collective: through a communication buffer and back
                    buf = torch.empty_like(flat)
                    buf.copy_(flat, non_blocking=True)
                    buf.mul_(1.0 / self.world)
                    flat.copy_(buf, non_blocking=True)
                for g, r in zip(grads, _unflatten_dense_tensors(flat, grads)):
                    g.copy_(r)

    def finish(self) -> None:
        if not self.active:
            return
        torch = self.torch
        for b, bucket in enumerate(self.buckets):  # a block whose grads never all arrived
            if b not in self.reduced:
                self.reduced.add(b)
                self._reduce(*bucket)
        self._reduce(*self.rest)
        if self.use_stream:
            with self.range("grad_sync"):
                done = torch.cuda.Event()
                done.record(self.stream)
                torch.cuda.current_stream(self.device).wait_event(done)
        self.reset()


DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}


def run_gpt(cfg: GPTConfig, *, out_dir: str | os.PathLike, steps: int = 3, warmup: int = 1,
            wait: int = 1, device: str = "auto", dtype: str = "auto", side_stream: bool = True,
            seed: int = 0, rank: int | None = None, microbatches: int = 1, log=print,
            annotate: bool = True, with_stack: bool = False, profile_memory: bool = False,
            log_clocks: bool | None = None, fsdp: str = "off", ddp: bool = False) -> Path:
    """Train `cfg` for wait + warmup + steps iterations under the profiler; return the trace path.

    Each iteration runs `microbatches` forward/backward passes (gradient
    accumulation) before one optimizer step. `annotate=False` writes none of the
    ranges below but `ProfilerStep#N` (and no autograd marker): the trace any
    training loop gives, whose layers `lumos.model.recover` has to find.
    `with_stack=True` records Python stacks (and so module calls) as well;
    `profile_memory=True` the allocator's `[memory]` events. `log_clocks` (None:
    on for a CUDA device) logs that GPU's clocks, power and temperature
    (`lumos.capture.clocks`). `fsdp` full / grad_op shards the model with FSDP2
    (`lumos.capture.sharding`) instead of all-reducing gradient buckets; `ddp` wraps it in torch's
    DistributedDataParallel (`lumos.capture.ddp`).
    """
    require_torch()
    if microbatches < 1:
        raise ValueError("microbatches must be >= 1")
    if fsdp not in FSDP_MODES:
        raise ValueError(f"--fsdp must be one of {', '.join(FSDP_MODES)}, got {fsdp!r}")
    if ddp and fsdp != "off":
        raise ValueError(f"--ddp and --fsdp {fsdp}: one data-parallel wrapper at a time")
    dist_info = join_group(device)
    own_group = dist_info is not None and dist_info[3]
    if dist_info is None and (fsdp != "off" or ddp):   # FSDP2 and DDP need a process group, even of one rank
        own_group = ensure_process_group(resolve_device(device))
    try:
        return _train_and_profile(cfg, dist_info, out_dir=out_dir, steps=steps, warmup=warmup,
                                  wait=wait, device=device, dtype=dtype, side_stream=side_stream,
                                  seed=seed, rank=rank, microbatches=microbatches, log=log,
                                  annotate=annotate, with_stack=with_stack,
                                  profile_memory=profile_memory, log_clocks=log_clocks, fsdp=fsdp, ddp=ddp)
    finally:
        if own_group:
            require_torch().distributed.destroy_process_group()


def _train_and_profile(cfg: GPTConfig, dist_info, *, out_dir, steps, warmup, wait, device, dtype,
                       side_stream, seed, rank, microbatches, log, annotate=True, with_stack=False,
                       profile_memory=False, log_clocks=None, fsdp="off", ddp=False) -> Path:
    torch = require_torch()
    from .profile import lumos_profile

    if dist_info is not None and device in ("auto", "cuda") and torch.cuda.is_available():
        dev = torch.device(f"cuda:{dist_info[2]}")  # one GPU per torchrun process
    else:
        dev = resolve_device(device)
    if dtype == "auto":
        dtype = "bfloat16" if dev.type == "cuda" else "float32"
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of auto, {', '.join(DTYPES)}")
    torch_dtype = getattr(torch, dtype)

    torch.manual_seed(seed)
    model = build_model(cfg, annotate=annotate).to(device=dev, dtype=torch_dtype)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01,
                            foreach=dev.type == "cuda" or None)
    if fsdp != "off":
        from .sharding import ShardedGradients, shard_model

        shard_model(model, dev, fsdp)
        buckets = ShardedGradients(model)
    elif ddp:
        from .ddp import DDPGradients

        buckets = DDPGradients(model)
    else:
        buckets = GradBuckets(model, dev, side_stream, annotate=annotate)
    rf = annotation_range(annotate)
    gen = torch.Generator(device="cpu").manual_seed(seed + (dist_info[0] if dist_info else 0))
    batch = (cfg.micro_batch, cfg.seq)
    forward = getattr(buckets, "forward", model)   # the DDP-wrapped model under --ddp
    data = [(torch.randint(cfg.vocab, batch, generator=gen).to(dev),
             torch.randint(cfg.vocab, batch, generator=gen).to(dev)) for _ in range(microbatches)]

    def train_step() -> float:
        for j, (idx, targets) in enumerate(data):
            buckets.armed = j == microbatches - 1
            try:
                with rf("forward"):
                    loss = forward(idx, targets, mb=j)
                    if microbatches > 1:
                        loss = loss / microbatches
                with rf("backward"):
                    loss.backward()
            finally:
                model.close_ranges()
        buckets.finish()
        with rf("optimizer"):
            opt.step()
        with rf("zero_grad"):
            opt.zero_grad(set_to_none=True)
        with rf("loss_item"):
            return loss.item()

    meta = {"model": "lumos.capture.gpt", "config": asdict(cfg), "device": str(dev),
            "dtype": dtype, "side_stream": buckets.use_stream, "microbatches": microbatches, "annotate": annotate,
            "parameters": cfg.parameter_count(), "fsdp": fsdp, "cpus": cores(),
            "ddp_bucket_cap_mb": buckets.bucket_cap_mb if ddp else None}
    if dev.type == "cuda":
        meta["gpu"] = torch.cuda.get_device_name(dev)
    with lumos_profile(out_dir, steps=steps, warmup=warmup, wait=wait, rank=rank,
                       metadata=meta, with_stack=with_stack, profile_memory=profile_memory,
                       device=dev, log_clocks=log_clocks) as cap:
        for it in range(cap.total_iterations):
            loss = train_step()
            cap.step()
            if log and cap.rank == 0:
                log(f"iteration {it + 1}/{cap.total_iterations} loss {loss:.4f}")
    if cap.path is None:  # pragma: no cover
        raise RuntimeError("the profiler produced no trace")
    return cap.path


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The script's flags; shared by `python -m lumos.capture.gpt` and `lumos capture gpt`."""
    d = GPTConfig()
    p.add_argument("--layers", type=int, default=d.layers, help="transformer blocks (default %(default)s)")
    p.add_argument("--hidden", type=int, default=d.hidden, help="model width (default %(default)s)")
    p.add_argument("--ffn", type=int, default=None, help="MLP width (default 4 x hidden)")
    p.add_argument("--heads", type=int, default=d.heads, help="attention heads (default %(default)s)")
    p.add_argument("--seq", type=int, default=d.seq, help="sequence length (default %(default)s)")
    p.add_argument("--micro-batch", type=int, default=d.micro_batch,
                   help="sequences per micro-batch (default %(default)s)")
    p.add_argument("--micro-batches", type=int, default=1,
                   help="micro-batches per iteration, gradients accumulated (default %(default)s)")
    p.add_argument("--vocab", type=int, default=d.vocab, help="vocabulary size (default %(default)s)")
    p.add_argument("--attention", choices=("sdpa", "math"), default=d.attention,
                   help="fused scaled_dot_product_attention or explicit bmm/softmax")
    p.add_argument("--steps", type=int, default=3, help="profiled iterations (default %(default)s)")
    p.add_argument("--warmup", type=int, default=1,
                   help="profiled-but-discarded iterations after the skipped first one (default %(default)s)")
    p.add_argument("--device", default="auto", help="auto (CUDA if available), cpu, cuda, cuda:N")
    p.add_argument("--dtype", default="auto", choices=("auto", *DTYPES),
                   help="parameter dtype (auto: bfloat16 on CUDA, float32 on CPU)")
    p.add_argument("--no-side-stream", dest="side_stream", action="store_false",
                   help="reduce gradients on the compute stream (CUDA); CPU never uses one")
    p.add_argument("--rank", type=int, default=None,
                   help="rank for the file name when not under torchrun (default 0)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the initial parameters and, plus the rank, of the token batches (default %(default)s)")
    p.add_argument("--no-annotate", dest="annotate", action="store_false",
                   help="write no range of ours but ProfilerStep#N, like any training loop: the "
                        "predictor then finds the layers itself, from module calls (--with-stack) or "
                        "by repetition (lumos replay --structure says which)")
    p.add_argument("--with-stack", action="store_true",
                   help="record Python stacks too; the module calls in them name the layers")
    p.add_argument("--profile-memory", action="store_true",
                   help="record the allocator's [memory] events too; their peak calibrates the memory "
                        "model's workspace constant")
    p.add_argument("--log-clocks", action=argparse.BooleanOptionalAction, default=None,
                   help="log the GPU's SM/memory clocks, power, temperature and clock-event reasons "
                        "(NVML, every 10 ms) into the trace's lumosCapture.clocks (default: on for CUDA)")
    p.add_argument("--fsdp", choices=FSDP_MODES, default="off",
                   help="shard the model with FSDP2 (fully_shard per block, then the root) instead of "
                        "all-reducing gradient buckets: full reshards after forward (FULL_SHARD, ZeRO-3), "
                        "grad_op keeps the gathered parameters until the backward (SHARD_GRAD_OP, ZeRO-2), "
                        "hsdp shards within groups of 2 ranks and all-reduces across them (HSDP, 4+ ranks); "
                        "one process joins a one-rank group (default %(default)s)")
    p.add_argument("--ddp", action="store_true",
                   help="wrap the model in torch's DistributedDataParallel (gradient buckets of 0.1 MiB "
                        "all-reduced from autograd hooks during the backward, no_sync on all but the last "
                        "micro-batch) instead of our own per-block buckets; one process joins a one-rank group")
    p.add_argument("--pin-core", action="store_true",
                   help="run each process on one core of those it may use (the LOCAL_RANK-th), as one rank per "
                        "GPU: on a CPU run, processes that migrate between cores wait on each other's "
                        "collectives far longer and far more variably")
    p.add_argument("--out", required=True, help="directory for rank{R}.json.gz")
    p.add_argument("--quiet", action="store_true", help="no per-iteration log")


def config_from_args(args: argparse.Namespace) -> GPTConfig:
    return GPTConfig(layers=args.layers, hidden=args.hidden,
                     ffn=args.ffn if args.ffn is not None else 4 * args.hidden,
                     heads=args.heads, seq=args.seq, micro_batch=args.micro_batch,
                     vocab=args.vocab, attention=args.attention)


def run_from_args(args: argparse.Namespace) -> Path:
    cfg = config_from_args(args)
    if args.steps < 1 or args.warmup < 0:
        raise ValueError("--steps must be >= 1 and --warmup >= 0")
    if args.micro_batches < 1:
        raise ValueError(f"--micro-batches must be >= 1, got {args.micro_batches}")
    if args.pin_core:
        pin_to_core(int(os.environ.get("LOCAL_RANK", "0")))   # before torch starts its threads
    path = run_gpt(cfg, out_dir=args.out, steps=args.steps, warmup=args.warmup,
                   device=args.device, dtype=args.dtype, side_stream=args.side_stream,
                   seed=args.seed, rank=args.rank, microbatches=args.micro_batches,
                   log=None if args.quiet else print, annotate=args.annotate, with_stack=args.with_stack,
                   profile_memory=args.profile_memory, log_clocks=args.log_clocks, fsdp=args.fsdp, ddp=args.ddp)
    print(f"wrote {path} ({path.stat().st_size} bytes)")
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lumos.capture.gpt",
                                description="Train a small GPT under the profiler; write a Lumos trace.")
    add_arguments(p)
    args = p.parse_args(argv)
    from . import CaptureUnavailable

    try:
        run_from_args(args)
    except CaptureUnavailable as exc:
        p.exit(2, f"{p.prog}: error: {exc}\n")
    except ValueError as exc:
        p.error(str(exc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
