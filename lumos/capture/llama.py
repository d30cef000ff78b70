"""A small Llama-style model in plain torch, trained and profiled like `capture/gpt.py`'s GPT.

What makes it Llama-style (Touvron et al. 2023; Meta's llama `model.py` and torchtitan's
`torchtitan/models/llama3/model/model.py` lay it out the same way): RMSNorm before attention and MLP
(no bias anywhere), rotary embeddings on the queries and keys, grouped-query attention (`kv_heads`
key/value heads shared by `heads // kv_heads` query heads each), and a SwiGLU MLP
(down(silu(gate(x)) * up(x))). The projections are separate (q, k, v; gate, up) as in those sources,
or fused (`fused_qkv`: one [h -> (heads + 2 kv_heads) x head_dim] GEMM as Megatron-Core's
`linear_qkv`; `fused_gate_up`: one [h -> 2f] GEMM as its `linear_fc1` with gated linear units), so the
trace reader sees each layout a user may bring.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .profile import profile_steps, require_torch

__all__ = ["LlamaConfig", "attention_module", "build_llama", "rope_tables", "run_llama"]


@dataclass(frozen=True)
class LlamaConfig:
    layers: int = 2
    hidden: int = 64
    ffn: int = 176
    heads: int = 4
    kv_heads: int = 2
    seq: int = 16
    micro_batch: int = 3
    vocab: int = 256
    fused_qkv: bool = False
    fused_gate_up: bool = False

    def __post_init__(self):
        if self.hidden % self.heads or self.heads % self.kv_heads:
            raise ValueError(f"heads {self.heads} must divide hidden {self.hidden}, kv_heads {self.kv_heads} "
                             f"must divide heads")


def attention_module(hidden: int, heads: int, kv_heads: int, fused_qkv: bool = False):
    """One grouped-query attention module (`forward(x, cos, sin)`), as this Llama's layers and
    `capture/moe.py`'s have: q, k, v projections (or one fused), RoPE on q and k, KV heads repeated per
    query group, causal `scaled_dot_product_attention`, output projection; no biases."""
    torch = require_torch()
    nn, F = torch.nn, torch.nn.functional
    d = hidden // heads

    def rope(x, cos, sin):      # rotate pairs of the head dim (x: [b, s, heads, d])
        x1, x2 = x[..., : d // 2], x[..., d // 2:]
        return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            q, kv = heads * d, kv_heads * d
            if fused_qkv:
                self.qkv = nn.Linear(hidden, q + 2 * kv, bias=False)
            else:
                self.wq = nn.Linear(hidden, q, bias=False)
                self.wk = nn.Linear(hidden, kv, bias=False)
                self.wv = nn.Linear(hidden, kv, bias=False)
            self.wo = nn.Linear(q, hidden, bias=False)

        def forward(self, x, cos, sin):
            b, s, _ = x.shape
            if fused_qkv:
                q, k, v = self.qkv(x).split([heads * d, kv_heads * d, kv_heads * d], dim=-1)
            else:
                q, k, v = self.wq(x), self.wk(x), self.wv(x)
            q = rope(q.view(b, s, heads, d), cos, sin).transpose(1, 2)
            k = rope(k.view(b, s, kv_heads, d), cos, sin).transpose(1, 2)
            v = v.view(b, s, kv_heads, d).transpose(1, 2)
            rep = heads // kv_heads       # each KV head serves `rep` query heads
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.wo(o.transpose(1, 2).reshape(b, s, heads * d))

    return Attention()


def rope_tables(seq: int, head_dim: int):
    """(cos, sin) of the rotary embedding, [1, seq, 1, head_dim / 2] each."""
    torch = require_torch()
    inv = 1.0 / (10000.0 ** (torch.arange(0, head_dim // 2).float() / (head_dim // 2)))
    ang = torch.outer(torch.arange(seq).float(), inv)        # [s, d/2]
    return ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]


def build_llama(cfg: LlamaConfig):
    """The model (an nn.Module whose `layers` are its repeated blocks)."""
    torch = require_torch()
    nn, F = torch.nn, torch.nn.functional
    d = cfg.hidden // cfg.heads

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            if cfg.fused_gate_up:
                self.w13 = nn.Linear(cfg.hidden, 2 * cfg.ffn, bias=False)
            else:
                self.w1 = nn.Linear(cfg.hidden, cfg.ffn, bias=False)
                self.w3 = nn.Linear(cfg.hidden, cfg.ffn, bias=False)
            self.w2 = nn.Linear(cfg.ffn, cfg.hidden, bias=False)

        def forward(self, x):
            if cfg.fused_gate_up:
                gate, up = self.w13(x).chunk(2, dim=-1)
            else:
                gate, up = self.w1(x), self.w3(x)
            return self.w2(F.silu(gate) * up)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention_norm = nn.RMSNorm(cfg.hidden)
            self.attention = attention_module(cfg.hidden, cfg.heads, cfg.kv_heads, cfg.fused_qkv)
            self.ffn_norm = nn.RMSNorm(cfg.hidden)
            self.feed_forward = MLP()

        def forward(self, x, cos, sin):
            x = x + self.attention(self.attention_norm(x), cos, sin)
            return x + self.feed_forward(self.ffn_norm(x))

    class Llama(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok_embeddings = nn.Embedding(cfg.vocab, cfg.hidden)
            self.layers = nn.ModuleList(Block() for _ in range(cfg.layers))
            self.norm = nn.RMSNorm(cfg.hidden)
            self.output = nn.Linear(cfg.hidden, cfg.vocab, bias=False)
            cos, sin = rope_tables(cfg.seq, d)
            self.register_buffer("cos", cos, persistent=False)
            self.register_buffer("sin", sin, persistent=False)

        def forward(self, tokens):
            x = self.tok_embeddings(tokens)
            for layer in self.layers:
                x = layer(x, self.cos, self.sin)
            return self.output(self.norm(x))

    return Llama()


def run_llama(cfg: LlamaConfig, *, out_dir: str | os.PathLike, steps: int = 2, warmup: int = 1,
              microbatches: int = 1, seed: int = 0, annotate: bool = True, with_stack: bool = False,
              device: str = "cpu") -> Path:
    """Train `cfg` for wait + warmup + steps iterations (AdamW, `microbatches` forward / backward passes
    each) under the profiler, on `device` (cpu; cuda in bfloat16), its layers annotated as `capture gpt`'s;
    the trace path."""
    torch = require_torch()
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"--device {device}: no CUDA device here")
    torch.manual_seed(seed)
    model = build_llama(cfg).to(device)
    if device.startswith("cuda"):
        model = model.to(torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(seed)
    data = [torch.randint(cfg.vocab, (cfg.micro_batch, cfg.seq + 1), generator=gen).to(device)
            for _ in range(microbatches)]
    loss_fn = torch.nn.functional.cross_entropy

    def step():
        for batch in data:
            logits = model(batch[:, :-1])
            loss = loss_fn(logits.reshape(-1, cfg.vocab), batch[:, 1:].reshape(-1)) / microbatches
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return profile_steps(step, steps=steps, warmup=warmup, out_dir=out_dir, model=model, annotate=annotate,
                         with_stack=with_stack, device=device,
                         metadata={"lumosCapture": {"model": "llama", **cfg.__dict__}})


def add_arguments(p) -> None:
    """`lumos capture llama`'s flags."""
    d = LlamaConfig()
    for flag, key, what in (("--layers", "layers", "transformer blocks"), ("--hidden", "hidden", "model width"),
                            ("--ffn", "ffn", "SwiGLU width (gate, up)"), ("--heads", "heads", "query heads"),
                            ("--kv-heads", "kv_heads", "key/value heads (grouped-query attention)"),
                            ("--seq", "seq", "sequence length"), ("--micro-batch", "micro_batch",
                                                                  "sequences per micro-batch"),
                            ("--vocab", "vocab", "vocabulary size")):
        p.add_argument(flag, type=int, default=getattr(d, key), help=f"{what} (default %(default)s)")
    p.add_argument("--micro-batches", type=int, default=1, help="micro-batches per iteration (default %(default)s)")
    p.add_argument("--fused-qkv", action="store_true", help="one QKV GEMM (Megatron-Core's linear_qkv)")
    p.add_argument("--fused-gate-up", action="store_true", help="gate and up in one GEMM of twice the width")
    p.add_argument("--steps", type=int, default=3, help="profiled iterations (default %(default)s)")
    p.add_argument("--warmup", type=int, default=1, help="profiled-but-discarded iterations (default %(default)s)")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda (bfloat16)")
    p.add_argument("--seed", type=int, default=0, help="seed of the parameters and tokens (default %(default)s)")
    p.add_argument("--no-annotate", dest="annotate", action="store_false",
                   help="write no range of ours but ProfilerStep#N (the layers are then found by the predictor)")
    p.add_argument("--with-stack", action="store_true", help="record Python stacks (module calls) too")
    p.add_argument("--out", required=True, help="output directory (rank0.json.gz)")


def run_from_args(args) -> Path:
    cfg = LlamaConfig(layers=args.layers, hidden=args.hidden, ffn=args.ffn, heads=args.heads, kv_heads=args.kv_heads,
                      seq=args.seq, micro_batch=args.micro_batch, vocab=args.vocab, fused_qkv=args.fused_qkv,
                      fused_gate_up=args.fused_gate_up)
    path = run_llama(cfg, out_dir=args.out, steps=args.steps, warmup=args.warmup, microbatches=args.micro_batches,
                     seed=args.seed, annotate=args.annotate, with_stack=args.with_stack, device=args.device)
    print(f"wrote {path}")
    return path
