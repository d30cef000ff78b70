"""Tensor-parallel degree: re-shard each layer's work and re-size its tensor-parallel collectives.

Megatron's layout (Shoeybi et al. 2019, Sec. 3; sequence parallelism: Korthikanti et
al. 2022, Sec. 4.2.2), which the base trace's shapes show and this transform follows:

- GEMMs: QKV and FC1 are column-parallel (their output width is 3h/t and f/t), the
  attention projection and FC2 row-parallel (their input width is h/t and f/t), the
  output layer vocabulary-parallel (v/t). Of a GEMM's two model widths exactly one is a
  shard; it becomes the shard at the new degree, the other (h) stays. Where a shard
  equals h (f/t == h), which of the two is called the shard does not change the FLOPs.
- Attention: heads/t per rank (flash attention's head dim; unfused attention's batched
  score matrices, b x heads/t of them).
- Element-wise work on a shard (the QKV copy, GeLU on f/t, the vocabulary softmax) shrinks
  with it; work on the full hidden state (LayerNorm, bias-dropout-add, residuals) is
  replicated on every rank without sequence parallelism, and split over the sequence
  (s/t) with it: the base has sequence parallelism when its tensor-parallel collectives
  are all-gathers and reduce-scatters.
- Tensor-parallel collectives keep their message (s x b x h activations), take the new
  group (NVLink inside a host; the network once TP spans hosts, through the collective
  supplier) and vanish at TP 1. Pipeline messages keep their size. Parameters per rank
  (DP gradient buckets, optimizer) follow from the new shape in the pipeline rebuild,
  which `transform` always runs after a TP change.

Every compute task is re-timed by the compute supplier from its old and new Input Dims. A sharded
(FSDP) base's per-unit gathers and reduce-scatters carry the rank's TP shard of each unit: their
message scales by old TP / new TP, and the rebuild re-groups them.
"""

from __future__ import annotations

import copy

import numpy as np

from lumos.durations import CollectiveSpec
from lumos.model.ops import GEMM_OPS, gemm_mkn

from .dp_shard_units import scale_units
from .plan import Plan, block_mask, refuse_rebucketing
from .shapes import _gemm_dims, _is_tensor, map_tensors, reshape_tasks, rewrite_width

SP_KINDS = ("allgather", "reduce_scatter")   # as `structure._read_collectives` names them
FFN_ACTIVATIONS = ("gelu", "silu", "swiglu", "relu")   # element-wise ops on FC1's output (f/t wide)


def tp_misfits(shape, tp: int) -> list[str]:
    """The sizes TP does not divide ('heads 4', ...): Megatron splits heads, hidden, FFN and
    vocabulary evenly over the TP ranks, and grouped-query attention's KV heads (Megatron-Core asserts
    num_query_groups % tensor_model_parallel_size == 0)."""
    sizes = [("heads", shape.heads), ("hidden", shape.hidden), ("ffn", shape.ffn), ("vocab", shape.vocab)]
    if shape.kv_heads and shape.kv_heads != shape.heads:
        sizes.append(("KV heads", shape.kv_heads))
    return [f"{what} {v}" for what, v in sizes if v % tp]


def check_tp(shape, tp: int) -> None:
    bad = tp_misfits(shape, tp) if tp >= 1 else []
    if tp < 1 or bad:
        raise ValueError(f"TP {tp} does not divide the model's {', '.join(bad) or 'degree'}")


def _shards(shape, tp: int) -> dict:
    """{width on one rank at the old degree: width at the new}, for every sharded width."""
    h, f, v, t = shape.hidden, shape.ffn, shape.vocab, shape.tp
    qkv, q, fc1 = shape.qkv_width(), shape.heads * shape.dhead, shape.fc1_width()
    m = {}
    for old, new in ((qkv // t, qkv // tp), (f // t, f // tp), (h // t, h // tp), (v // t, v // tp),
                     (q // t, q // tp), (fc1 // t, fc1 // tp)):
        m.setdefault(old, new)
    return m


def rewrite_tp(op: str, dims, shards: dict, hidden: int, tokens: int, head_dim: int, heads: int,
               new_heads: int, batch: int, seq: int, tp: tuple[int, int], sp: bool, kv: tuple | None = None):
    """Dims of `op` at the new TP degree (`tp` = (old, new)); None if unchanged. `kv`: grouped-query
    attention's (KV heads per rank, at the new degree), whose key / value tensors and rotary embeddings
    are re-sharded too (None: as many KV heads as query heads)."""
    if not dims:
        return None
    if op in GEMM_OPS and not (op == "aten::bmm" and _batched(dims, batch * heads)):
        mkn = gemm_mkn(op, dims)
        if mkn is None:
            return None
        pos = mkn.index(tokens) if tokens in mkn else -1
        others = [i for i in range(3) if i != pos]
        cand = [i for i in others if mkn[i] in shards and mkn[i] != hidden] or \
               [i for i in others if mkn[i] in shards]
        if not cand:
            return None
        new = list(mkn)
        new[cand[-1]] = shards[mkn[cand[-1]]]
        return _gemm_dims(op, tuple(new))
    if "attention" in op:
        return rewrite_width(op, dims, {}, tokens, head_dim, heads, new_heads, kv=kv)
    old_t, new_t = tp
    ffn_act = any(a in op for a in FFN_ACTIVATIONS)
    per_head = {heads: new_heads, **({kv[0]: kv[1]} if kv else {})}

    def edit(x):
        if kv and len(x) == 4 and x[-1] == head_dim and x[2] in per_head:
            x[2] = per_head[x[2]]               # [s, b, heads/t, d] (rotary embeddings of q and of k)
        elif len(x) == 3 and x[0] == batch * heads:
            x[0] = batch * new_heads            # unfused attention: b x heads/t score matrices
        elif x[-1] in shards and (x[-1] != hidden or ffn_act):
            x[-1] = shards[x[-1]]
        elif sp and len(x) >= 3 and x[0] == seq // old_t and x[-1] == hidden:
            x[0] = seq // new_t                 # sequence-parallel [s/t, b, h]
    return map_tensors(dims, edit)


def _batched(dims, n: int) -> bool:
    return any(_is_tensor(d) and len(d) == 3 and int(d[0]) == n for d in dims)


def change_tp(plan: Plan, tp: int | None) -> Plan:
    if tp is None or tp == plan.tp:
        return plan
    refuse_rebucketing(plan, f"a TP change ({plan.tp} -> {tp})")
    sh = plan.shape
    check_tp(sh, tp)
    out = plan.clone()
    g, st = out.graph, out.st
    shards = _shards(sh, tp)
    tokens = sh.seq * sh.micro_batch
    head_dim = sh.dhead
    heads_t, new_heads_t = sh.heads // sh.tp, sh.heads // tp
    is_coll = st.coll != None      # noqa: E711 (element-wise)
    is_tp = is_coll & (out.role == "tp")
    sp = any(str(st.coll[t]) in SP_KINDS for t in np.flatnonzero(is_tp))
    in_bucket = block_mask(st, ("bucket",))    # a layer's gradient bucket scales with its parameters in the rebuild
    for t in np.flatnonzero(is_tp & ~in_bucket).tolist():
        old = CollectiveSpec(st.coll[t], st.nbytes[t], st.group[t])
        start = (min(st.group[t]) // tp) * tp if st.group[t] else 0
        group = tuple(range(start, start + tp))
        g.dur[t] = 0.0 if tp == 1 else out.collectives.retime(g.dur[t], old,
                                                                CollectiveSpec(st.coll[t], st.nbytes[t], group))
        st.group[t] = group
    if plan.sharding:    # each unit's gather and reduce-scatter carries the rank's TP shard of its parameters
        scale_units(out, lambda nbytes: sh.tp / tp)
    kv = None if sh.kv == sh.heads else (sh.kv // sh.tp, sh.kv // tp)
    reshape_tasks(out, np.flatnonzero(~in_bucket & ~is_coll).tolist(),
                  lambda op, d: rewrite_tp(op, d, shards, sh.hidden, tokens, head_dim, heads_t, new_heads_t,
                                           sh.micro_batch, sh.seq, (sh.tp, tp), sp, kv=kv))
    out.shape = copy.copy(sh)
    out.shape.tp = tp
    out.st.shape = out.shape
    out.st.tp = tp
    out.tp = tp
    out.notes.append(f"TP {plan.tp} -> {tp}: GEMMs, attention heads and shard-wide element-wise work re-sharded"
                     + (f" ({'with' if sp else 'without'} sequence parallelism, as the base's TP collectives show); "
                        if np.any(is_tp) else "; ")
                     + ("TP collectives removed" if tp == 1 else "TP collectives re-grouped over "
                        + ("one host" if tp <= out.collectives.gpus_per_host else "hosts")
                        if np.any(is_tp) else "the base has no TP collective to re-group"))
    return out
