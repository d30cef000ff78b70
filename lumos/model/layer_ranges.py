"""What both layer finders read and write: a thread's top-level ops, the ranges around layers.

`recover` (layers by repetition) and `module_calls` (layers from the profiler's module events)
find a stage's transformer layers in different ways, then do the same things with them: walk
each thread's outermost CPU ops (`op_threads`), tell which process group an op's collectives
used (`op_groups`), frame the layers with the embedding, head and optimizer ranges around
them (`framing`), and append the ranges to the table as annotation rows `find_structure` reads
(`with_ranges`). How a rank's layers were found is a `Recovery`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from lumos.trace import TraceTable, schema
from lumos.trace.annotation import ANN, EMBEDDING, HEAD, range_name

from .nesting import innermost
from .ops import GEMM_OPS
from .structure import EMBEDDING_OPS, P2P_OP

__all__ = ["P2P_OPS", "COPY_OPS", "OPTIMIZER_STEP", "Recovery", "Thread", "is_gemm", "is_backward",
           "has_layer_ranges", "op_threads", "op_groups", "op_range", "framing", "with_ranges"]

P2P_OPS = (P2P_OP, "c10d::send", "c10d::recv_", "c10d::isend", "c10d::irecv")
COPY_OPS = ("aten::copy_", "aten::to", "aten::_to_copy")
OPTIMIZER_STEP = "Optimizer.step#"   # torch.optim's own record_function
GEMM_BACKWARD = re.compile(r"(Addmm|Mm|Bmm|Linear|Matmul)Backward\d*$")
BACKWARD = re.compile(r"^autograd::engine|_backward|backward\d+$", re.IGNORECASE)


def is_gemm(name: str) -> bool:
    """A matrix multiply, forward (`aten::linear`) or as autograd names its backward (`AddmmBackward0`)."""
    return name in GEMM_OPS or bool(GEMM_BACKWARD.search(name))


def is_backward(name: str) -> bool:
    """An op of the backward pass: autograd's `evaluate_function: XBackward0`, `aten::*_backward*`
    (not a forward op whose name merely says Backward, such as our capture's `_OpenInBackward`)."""
    return bool(BACKWARD.search(name))


@dataclass
class Recovery:
    """How a rank's layers were found, for the user to see (`lumos replay --structure`)."""
    source: str                  # annotations | modules | repetition | none
    layers_per_stage: int = 0
    microbatches: int = 0
    forward_period: int = 0      # top-level CPU ops per layer forward
    backward_period: int = 0
    note: str = ""

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def has_layer_ranges(table: TraceTable) -> bool:
    ann = table.name[table.cat == schema.ANNOTATION]
    return any(ANN.match(str(n)) for n in ann)


@dataclass
class Thread:
    rows: np.ndarray          # outermost cpu_op rows, in time order
    tokens: np.ndarray        # int per row
    in_optimizer: np.ndarray  # bool per row: inside torch's `Optimizer.step#` range


def op_threads(table: TraceTable, vocab: dict, window: tuple | None) -> list[Thread]:
    ops = np.flatnonzero(table.cat == schema.CPU_OP)
    if window is not None:
        ops = ops[(table.ts[ops] >= window[0]) & (table.ts[ops] < window[1])]
    top = innermost(table, ops, table.pid[ops], table.tid[ops], table.ts[ops], outermost=True)
    outer = ops[(top == ops) | (top < 0)]
    key = table.pid[outer] * (1 << 32) + (table.tid[outer] & 0xFFFFFFFF)
    steps = np.flatnonzero((table.cat == schema.ANNOTATION)
                           & np.char.startswith(table.name.astype(str), OPTIMIZER_STEP))
    out = []
    for k in np.unique(key):
        rows = outer[key == k]
        rows = rows[np.argsort(table.ts[rows], kind="stable")]
        keys = [(str(table.name[r]), str(table.input_dims[r])) for r in rows]
        opt = innermost(table, steps, table.pid[rows], table.tid[rows], table.ts[rows]) >= 0
        out.append(Thread(rows, np.array([vocab.setdefault(k, len(vocab)) for k in keys], dtype=np.int64), opt))
    return out


def op_groups(table: TraceTable, threads: list[Thread]) -> dict[int, str]:
    """Outermost op row -> the process group of the collectives it launched."""
    runtime = {int(c): r for r, c in zip(np.flatnonzero(table.cat == schema.RUNTIME),
                                         table.corr[table.cat == schema.RUNTIME]) if c >= 0}
    comm = np.flatnonzero(table.is_gpu() & (table.coll_name != None))  # noqa: E711
    calls = np.array([runtime.get(int(table.corr[g]), -1) for g in comm], dtype=np.int64)
    ok = calls >= 0
    comm, calls = comm[ok], calls[ok]
    outer = np.concatenate([t.rows for t in threads]) if threads else np.zeros(0, np.int64)
    top = innermost(table, outer, table.pid[calls], table.tid[calls], table.ts[calls], outermost=True)
    return {int(o): str(table.pg_ranks[g]) for o, g in zip(top, comm) if o >= 0}


def _around(table: TraceTable, rows: np.ndarray, names: list[str], hard: np.ndarray, soft: np.ndarray,
            first: int, last: int, phase: str, mb: int) -> list[dict]:
    """Embedding and head ranges of one micro-batch's forward or backward (positions `first` to
    `last` on its thread): in the stretches before and after it, up to a hard stop."""
    lo, hi = first, last
    while lo > 0 and not hard[lo - 1]:
        lo -= 1
    while hi < len(rows) and not hard[hi]:
        hi += 1
    before = [i for i in range(lo, first) if not soft[i]]
    after = [i for i in range(last, hi) if not soft[i]]
    out = []

    def add(idx, name):
        if idx:
            out.append(op_range(table, rows[idx[0]:idx[-1] + 1], name))

    def embedding_start(idx):
        """Where the embedding begins: after the longest pause before its lookup (the thread
        idles while the previous micro-batch's backward runs), taking the input copy before it."""
        emb = [n for n, i in enumerate(idx) if names[i] in EMBEDDING_OPS]
        if not emb:
            return None
        j = emb[0]
        if j:
            gaps = table.ts[rows[idx[1:j + 1]]] - (table.ts[rows[idx[:j]]] + table.dur[rows[idx[:j]]])
            j = int(np.argmax(gaps)) + 1
            if j < emb[0]:
                return j
        while j > 0 and names[idx[j - 1]] in COPY_OPS:
            j -= 1
        return j

    gemm = lambda idx: any(is_gemm(names[i]) for i in idx)  # noqa: E731
    if phase == "forward":
        j = embedding_start(before)
        if j is not None:
            add(before[j:], range_name(EMBEDDING, "forward", mb))
        j = embedding_start(after)   # the next micro-batch's embedding, when one thread runs both
        head = after if j is None else after[:j]
        b = [n for n, i in enumerate(head) if is_backward(names[i])]  # and its backward
        head = head[:b[0]] if b else head
        if gemm(head):
            add(head, range_name(HEAD, "forward", mb))
    else:
        emb_bwd = lambda i: "embedding" in names[i].lower() and is_backward(names[i])  # noqa: E731
        emb = [n for n, i in enumerate(after) if emb_bwd(i)]
        if emb:
            add(after[:emb[-1] + 1], range_name(EMBEDDING, "backward", mb))
        done = [n for n, i in enumerate(before) if emb_bwd(i)]  # the previous micro-batch's
        head = before[done[-1] + 1:] if done else before
        b = [n for n, i in enumerate(head) if is_backward(names[i])]
        head = head[b[0]:] if b else head
        if gemm(head):
            add(head, range_name(HEAD, "backward", mb))
    return out


def op_range(table: TraceTable, rows: np.ndarray, name: str) -> dict:
    end = float(np.max(table.ts[rows] + table.dur[rows]))
    return {"name": name, "pid": int(table.pid[rows[0]]), "tid": int(table.tid[rows[0]]),
            "ts": float(table.ts[rows[0]]), "end": end}


def framing(table: TraceTable, th: Thread, layer: np.ndarray, chunks: list, groups: dict, tp_group) -> list[dict]:
    """Embedding, head and optimizer ranges on one thread, around its layers: `layer` marks the
    thread's top-level ops inside a layer range, `chunks` holds (phase, micro-batch, first
    position, end position) of each micro-batch's run of layers."""
    names_ = [str(table.name[r]) for r in th.rows]
    p2p = np.array([n in P2P_OPS for n in names_], dtype=bool)
    in_step = np.array([n.startswith(OPTIMIZER_STEP) for n in names_], dtype=bool) | th.in_optimizer
    hard = layer | p2p | in_step
    # a collective outside the layers' group (a gradient reduction) is passed over, not taken
    soft = np.array([groups.get(int(r)) not in (None, tp_group) for r in th.rows], dtype=bool)
    out = []
    for ph, mb, first, end in chunks:
        out += _around(table, th.rows, names_, hard, soft, first, end, ph, mb)
    step = np.flatnonzero(in_step)
    if len(step):   # the optimizer: from the last layer or exchange before torch's step to the thread's end
        before = np.flatnonzero((layer | p2p)[:step[0]])
        lo = int(before[-1]) + 1 if len(before) else 0
        out.append(op_range(table, th.rows[lo:], "optimizer"))
    return out


def with_ranges(table: TraceTable, ranges: list[dict]) -> TraceTable:
    """`table` with `ranges` appended as user_annotation rows (existing rows keep their index)."""
    if not ranges:
        return table
    n = len(ranges)
    kw = {}
    for c in table.columns():
        col = getattr(table, c)
        if c == "name":
            extra = np.array([r["name"] for r in ranges], dtype=object)
        elif c == "cat":
            extra = np.full(n, schema.ANNOTATION, dtype=col.dtype)
        elif c in ("pid", "tid"):
            extra = np.array([r[c] for r in ranges], dtype=col.dtype)
        elif c == "ts":
            extra = np.array([r["ts"] for r in ranges])
        elif c == "dur":
            extra = np.array([r["end"] - r["ts"] for r in ranges])
        elif col.dtype == object:
            extra = np.full(n, None, dtype=object)
        else:
            extra = np.full(n, -1, dtype=col.dtype)
        kw[c] = np.concatenate([col, extra])
    return TraceTable(path=table.path, rank=table.rank, world_size=table.world_size, metadata=table.metadata,
                      unmodelled=table.unmodelled, **kw)
