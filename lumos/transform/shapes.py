"""Rewrite an op's Input Dims for a new model width or micro-batch size, by the dimension's role.

Rewriting by value alone ("every 2048 becomes 3072") is wrong as soon as two roles
share a value, which real models do: an eager GPT with sequence 2048 and hidden
2048 has both in one activation [b, s, h], and with micro-batch 4 its token count
b*s = 8192 equals its FFN width. So each op kind is rewritten by position:

- GEMM (m, k, n): exactly one of the three is the token count T = b*s (m for the
  forward and the input gradient, k for the weight gradient); the other two are
  model widths, mapped through the width table. When T also equals a width, which
  of the equal values is called T does not change the FLOP ratio.
- attention (batch, seq, heads, head_dim) in the op's own layout: heads (width) or
  batch (micro-batch) change.
- anything else: in an activation ([b, s, ...] or Megatron's [s, b, ...] with 3+ dims,
  or [T, ...] with 2) the last dim is the feature width and b the batch; a 4-d tensor whose
  last dim is the head dim has its heads dim mapped instead; 1-d tensors (biases,
  LayerNorm weights) are widths; an in-place op (`add_`, `zero_`, ...: gradient
  accumulation, zeroing) on a tensor shaped like a GEMM weight works on a
  parameter and keeps its size when the batch changes.
"""

from __future__ import annotations

from lumos.durations.compute import ComputeSpec
from lumos.graph.model import TaskKind
from lumos.model.ops import GEMM_OPS, attention_bshd, gemm_mkn


def reshape_tasks(plan, tasks, rewrite) -> None:
    """Give each of `tasks` (of `plan`, changed in place) the Input Dims `rewrite(op, dims)` returns
    (None: unchanged) and re-time its kernel through the compute supplier. One rewrite and one
    re-timing rule per distinct (op, dims, kernel): a run holds the same few shapes in every
    micro-batch and layer."""
    g, st, comp = plan.graph, plan.st, plan.compute
    gpu = int(TaskKind.GPU)
    memo: dict = {}
    for t in tasks:
        d = st.op_dims[t]
        if d is None:
            continue
        op, name, is_gpu = st.op_name[t], g.name[t], g.kind[t] == gpu
        key = (op, d, name, is_gpu)
        try:
            nd, rule = memo[key]
        except KeyError:
            nd, rule = memo[key] = _reshaped(comp, rewrite, str(op), d, name, is_gpu)
        except TypeError:       # unhashable dims: no memo
            nd, rule = _reshaped(comp, rewrite, str(op), d, name, is_gpu)
        if nd is None:
            continue
        if rule is not None:
            g.dur[t] = comp.apply(g.dur[t], rule)
        st.op_dims[t] = nd


def reshape_gaps(plan, rewrite, edges=None) -> None:
    """A CPU capture's gaps inside its ops (`lumos.model.host_gaps`), each re-timed as its op (`rewrite`:
    as for `reshape_tasks`), in place; `edges` (a mask over the graph's edges): only those gaps."""
    gaps = plan.host_gaps
    if gaps is None or not len(gaps.edge):
        return
    g, comp = plan.graph, plan.compute
    memo: dict = {}
    for i, e in enumerate(gaps.edge.tolist()):
        if edges is not None and not edges[e]:
            continue
        op, d = gaps.op_name[i], gaps.op_dims[i]
        key = (op, d)
        try:
            nd, rule = memo[key]
        except KeyError:
            nd, rule = memo[key] = _reshaped(comp, rewrite, op, d, op, True)
        except TypeError:
            nd, rule = _reshaped(comp, rewrite, op, d, op, True)
        if nd is None:
            continue
        if rule is not None:
            g.lag[e] = comp.apply(g.lag[e], rule)
        gaps.op_dims[i] = nd


def _reshaped(comp, rewrite, op: str, d, name: str, is_gpu: bool) -> tuple:
    nd = rewrite(op, d)
    if nd is None or not (is_gpu or comp.host_ops):    # a CPU capture's ops are its compute
        return nd, None
    return nd, comp.rule(ComputeSpec(op, d), ComputeSpec(op, nd), name)


def _ints(d) -> tuple:
    return tuple(int(x) for x in d)


def _is_tensor(d) -> bool:
    return isinstance(d, tuple) and len(d) > 0 and all(isinstance(x, (int,)) or hasattr(x, "__index__")
                                                      for x in d)


def _gemm_dims(op: str, mkn: tuple) -> tuple:
    """Input Dims of `op` for (m, k, n), in the form `gemm_mkn` reads back."""
    m, k, n = mkn
    if op == "aten::linear":
        return ((m, k), (n, k))
    return ((m, k), (k, n))


def _attention_dims(op: str, old, bshd_new: tuple, kv: tuple | None = None):
    b, s, a, hd = bshd_new
    bo, so, ao, _ = attention_bshd(op, old)
    heads_second = attention_bshd(op, ((1, 2, 3, 4),))[1] == 3
    per_head = {ao: a, **({kv[0]: kv[1]} if kv else {})}     # query heads, and grouped KV heads
    new = []
    for d in old:
        if _is_tensor(d) and len(d) == 4:
            x = _ints(d)
            if heads_second:
                new.append((b if x[0] == bo else x[0], per_head.get(x[1], x[1]),
                            s if x[2] == so else x[2], x[3]))
            else:
                new.append((b if x[0] == bo else x[0], s if x[1] == so else x[1],
                            per_head.get(x[2], x[2]), x[3]))
        else:
            new.append(d)
    return tuple(new)


def map_tensors(dims, edit) -> tuple | None:
    """`dims` with `edit(x)` applied to each tensor's dims (a list of ints, edited in place; other
    entries kept); None if nothing changed."""
    out, changed = [], False
    for d in dims:
        if not _is_tensor(d):
            out.append(d)
            continue
        x = list(_ints(d))
        edit(x)
        changed |= tuple(x) != tuple(d)
        out.append(tuple(x))
    return tuple(out) if changed else None


def rewrite_width(op: str, dims, width: dict, tokens: int, head_dim: int, heads: int, new_heads: int,
                  kv: tuple | None = None):
    """Dims of `op` after mapping model widths through `width` ({old: new}); None if unchanged. `kv`:
    (KV heads per rank, new) of grouped-query attention, whose key / value tensors change with it."""
    if not dims:
        return None
    if op in GEMM_OPS:
        mkn = gemm_mkn(op, dims)
        if mkn is None:
            return None
        pos = mkn.index(tokens) if tokens in mkn else -1
        new = tuple(v if i == pos else width.get(v, v) for i, v in enumerate(mkn))
        return None if new == mkn else _gemm_dims(op, new)
    if "attention" in op:
        bshd = attention_bshd(op, dims)
        if bshd is None or bshd[2] != heads:
            return None
        return _attention_dims(op, dims, (bshd[0], bshd[1], new_heads, bshd[3]), kv=kv)

    def edit(x):
        if len(x) == 4 and x[-1] == head_dim and heads in x[1:3]:
            x[x.index(heads, 1)] = new_heads
        elif kv and len(x) == 4 and x[-1] == head_dim and kv[0] in x[1:3]:
            x[x.index(kv[0], 1)] = kv[1]        # a key tensor's rotary embedding: [s, b, KV heads/t, d]
        else:
            x[-1] = width.get(x[-1], x[-1])
    return map_tensors(dims, edit)


def rewrite_batch(op: str, dims, batch: int, tokens: int, ratio: float, params: frozenset,
                  heads_per_rank: int = 0):
    """Dims of `op` with the micro-batch scaled by `ratio`; None if unchanged.

    Unfused attention (Megatron's CoreAttention) folds batch and heads into one leading dim:
    its score bmms and the softmax / dropout on the scores are [b x heads_per_rank, s, ...].
    """
    if not dims:
        return None
    folded = batch * heads_per_rank
    if folded and op in ("aten::bmm", "aten::baddbmm") and any(
            _is_tensor(d) and len(_ints(d)) == 3 and _ints(d)[0] == folded for d in dims):
        def scale_folded(x):
            if len(x) == 3 and x[0] == folded:
                x[0] = int(round(folded * ratio))
        return map_tensors(dims, scale_folded)
    if op in GEMM_OPS:
        return _gemm_tokens(op, dims, tokens, int(round(tokens * ratio)))
    if "attention" in op:
        bshd = attention_bshd(op, dims)
        if bshd is None or bshd[0] != batch:
            return None
        return _attention_dims(op, dims, (int(round(batch * ratio)),) + tuple(bshd[1:]))
    out, changed = [], False
    for d in dims:
        if not _is_tensor(d) or (op.endswith("_") and _ints(d) in params):
            out.append(d)
            continue
        x = list(_ints(d))
        seq = tokens // max(batch, 1)
        if len(x) >= 3 and x[0] == batch and (x[1] == seq or x[1] != batch):
            x[0] = int(round(batch * ratio))                  # [b, s, ...] (eager PyTorch)
        elif len(x) >= 3 and x[0] == seq and x[1] == batch:
            x[1] = int(round(batch * ratio))                  # [s, b, ...] (Megatron)
        elif len(x) == 2 and x[0] == tokens:
            x[0] = int(round(tokens * ratio))
        elif folded and len(x) == 3 and x[0] == folded and x[1] == seq:
            x[0] = int(round(folded * ratio))                 # [b x heads, s, s] (unfused attention)
        changed |= tuple(x) != tuple(d)
        out.append(tuple(x))
    return tuple(out) if changed else None


def rewrite_seq(op: str, dims, batch: int, seq: int, new_seq: int, params: frozenset, heads_per_rank: int = 0):
    """Dims of `op` at sequence length `new_seq`; None if unchanged. The tokens of a GEMM (b x s), the
    sequence of attention (flash: its (b, s, heads, d); unfused: both sides of the [b x heads, s, s] scores)
    and of activations ([b, s, ...], [s, b, ...], [b x s, ...]) change; parameters do not."""
    if not dims:
        return None
    tokens, new_tokens = batch * seq, batch * new_seq
    folded = batch * heads_per_rank
    if folded and op in ("aten::bmm", "aten::baddbmm") and any(
            _is_tensor(d) and len(_ints(d)) == 3 and _ints(d)[0] == folded for d in dims):
        def scale_folded(x):
            if len(x) == 3 and x[0] == folded:
                x[1], x[2] = (new_seq if x[1] == seq else x[1]), (new_seq if x[2] == seq else x[2])
        return map_tensors(dims, scale_folded)
    if op in GEMM_OPS:
        return _gemm_tokens(op, dims, tokens, new_tokens)
    if "attention" in op:
        bshd = attention_bshd(op, dims)
        if bshd is None or bshd[1] != seq:
            return None
        return _attention_dims(op, dims, (bshd[0], new_seq, bshd[2], bshd[3]))
    out, changed = [], False
    for d in dims:
        if not _is_tensor(d) or (op.endswith("_") and _ints(d) in params):
            out.append(d)
            continue
        x = list(_ints(d))
        if len(x) >= 3 and x[0] == batch and x[1] == seq:
            x[1] = new_seq                                    # [b, s, ...] (eager PyTorch)
        elif len(x) >= 3 and x[0] == seq and x[1] == batch:
            x[0] = new_seq                                    # [s, b, ...] (Megatron)
        elif len(x) == 2 and x[0] == tokens:
            x[0] = new_tokens
        elif folded and len(x) == 3 and x[0] == folded and x[1] == seq:
            x[1] = new_seq                                    # [b x heads, s, s] (unfused attention)
            x[2] = new_seq if x[2] == seq else x[2]
        changed |= tuple(x) != tuple(d)
        out.append(tuple(x))
    return tuple(out) if changed else None


def _gemm_tokens(op: str, dims, tokens: int, new_tokens: int):
    """A GEMM's dims with its token dimension (the one equal to `tokens`) at `new_tokens`; None without one."""
    mkn = gemm_mkn(op, dims)
    if mkn is None or tokens not in mkn:
        return None
    new = list(mkn)
    new[mkn.index(tokens)] = new_tokens
    return _gemm_dims(op, tuple(new))


def parameter_shapes(op_names, op_dims) -> frozenset:
    """Shapes of GEMM weights (both orientations) seen in a run: tensors that are parameters."""
    shapes = set()
    seen = set()
    for op, d in zip(op_names, op_dims):
        if op in ("aten::addmm", "aten::linear") and d:
            try:
                if (op, d) in seen:
                    continue
                seen.add((op, d))
            except TypeError:       # unhashable dims: no memo
                pass
            mkn = gemm_mkn(str(op), d)
            if mkn is not None:
                shapes.add((mkn[1], mkn[2]))
                shapes.add((mkn[2], mkn[1]))
    return frozenset(shapes)
