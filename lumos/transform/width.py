"""Hidden / FFN size: new tensor shapes; re-time the GEMM, attention, element-wise and TP/PP
communication tasks they touch.

Each task's Input Dims are rewritten by the dimension's role (`shapes.py`): a
model width equal to h, h/t, 3h/t or f/t becomes its new value (f/t is tried
before h when both match, which only matters when f/t == h and the FFN ratio
changes), heads/t in attention, never the token count or the sequence, even when
they share a value with a width. Compute tasks are
re-timed by the compute supplier (FLOP or byte ratio), tensor-parallel and
pipeline messages (s*b*h elements) scale with h through the collective supplier.
Parameter counts (DP buckets, optimizer) follow from the new shape when the
pipeline is rebuilt (`rebuild.py`), which `predict` always does after a width change.
"""

from __future__ import annotations

import copy

from lumos.durations import CollectiveSpec, ComputeSpec
from lumos.graph.model import TaskKind

from .dp_shard_units import layer_unit_bytes, scale_units
from .plan import Plan, refuse_rebucketing
from .shapes import reshape_gaps, rewrite_width


def resized(shape, hidden: int, ffn: int, kv_heads: int | None = None):
    """`shape` at a new width: heads grow with the hidden size at the same head dim; grouped-query
    attention keeps its KV heads (Llama 3 8B and 70B both have 8) unless `kv_heads` says, multi-head
    attention keeps one KV head per query head."""
    out = copy.copy(shape)
    out.heads = max(shape.heads * hidden // shape.hidden, 1)
    out.hidden, out.ffn = hidden, ffn
    if kv_heads is not None:
        out.kv_heads = 0 if kv_heads == out.heads else kv_heads
    elif shape.kv_heads and shape.kv_heads != shape.heads:
        out.kv_heads = shape.kv_heads
    return out


def _mapping(shape, new) -> dict:
    h, f, t = shape.hidden, shape.ffn, shape.tp
    m = {}
    for old, to in ((h, new.hidden), (h // t, new.hidden // t), (shape.qkv_width() // t, new.qkv_width() // t),
                    (shape.heads * shape.dhead // t, new.heads * new.dhead // t), (shape.heads // t, new.heads // t)):
        m.setdefault(old, to)
    m[f // t] = new.ffn // t   # FFN wins a tie with h: the FFN GEMMs dominate
    if shape.gated:
        m[2 * f // t] = 2 * new.ffn // t      # gate and up in one GEMM
    return m


def _resize_units(plan: Plan, out: Plan) -> None:
    """A sharded base's per-unit gathers and reduce-scatters at the new width: a layer unit's message
    scales with the layer's parameters, the root's (embedding or head) with the embedding's."""
    layer = layer_unit_bytes(plan)
    ratio_layer = out.shape.layer_params() / plan.shape.layer_params()
    ratio_root = out.shape.embed_params() / plan.shape.embed_params()
    scale_units(out, lambda nbytes: ratio_layer if abs(nbytes - layer) <= 0.5 else ratio_root)


def change_width(plan: Plan, hidden: int | None = None, ffn: int | None = None, kv_heads: int | None = None) -> Plan:
    """Hidden, FFN and (grouped-query attention) KV-head changes."""
    sh = plan.shape
    hidden = hidden or sh.hidden
    ffn = ffn or sh.ffn
    new = resized(sh, hidden, ffn, kv_heads)
    if hidden == sh.hidden and ffn == sh.ffn and new.kv == sh.kv:
        return plan
    refuse_rebucketing(plan, "a width change")
    if hidden % plan.tp or ffn % plan.tp:
        raise ValueError(f"hidden {hidden} and ffn {ffn} must be multiples of tp {plan.tp}")
    if new.heads % new.kv or new.kv % plan.tp:
        raise ValueError(f"{new.kv} KV heads must divide the {new.heads} query heads and be a multiple of tp {plan.tp}")
    out = plan.clone()
    g, st = out.graph, out.st
    m = _mapping(sh, new)
    act_ratio = hidden / sh.hidden
    tokens = sh.seq * sh.micro_batch
    head_dim = sh.dhead
    heads_t = max(sh.heads // sh.tp, 1)
    new_heads_t = max(new.heads // sh.tp, 1)
    kv = (sh.kv // sh.tp, new.kv // sh.tp) if sh.kv != sh.heads and new.kv != sh.kv else None
    for t in range(g.n_tasks):
        if st.task_block[t] >= 0 and st.blocks[st.task_block[t]].kind == "bucket":
            continue    # a layer's gradient bucket scales with its parameters in the rebuild
        d = st.op_dims[t]
        if st.coll[t] is not None:
            if out.role[t] in ("tp", "pp"):
                old = CollectiveSpec(st.coll[t], st.nbytes[t], st.group[t])
                st.nbytes[t] = st.nbytes[t] * act_ratio if st.nbytes[t] > 64 else st.nbytes[t]
                g.dur[t] = out.collectives.retime(g.dur[t], old, CollectiveSpec(st.coll[t], st.nbytes[t], st.group[t]))
            continue
        if d is None:
            continue
        nd = rewrite_width(str(st.op_name[t]), d, m, tokens, head_dim, heads_t, new_heads_t, kv=kv)
        if nd is not None:
            op = str(st.op_name[t])
            if g.kind[t] == TaskKind.GPU or out.compute.host_ops:    # a CPU capture's ops are its compute
                g.dur[t] = out.compute.retime(g.dur[t], ComputeSpec(op, d), ComputeSpec(op, nd), g.name[t])
            st.op_dims[t] = nd
    reshape_gaps(out, lambda op, d: rewrite_width(op, d, m, tokens, head_dim, heads_t, new_heads_t, kv=kv))
    out.shape = new
    out.st.shape = out.shape
    if plan.sharding:
        _resize_units(plan, out)
    return out
