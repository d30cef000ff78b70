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
from .shapes import rewrite_width


def _mapping(shape, hidden: int, ffn: int) -> dict:
    h, f, t = shape.hidden, shape.ffn, shape.tp
    heads_new = max(shape.heads * hidden // h, 1)
    m = {}
    for old, new in ((h, hidden), (h // t, hidden // t), (3 * h // t, 3 * hidden // t),
                     (shape.heads // t, heads_new // t)):
        m.setdefault(old, new)
    m[f // t] = ffn // t   # FFN wins a tie with h: the FFN GEMMs dominate
    return m


def _resize_units(plan: Plan, out: Plan) -> None:
    """A sharded base's per-unit gathers and reduce-scatters at the new width: a layer unit's message
    scales with the layer's parameters, the root's (embedding or head) with the embedding's."""
    layer = layer_unit_bytes(plan)
    ratio_layer = out.shape.layer_params() / plan.shape.layer_params()
    ratio_root = out.shape.embed_params() / plan.shape.embed_params()
    scale_units(out, lambda nbytes: ratio_layer if abs(nbytes - layer) <= 0.5 else ratio_root)


def change_width(plan: Plan, hidden: int | None = None, ffn: int | None = None) -> Plan:
    hidden = hidden or plan.shape.hidden
    ffn = ffn or plan.shape.ffn
    if hidden == plan.shape.hidden and ffn == plan.shape.ffn:
        return plan
    refuse_rebucketing(plan, "a width change")
    if hidden % plan.tp or ffn % plan.tp:
        raise ValueError(f"hidden {hidden} and ffn {ffn} must be multiples of tp {plan.tp}")
    out = plan.clone()
    g, st = out.graph, out.st
    m = _mapping(plan.shape, hidden, ffn)
    act_ratio = hidden / plan.shape.hidden
    sh = plan.shape
    tokens = sh.seq * sh.micro_batch
    head_dim = sh.hidden // max(sh.heads, 1)
    heads_t = max(sh.heads // sh.tp, 1)
    new_heads_t = max(sh.heads * hidden // sh.hidden // sh.tp, 1)
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
        nd = rewrite_width(str(st.op_name[t]), d, m, tokens, head_dim, heads_t, new_heads_t)
        if nd is not None:
            op = str(st.op_name[t])
            if g.kind[t] == TaskKind.GPU:
                g.dur[t] = out.compute.retime(g.dur[t], ComputeSpec(op, d), ComputeSpec(op, nd), g.name[t])
            st.op_dims[t] = nd
    out.shape = copy.copy(plan.shape)
    out.shape.heads = max(plan.shape.heads * hidden // plan.shape.hidden, 1)
    out.shape.hidden, out.shape.ffn = hidden, ffn
    out.st.shape = out.shape
    if plan.sharding:
        _resize_units(plan, out)
    return out
