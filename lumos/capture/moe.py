"""A small mixture-of-experts model in plain torch, trained under the profiler, with expert parallelism over gloo.

Each layer is a Llama-style attention (`llama.attention_module`: RMSNorm, RoPE, grouped-query
attention) followed by an MoE FFN laid out as Megatron-Core lays out its `MoELayer`
(megatron/core/transformer/moe/moe_layer.py) with the all-to-all token dispatcher
(`MoEAlltoAllTokenDispatcher`, megatron/core/transformer/moe/token_dispatcher.py) and the
sequential experts (`SequentialMLP`, megatron/core/transformer/moe/experts.py):

- router: a linear map h -> E (all experts), softmax, top-k; the k probabilities kept are
  renormalised to sum to 1 (as Mixtral does);
- permute: the T x k (token, expert) pairs sorted by expert, each token's row copied once per pick;
- dispatch (EP > 1): the per-expert counts exchanged first (an all-to-all of E counts; Megatron
  all-gathers them instead, but an all-gather inside a layer reads as a sharded-DP gather), then the
  rows themselves with `all_to_all_single` of variable splits, so each rank receives the rows for its
  E / EP experts from every rank, and sorts them by local expert;
- experts: a loop of per-expert SwiGLU MLPs (gate, up, down; width `expert_ffn`), one GEMM each per
  expert, every local expert run even when it got no row (so the trace shows each);
- combine: the expert outputs sent back with a second all-to-all (splits swapped);
- unpermute: each row weighted by its router probability and summed back into its token;
- an optional shared expert (width `shared_expert_ffn`) that sees every token, added to the output.

With EP ranks the dense parameters (attention, norms, router, embedding, head) are replicated and their
gradients all-reduced per layer as DDP does (`gpt.GradBuckets`, the expert parameters left out): a
DP = EP run. Expert gradients stay on the rank that holds the expert. EP 1 runs no collective at all.

Ranges of ours (besides `capture gpt`'s layer ranges, written by `annotate.ModuleAnnotator`), inside each
layer's forward: `moe/router`, `moe/permute`, `moe/dispatch`, `moe/experts` (and `moe/expert_{E}` around
each expert, E its global index), `moe/shared_expert`, `moe/combine`, `moe/unpermute`
(`lumos.trace.annotation.part_name`).

`lumos capture moe --ep 4 --out DIR` starts the 4 ranks itself (spawned processes joined on a file
store); under torchrun (WORLD_SIZE set) each process is one rank and WORLD_SIZE must equal `--ep`.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from lumos.trace.annotation import part_name

from . import require_torch

__all__ = ["MoEConfig", "build_moe", "run_moe"]


@dataclass(frozen=True)
class MoEConfig:
    layers: int = 2
    hidden: int = 128
    heads: int = 4
    kv_heads: int = 2
    experts: int = 4
    top_k: int = 2
    expert_ffn: int = 256
    shared_expert_ffn: int = 0      # 0: no shared expert
    seq: int = 64
    micro_batch: int = 4
    vocab: int = 1024
    ep: int = 1

    def __post_init__(self):
        for name in ("layers", "hidden", "heads", "kv_heads", "experts", "top_k", "expert_ffn", "seq",
                     "micro_batch", "vocab", "ep"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.hidden % self.heads or self.heads % self.kv_heads:
            raise ValueError(f"heads {self.heads} must divide hidden {self.hidden}, kv_heads {self.kv_heads} "
                             "must divide heads")
        if self.top_k > self.experts:
            raise ValueError(f"top_k {self.top_k} exceeds the {self.experts} experts")
        if self.experts % self.ep:
            raise ValueError(f"ep {self.ep} must divide the {self.experts} experts")
        if self.shared_expert_ffn < 0:
            raise ValueError(f"shared_expert_ffn must be >= 0, got {self.shared_expert_ffn}")

    @property
    def local_experts(self) -> int:
        return self.experts // self.ep


def build_moe(cfg: MoEConfig, rank: int = 0, seed: int = 0, annotate: bool = True):
    """The model of EP rank `rank` (an nn.Module whose `blocks` are its layers): every dense parameter
    (the same on every rank for one `seed`) and the experts rank x E/EP .. (rank + 1) x E/EP - 1, each
    initialised from (seed, its global index), so a run's experts do not depend on EP."""
    torch = require_torch()
    nn, F = torch.nn, torch.nn.functional
    from .llama import attention_module, rope_tables

    rf = torch.profiler.record_function if annotate else (lambda _name: _Null())
    dist = torch.distributed
    d = cfg.hidden // cfg.heads
    first = rank * cfg.local_experts

    class SwiGLU(nn.Module):
        def __init__(self, width: int):
            super().__init__()
            self.w1 = nn.Linear(cfg.hidden, width, bias=False)   # gate
            self.w3 = nn.Linear(cfg.hidden, width, bias=False)   # up
            self.w2 = nn.Linear(width, cfg.hidden, bias=False)   # down

        def forward(self, x):
            return self.w2(F.silu(self.w1(x)) * self.w3(x))

    def a2a(x, out_splits: list, in_splits: list):
        """Differentiable variable all-to-all (its backward sends the gradients back the same way)."""
        from torch.distributed.nn.functional import all_to_all_single

        out = x.new_empty((sum(out_splits), *x.shape[1:]))
        return all_to_all_single(out, x, out_splits, in_splits)

    class MoE(nn.Module):
        def __init__(self):
            super().__init__()
            self.router = nn.Linear(cfg.hidden, cfg.experts, bias=False)
            self.experts = nn.ModuleList(SwiGLU(cfg.expert_ffn) for _ in range(cfg.local_experts))
            self.shared = SwiGLU(cfg.shared_expert_ffn) if cfg.shared_expert_ffn else None

        def forward(self, x):
            b, s, h = x.shape
            x = x.reshape(b * s, h)
            k, E, El = cfg.top_k, cfg.experts, cfg.local_experts
            with rf(part_name("router")):
                probs = F.softmax(self.router(x), dim=-1, dtype=torch.float32)
                top_p, top_e = torch.topk(probs, k, dim=-1)
                top_p = (top_p / top_p.sum(dim=-1, keepdim=True)).to(x.dtype)
            with rf(part_name("permute")):
                flat = top_e.reshape(-1)
                order = torch.argsort(flat, stable=True)          # (token, pick) pairs grouped by expert
                rows = x.index_select(0, order // k)
                counts = torch.bincount(flat, minlength=E)        # rows this rank sends to each expert
            if cfg.ep > 1:
                with rf(part_name("dispatch")):
                    # [source rank, local expert]: the rows each rank sends to each of this rank's experts
                    got = torch.empty_like(counts)
                    dist.all_to_all_single(got, counts)
                    got = got.view(cfg.ep, El)
                    send = counts.view(cfg.ep, El).sum(1).tolist()
                    recv = got.sum(1).tolist()
                    rows = a2a(rows, recv, send)
                    # rows arrive by source rank, then expert; regroup them by expert, then source
                    chunks = rows.split(got.reshape(-1).tolist())
                    by_expert = [chunks[src * El + e] for e in range(El) for src in range(cfg.ep)]
                    rows = torch.cat(by_expert)
                    per_expert = got.sum(0).tolist()
            else:
                per_expert = counts.tolist()
            with rf(part_name("experts")):
                outs = []
                for e, (expert, part) in enumerate(zip(self.experts, rows.split(per_expert))):
                    with rf(part_name("expert", first + e)):
                        outs.append(expert(part))
                y = torch.cat(outs)
            if cfg.ep > 1:
                with rf(part_name("combine")):
                    # back to source-rank order, then to the ranks the rows came from
                    parts = y.split([int(got[src, e]) for e in range(El) for src in range(cfg.ep)])
                    y = torch.cat([parts[e * cfg.ep + src] for src in range(cfg.ep) for e in range(El)])
                    y = a2a(y, send, recv)
            with rf(part_name("unpermute")):
                w = top_p.reshape(-1).index_select(0, order).unsqueeze(1)
                out = torch.zeros_like(x).index_add(0, order // k, y * w)
            if self.shared is not None:
                with rf(part_name("shared_expert")):
                    out = out + self.shared(x)
            return out.view(b, s, h)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention_norm = nn.RMSNorm(cfg.hidden)
            self.attention = attention_module(cfg.hidden, cfg.heads, cfg.kv_heads)
            self.ffn_norm = nn.RMSNorm(cfg.hidden)
            self.moe = MoE()

        def forward(self, x, cos, sin):
            x = x + self.attention(self.attention_norm(x), cos, sin)
            return x + self.moe(self.ffn_norm(x))

    class MoEModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok_embeddings = nn.Embedding(cfg.vocab, cfg.hidden)
            self.blocks = nn.ModuleList(Block() for _ in range(cfg.layers))
            self.norm = nn.RMSNorm(cfg.hidden)
            self.output = nn.Linear(cfg.hidden, cfg.vocab, bias=False)
            cos, sin = rope_tables(cfg.seq, d)
            self.register_buffer("cos", cos, persistent=False)
            self.register_buffer("sin", sin, persistent=False)

        def forward(self, tokens):
            x = self.tok_embeddings(tokens)
            for block in self.blocks:
                x = block(x, self.cos, self.sin)
            return self.output(self.norm(x))

    torch.manual_seed(seed)
    model = MoEModel()
    with torch.no_grad():    # the experts from (seed, global index), whatever EP holds them
        for block_i, block in enumerate(model.blocks):
            for e, expert in enumerate(block.moe.experts):
                gen = torch.Generator().manual_seed(seed * 1_000_003 + block_i * 1009 + first + e)
                for lin in (expert.w1, expert.w3, expert.w2):
                    bound = 1.0 / lin.in_features ** 0.5
                    lin.weight.copy_(torch.rand(lin.weight.shape, generator=gen) * 2 * bound - bound)
    return model


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def expert_parameters(model) -> set[int]:
    """ids of the routed experts' parameters: local to their rank, never all-reduced."""
    return {id(p) for block in model.blocks for p in block.moe.experts.parameters()}


def _rank_main(rank: int, cfg: MoEConfig, out_dir: str, steps: int, warmup: int, microbatches: int, seed: int,
               annotate: bool, with_stack: bool, threads: int, store: str | None, pin: bool = False,
               local_rank: int | None = None) -> str:
    """One EP rank: pinned to one core where `pin` (the `local_rank`-th, default `rank`), join the group
    (when EP > 1), train and profile; the trace path."""
    if pin:
        from .affinity import pin_to_core

        pin_to_core(rank if local_rank is None else local_rank)   # before torch starts its threads
    torch = require_torch()
    dist = torch.distributed
    torch.set_num_threads(threads)
    own = False
    if cfg.ep > 1 and not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.FileStore(store, cfg.ep), rank=rank, world_size=cfg.ep)
        own = True
    try:
        return str(_train(rank, cfg, out_dir, steps, warmup, microbatches, seed, annotate, with_stack, threads))
    finally:
        if own:
            dist.destroy_process_group()


def _train(rank, cfg, out_dir, steps, warmup, microbatches, seed, annotate, with_stack, threads) -> Path:
    torch = require_torch()
    from .affinity import cores
    from .gpt import GradBuckets
    from .profile import profile_steps

    model = build_moe(cfg, rank=rank, seed=seed, annotate=annotate)
    buckets = GradBuckets(model, torch.device("cpu"), side_stream=False, annotate=annotate,
                          exclude=expert_parameters(model))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(seed * 1009 + rank)      # each EP rank its own tokens (DP = EP)
    data = [torch.randint(cfg.vocab, (cfg.micro_batch, cfg.seq + 1), generator=gen) for _ in range(microbatches)]
    loss_fn = torch.nn.functional.cross_entropy

    def step():
        for j, batch in enumerate(data):
            buckets.armed = j == microbatches - 1
            logits = model(batch[:, :-1])
            loss = loss_fn(logits.reshape(-1, cfg.vocab), batch[:, 1:].reshape(-1)) / microbatches
            loss.backward()
        buckets.finish()
        opt.step()
        opt.zero_grad(set_to_none=True)

    meta = {"model": "moe", **asdict(cfg), "microbatches": microbatches, "seed": seed, "threads": threads,
            "cpus": cores(), "load_average": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg")
            else None}   # the host's 1, 5 and 15 minute load as the rank started: what else shared its cores
    return profile_steps(step, steps=steps, warmup=warmup, out_dir=out_dir, rank=rank, world_size=cfg.ep,
                         model=model, annotate=annotate, with_stack=with_stack, device="cpu",
                         metadata=meta)


def run_moe(cfg: MoEConfig, *, out_dir: str | os.PathLike, steps: int = 3, warmup: int = 1, microbatches: int = 1,
            seed: int = 0, annotate: bool = True, with_stack: bool = False, threads: int | None = None,
            pin_core: bool = False) -> list[Path]:
    """Train `cfg` on the CPU for wait + warmup + steps iterations under the profiler, on `cfg.ep` ranks
    (spawned here, or this process's rank under torchrun); the trace paths this process wrote or saw
    written. `threads`: intra-op threads per rank (default: the cores this process may use over EP, at
    least 1). `pin_core`: each rank on one core of those this process may use (rank R on the R-th, modulo
    their count; under torchrun the LOCAL_RANK-th), as `capture gpt --pin-core`."""
    torch = require_torch()
    from .affinity import cores

    if microbatches < 1 or steps < 1 or warmup < 0:
        raise ValueError("micro-batches and steps must be >= 1, warmup >= 0")
    threads = threads or max(1, len(cores() or [0] * (os.cpu_count() or 1)) // cfg.ep)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:     # under torchrun: this process is one rank
        if world != cfg.ep:
            raise ValueError(f"--ep {cfg.ep} but torchrun started {world} processes; they must be equal")
        dist = torch.distributed
        if not dist.is_initialized():
            dist.init_process_group("gloo")
        return [Path(_rank_main(dist.get_rank(), cfg, str(out_dir), steps, warmup, microbatches, seed, annotate,
                                with_stack, threads, None, pin_core, int(os.environ.get("LOCAL_RANK", "0"))))]
    if cfg.ep == 1:
        return [Path(_rank_main(0, cfg, str(out_dir), steps, warmup, microbatches, seed, annotate, with_stack,
                                threads, None, pin_core))]
    import torch.multiprocessing as mp

    from .profile import trace_path_for_rank

    with tempfile.TemporaryDirectory(prefix="lumos-moe-") as tmp:
        mp.start_processes(_rank_main, args=(cfg, str(out_dir), steps, warmup, microbatches, seed, annotate,
                                             with_stack, threads, os.path.join(tmp, "store"), pin_core),
                           nprocs=cfg.ep, start_method="spawn", join=True)
    return [trace_path_for_rank(out_dir, r) for r in range(cfg.ep)]


def add_arguments(p) -> None:
    """`lumos capture moe`'s flags."""
    d = MoEConfig()
    for flag, key, what in (("--layers", "layers", "transformer blocks"), ("--hidden", "hidden", "model width"),
                            ("--heads", "heads", "query heads"),
                            ("--kv-heads", "kv_heads", "key/value heads (grouped-query attention)"),
                            ("--experts", "experts", "routed experts in all"),
                            ("--top-k", "top_k", "experts each token is routed to"),
                            ("--expert-ffn", "expert_ffn", "each expert's SwiGLU width"),
                            ("--shared-expert-ffn", "shared_expert_ffn", "the shared expert's width; 0: none"),
                            ("--seq", "seq", "sequence length"),
                            ("--micro-batch", "micro_batch", "sequences per micro-batch and rank"),
                            ("--vocab", "vocab", "vocabulary size"),
                            ("--ep", "ep", "expert-parallel ranks (gloo; each holds experts / ep experts)")):
        p.add_argument(flag, type=int, default=getattr(d, key), help=f"{what} (default %(default)s)")
    p.add_argument("--micro-batches", type=int, default=1, help="micro-batches per iteration (default %(default)s)")
    p.add_argument("--steps", type=int, default=3, help="profiled iterations (default %(default)s)")
    p.add_argument("--warmup", type=int, default=1, help="profiled-but-discarded iterations (default %(default)s)")
    p.add_argument("--threads", type=int, default=None,
                   help="intra-op threads per rank (default: the cores this process may use over --ep, at least 1)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the parameters and, with the rank, of the tokens (default %(default)s)")
    p.add_argument("--no-annotate", dest="annotate", action="store_false",
                   help="write no range of ours but ProfilerStep#N (the layers are then found by the predictor)")
    p.add_argument("--with-stack", action="store_true", help="record Python stacks (module calls) too")
    p.add_argument("--pin-core", action="store_true",
                   help="run each rank on one core of those it may use (rank R on the R-th, modulo their count), as "
                        "`capture gpt --pin-core`: ranks the scheduler moves between cores wait on each other's "
                        "all-to-alls far longer and far more variably")
    p.add_argument("--out", required=True, help="output directory (rank{R}.json.gz, one per EP rank)")


def run_from_args(args) -> list[Path]:
    cfg = MoEConfig(layers=args.layers, hidden=args.hidden, heads=args.heads, kv_heads=args.kv_heads,
                    experts=args.experts, top_k=args.top_k, expert_ffn=args.expert_ffn,
                    shared_expert_ffn=args.shared_expert_ffn, seq=args.seq, micro_batch=args.micro_batch,
                    vocab=args.vocab, ep=args.ep)
    paths = run_moe(cfg, out_dir=args.out, steps=args.steps, warmup=args.warmup, microbatches=args.micro_batches,
                    seed=args.seed, annotate=args.annotate, with_stack=args.with_stack, threads=args.threads,
                   pin_core=args.pin_core)
    for path in paths:
        print(f"wrote {path}")
    return paths
