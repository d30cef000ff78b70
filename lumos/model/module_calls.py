"""Transformer layers from the profiler's own module events (a trace recorded `with_stack=True`).

Such a trace holds a `python_function` event per module call, `nn.Module: GPT2Block_0`, nested
as the calls were. The layers are the calls of one class made from one parent module (the
blocks of a `ModuleList` are called one after another by their model): of all such sibling
groups with two or more instances, each call holding at least four matrix multiplies (QKV,
projection and the two MLP GEMMs), the one with the most time. Call j of the i-th instance to
run is layer i's forward of micro-batch j. Backward ops are tied to their layer by the
autograd sequence number their node got in the forward; a layer's backward range runs from
its first to its last such op on the thread that ran them. Embedding, head and optimizer are
found around the layers as for repetition (`recover.framing`).

A group whose instances run unequal numbers of calls (activation recomputation calls the
forward again inside the backward), or a trace without sequence numbers, gives nothing here:
the layers are then sought by repetition.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict

import numpy as np

from lumos.trace import TraceTable, schema
from lumos.trace.annotation import layer_block, range_name

from .layer_ranges import Recovery, framing, is_backward, is_gemm, op_groups, op_range, op_threads
from .nesting import innermost

MIN_GEMMS = 4
_INSTANCE = re.compile(r"_\d+$")


def _calls(table: TraceTable, window) -> tuple[np.ndarray, np.ndarray]:
    """Module-call rows in the window, in time order, and each one's parent call (-1: none)."""
    rows = np.flatnonzero(table.cat == schema.PY_MODULE)
    if window is not None:
        rows = rows[(table.ts[rows] >= window[0]) & (table.ts[rows] < window[1])]
    rows = rows[np.lexsort((-table.dur[rows], table.ts[rows]))]
    parent = np.full(len(rows), -1, dtype=np.int64)
    stacks: dict[tuple, list[int]] = defaultdict(list)
    for i, r in enumerate(rows.tolist()):
        st = stacks[(int(table.pid[r]), int(table.tid[r]))]
        while st and table.ts[rows[st[-1]]] + table.dur[rows[st[-1]]] <= table.ts[r]:
            st.pop()
        parent[i] = rows[st[-1]] if st else -1
        st.append(i)
    return rows, parent


def _outer_gemms(table: TraceTable) -> dict[tuple, np.ndarray]:
    """Start times of the outermost GEMM ops (`aten::linear` around `aten::addmm` counts once) per
    (pid, tid), sorted."""
    ops = np.flatnonzero(table.cat == schema.CPU_OP)
    gemm = ops[[is_gemm(str(n)) for n in table.name[ops]]]
    top = innermost(table, gemm, table.pid[gemm], table.tid[gemm], table.ts[gemm], outermost=True)
    gemm = gemm[top == gemm]
    out: dict[tuple, list] = defaultdict(list)
    for r in gemm.tolist():
        out[(int(table.pid[r]), int(table.tid[r]))].append(float(table.ts[r]))
    return {k: np.sort(np.array(v)) for k, v in out.items()}


def _gemms_in(table: TraceTable, row: int, outer: dict) -> int:
    at = outer.get((int(table.pid[row]), int(table.tid[row])))
    if at is None:
        return 0
    lo, hi = table.ts[row], table.ts[row] + table.dur[row]
    return int(np.searchsorted(at, hi, side="left") - np.searchsorted(at, lo, side="left"))


def layer_calls(table: TraceTable, window=None) -> tuple[str, list[list[int]]] | None:
    """(class, per instance in run order its call rows) of the layer group, or None."""
    rows, parent = _calls(table, window)
    if not len(rows):
        return None
    groups: dict[tuple, dict[str, list[int]]] = defaultdict(dict)
    for r, p in zip(rows.tolist(), parent.tolist()):
        name = str(table.name[r])[len(schema.MODULE_PREFIX):]
        key = (str(table.name[p]) if p >= 0 else None, _INSTANCE.sub("", name))
        groups[key].setdefault(name, []).append(r)
    outer = _outer_gemms(table)
    best, best_time = None, 0.0
    for (_, cls), inst in groups.items():
        calls = list(inst.values())
        if len(calls) < 2 or len({len(c) for c in calls}) > 1:
            continue
        total = float(sum(table.dur[r] for c in calls for r in c))
        if total <= best_time or any(_gemms_in(table, r, outer) < MIN_GEMMS for c in calls for r in c):
            continue
        best, best_time = (cls, sorted(calls, key=lambda c: table.ts[c[0]])), total
    return best


def find_module_ranges(tables: list[TraceTable], windows: list) -> tuple[list[list[dict]], list[Recovery]] | None:
    """Per table (stage order) the ranges to annotate and how they were found, or None when a
    stage's module events do not give its layers (then repetition is tried)."""
    ranges, found = [], []
    for stage, (table, window) in enumerate(zip(tables, windows)):
        got = _stage(stage, table, window)
        if got is None:
            return None
        ranges.append(got[0])
        found.append(got[1])
    return ranges, found


def _owners(table: TraceTable, per_instance: list[list[int]]) -> dict[int, tuple[int, int]]:
    """Autograd sequence number -> (layer, micro-batch) of the forward call whose op created it."""
    ops = np.flatnonzero((table.cat == schema.CPU_OP) & (table.seq >= 0))
    owner: dict[int, tuple[int, int]] = {}
    for i, calls in enumerate(per_instance):
        for j, r in enumerate(calls):
            lo, hi = table.ts[r], table.ts[r] + table.dur[r]
            inside = ops[(table.pid[ops] == table.pid[r]) & (table.tid[ops] == table.tid[r])
                         & (table.ts[ops] >= lo) & (table.ts[ops] < hi)]
            owner.update({int(q): (i, j) for q in table.seq[inside]})
    return owner


def _backward_spans(table: TraceTable, th, owner: dict) -> list[tuple[int, int, tuple]]:
    """(first position, end position, (layer, micro-batch)) of each layer's backward on a thread."""
    names_ = [str(table.name[r]) for r in th.rows]
    pos: dict[tuple, list[int]] = defaultdict(list)
    for p, (r, n) in enumerate(zip(th.rows.tolist(), names_)):
        lab = owner.get(int(table.seq[r])) if is_backward(n) else None
        if lab is not None:
            pos[lab].append(p)
    spans = sorted((min(v), max(v), lab) for lab, v in pos.items())
    out = []
    for n_, (lo, hi, lab) in enumerate(spans):   # an op of the next layer before this one's last: cut
        nxt = spans[n_ + 1][0] if n_ + 1 < len(spans) else len(th.rows)
        hi = min(hi, nxt - 1)
        # the leaf gradients' AccumulateGrad ops (no node, no sequence number) right after are the layer's
        while hi + 1 < nxt and table.seq[th.rows[hi + 1]] < 0 and is_backward(names_[hi + 1]):
            hi += 1
        out.append((lo, hi + 1, lab))
    return out


def _stage(stage: int, table: TraceTable, window) -> tuple[list[dict], Recovery] | None:
    lc = layer_calls(table, window)
    if lc is None:
        return None
    cls, per_instance = lc
    k, m = len(per_instance), len(per_instance[0])
    owner = _owners(table, per_instance)
    ths = op_threads(table, {}, window)
    spans = [_backward_spans(table, th, owner) for th in ths]
    if len({lab for sp in spans for _, _, lab in sp}) != k * m:
        return None
    out = [op_range(table, np.array([r]), range_name(layer_block(stage * k + i), "forward", j))
           for i, calls in enumerate(per_instance) for j, r in enumerate(calls)]
    groups = op_groups(table, ths)
    layer_groups: Counter = Counter()
    marked = []
    for th, bwd in zip(ths, spans):
        starts = table.ts[th.rows]
        layer = np.zeros(len(th.rows), dtype=bool)
        chunks: dict[tuple, list[int]] = defaultdict(list)
        for j, r in ((j, r) for calls in per_instance for j, r in enumerate(calls)):
            if table.pid[r] != table.pid[th.rows[0]] or table.tid[r] != table.tid[th.rows[0]]:
                continue
            at = np.flatnonzero((starts >= table.ts[r]) & (starts < table.ts[r] + table.dur[r]))
            if len(at):
                layer[at] = True
                chunks[("forward", j)] += [int(at[0]), int(at[-1]) + 1]
        for lo, hi, (i, j) in bwd:
            out.append(op_range(table, th.rows[lo:hi], range_name(layer_block(stage * k + i), "backward", j)))
            layer[lo:hi] = True
            chunks[("backward", j)] += [lo, hi]
        layer_groups.update(groups[int(r)] for r in th.rows[layer] if int(r) in groups)
        marked.append((th, layer, [(ph, j, min(v), max(v)) for (ph, j), v in
                                   sorted(chunks.items(), key=lambda kv: min(kv[1]))]))
    tp_group = layer_groups.most_common(1)[0][0] if layer_groups else None
    for th, layer, per_chunk in marked:
        out += framing(table, th, layer, per_chunk, groups, tp_group)
    note = (f"rank {table.rank}: {k} layers x {m} micro-batches per stage from the profiler's module events "
            f"({cls}; backward by autograd sequence number)")
    return out, Recovery("modules", layers_per_stage=k, microbatches=m, note=note)
