"""Find the training program's structure in a base run: blocks, their roles, the model's shape.

A block is a contiguous stretch of one CPU thread's tasks that does one thing,
with the GPU ops those tasks launched:
- a layer / embedding / loss-head forward or backward of one micro-batch, from
  `user_annotation` ranges named `layer_{L}/forward/mb{i}`, `embedding/...`,
  `head/...` (Megatron/NeMo-style NVTX ranges; the contract is `lumos.trace.annotation`,
  see docs/prediction.md);
- a pipeline exchange: one `c10d::batch_isend_irecv` op (its send/recv kernels);
- a data-parallel gradient all-reduce issued outside any layer range;
- a layer's gradient bucket reduction (`grad_bucket_{L}/reduce`, as `lumos capture
  gpt` writes it, on a side stream or inline);
- the `optimizer` range (or torch's own `Optimizer.step#...` inside it); anything
  else is glue (e.g. `aten::zero_` at the start).
A range interrupted by a nested one (a bucket reduction inside a layer's backward)
stays one block: the tasks after the nested range rejoin the block they left.
The model shape (hidden, FFN, sequence, micro-batch, vocabulary, heads, TP) is
read from the GEMM, layer-norm, attention and embedding ops' Input Dims; a trace
whose element-wise kernels are fused into the GEMMs (no layer-norm or embedding
op) gives it from the GEMMs and attention alone (`infer_shape`).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

import numpy as np

from lumos.graph.model import Graph, TaskKind
from lumos.trace import TraceTable, schema
from lumos.trace.annotation import ANN as ANN, is_part, parse   # ANN: the layer / embedding / head ranges read as blocks
from lumos.trace.collectives import DTYPE_BYTES, classify_rows

from .checkpointing import recomputed_layers
from .launchers import by_correlation, launching_events, runtime_calls
from .nesting import innermost
from .layer_shape import RMS_NORM_OPS, ShapeDisagreement, read_layer
from .moe import MoEDisagreement, MoEReading
from .moe_blocks import read_moe_blocks
from .ops import GEMM_OPS, GROUPED_GEMM_OPS, attention_bshd, expert_gemms, gemm_mkn, grouped_mkn, is_batched
from .p2p_exchange import join_exchanges
from .parallel_layout import context_parallel, layer_chunks

BUCKET = re.compile(r"^grad_bucket_(\d+)/reduce$")   # lumos capture gpt: one layer's gradient reduction
OPTIMIZER = ("optimizer", "optimizer_step")
LAYER_NORM_OPS = ("aten::layer_norm", "aten::native_layer_norm")
EMBEDDING_OPS = ("aten::embedding", "aten::index_select", "aten::gather")
P2P_OP = "c10d::batch_isend_irecv"


@dataclass
class Block:
    kind: str             # layer | embedding | head | p2p | dp | optimizer | glue
    phase: str = ""       # forward | backward ('' for others)
    layer: int = -1
    mb: int = -1
    shape: tuple = ()     # p2p: collective names of its kernels in launch order
    rank: int = 0
    thread_role: int = 0  # 0 main thread, 1 autograd thread, ...
    tasks: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    start: float = 0.0
    overlapped: bool = False   # p2p: Megatron's overlapped exchange, no batch op (`p2p_exchange`)

    @property
    def key(self) -> tuple:
        return (self.kind, self.phase, self.layer, self.mb, self.shape)


@dataclass
class ModelShape:
    hidden: int
    ffn: int
    seq: int
    micro_batch: int
    vocab: int
    heads: int
    tp: int
    kv_heads: int = 0        # key/value heads (grouped-query attention); 0: as many as query heads
    head_dim: int = 0        # 0: hidden / heads
    gated: bool = False      # SwiGLU MLP (gate, up, down), not GPT's FC1 / FC2
    norm: str = field(default="", compare=False)   # layernorm | rmsnorm ('' where the trace has no norm op)
    moe_at: int = field(default=-1, compare=False)  # an MoE layer: its router's index among the layer's GEMMs
    evidence: dict = field(default_factory=dict, compare=False, repr=False)   # what each number was read from
    # an MoE layout (memory and search; 0: dense): experts in all, per rank, top-k, shared expert, and the
    # ranks that hold the same experts (the experts' optimizer state is sharded over them); `ffn` is each expert's
    moe_experts: int = 0
    moe_local: int = 0
    moe_top_k: int = 0
    moe_shared_ffn: int = 0
    moe_edp: int = 1
    # context-parallel ranks sharing each sequence (`seq` is one rank's part of it); set with the run's CP degree
    cp: int = field(default=1, compare=False)

    @property
    def kv(self) -> int:
        """Key/value heads (as many as the query heads without grouped-query attention)."""
        return self.kv_heads or self.heads

    @property
    def dhead(self) -> int:
        """Head dim."""
        return self.head_dim or self.hidden // max(self.heads, 1)

    def qkv_width(self) -> int:
        """The QKV projections' output width over all ranks: (heads + 2 KV heads) x head dim (3h for GPT)."""
        return (self.heads + 2 * self.kv) * self.dhead

    def fc1_width(self) -> int:
        """The MLP's first GEMM's output width over all ranks: f, or 2f where gate and up are one GEMM."""
        return 2 * self.ffn if self.gated else self.ffn

    @property
    def heads_span_hidden(self) -> bool:
        """heads x head dim == hidden (GPT, Llama, Mistral, Qwen; not Gemma): what width and TP rewrites assume."""
        return self.heads * self.dhead == self.hidden

    @property
    def gpt_layout(self) -> bool:
        """Multi-head attention and a GELU MLP: the layout every width / TP rewrite is built for."""
        return not self.gated and self.kv_heads in (0, self.heads)

    def layer_params(self) -> float:
        """Parameters of one transformer layer on one TP rank: Megatron's GPT layout (QKV, projection, FC1,
        FC2 with biases, two layer norms), or a Llama-style layer (GQA projections, SwiGLU's three GEMMs, two
        RMSNorms, no biases)."""
        h, f, t = self.hidden, self.ffn, self.tp
        if self.gpt_layout and not self.moe_experts:
            return (4 * h * h + 2 * h * f) / t + (3 * h + f) / t + 6 * h
        d = self.head_dim or h // self.heads
        kv = self.kv_heads or self.heads
        attn = h * (self.heads * d + 2 * kv * d) + self.heads * d * h
        per = 3 if self.gated else 2
        if self.moe_experts:   # the dense part: attention, the router, the shared expert (`expert_params` apart)
            return (attn + per * h * self.moe_shared_ffn) / t + h * self.moe_experts + 2 * h
        return (attn + per * h * f) / t + 2 * h

    def expert_params(self) -> float:
        """One MoE layer's routed experts on one rank (expert TP 1): its `moe_local` experts' MLPs."""
        return self.moe_local * (3 if self.gated else 2) * self.hidden * self.ffn if self.moe_experts else 0.0

    def embed_params(self) -> float:
        """Word embedding (split over TP) and GPT's learned position embedding, one row per position of the whole
        sequence: Megatron-Core's `LanguageModelEmbedding` sizes it `max_sequence_length` x hidden, which context
        parallelism does not split (each CP rank holds every position's row; its tokens are s / cp of them), so the
        gradients a CP rank all-reduces count `seq` x `cp` rows, not its `seq`."""
        return self.vocab * self.hidden / self.tp + self.seq * self.cp * self.hidden


@dataclass
class RunStructure:
    """Blocks of every rank of a base run graph, plus per-task communication facts."""
    blocks: list                     # Block, every rank, in program order per rank
    task_block: np.ndarray           # block index per task (-1: rendezvous / unassigned)
    coll: np.ndarray                 # object: collective name per task (None if not comm)
    group: np.ndarray                # object: process-group ranks per comm task
    nbytes: np.ndarray               # float: message bytes per comm task
    op_name: np.ndarray              # object: CPU op that launched the task (or the task's own op)
    op_dims: np.ndarray              # object: that op's Input Dims
    proc_role: np.ndarray            # int per processor: thread ordinal or stream id
    shape: ModelShape
    tp: int
    pp: int
    dp: int
    layers: int
    microbatches: int
    stage_of_rank: dict
    stage_params: dict               # rank -> parameter count of its stage (from the trace)
    recovery: list = field(default_factory=list)  # per rank: how its layers were found (`recover.py`)
    chunks: int = 1                  # model chunks per stage (interleaved 1F1B when > 1; `parallel_layout.layer_chunks`)
    stage_layers: tuple = ()         # layers each stage holds, in stage order
    chunk_layers: tuple = ()         # per stage, the layers of each of its chunks (where interleaved)
    cp: int = 1                      # context-parallel ranks per sequence (`parallel_layout`); dp counts them
    moe: MoEReading | None = None    # an MoE run: experts, top-k, EP, tokens per expert (`lumos.model.moe`)
    moe_error: str = ""              # an MoE run whose evidence disagrees: the one line that says how
    recomputed: frozenset = frozenset()   # layers whose backward re-runs their forward (`checkpointing.py`)


class StageMismatch(ValueError):
    """The run's ranks are not one per pipeline stage; what was read before that was found is kept."""

    def __init__(self, message: str, shape: ModelShape, moe: MoEReading | None, moe_error: str):
        super().__init__(message)
        self.shape, self.moe, self.moe_error = shape, moe, moe_error


def _rank_blocks(graph: Graph, table: TraceTable, tasks: np.ndarray, first_proc: int,
                 proc_role: np.ndarray, coll: np.ndarray, tp_group_size: int | None) -> list[Block]:
    cpu = tasks[graph.kind[tasks] == TaskKind.CPU]
    cev = graph.event[cpu]
    # a checkpointed layer's recomputed forward (`layer_{L}/recompute/mb{i}`, inside that layer's
    # backward range) is part of its backward, and an MoE layer's part ranges (`moe/router`, ...) are
    # parts of its forward: neither is a block of its own
    ann_rows = np.flatnonzero(table.cat == schema.ANNOTATION)
    ann_rows = ann_rows[[not n.startswith("ProfilerStep#") and "/recompute/" not in n and not is_part(n)
                         for n in map(str, table.name[ann_rows])]]
    op_rows = np.flatnonzero(table.cat == schema.CPU_OP)
    ann = innermost(table, ann_rows, table.pid[cev], table.tid[cev], graph.ts[cpu])
    top = innermost(table, op_rows, table.pid[cev], table.tid[cev], graph.ts[cpu], outermost=True)
    # launcher of each GPU task: the CPU task with the same correlation id
    calls = runtime_calls(table, cev)
    corr_to_cpu = dict(zip(table.corr[cev[calls]].tolist(), cpu[calls].tolist()))
    # each thread's tasks in time order, cut where the enclosing range (or top-level op) changes; a
    # cut back into a range still open (after a nested one) rejoins that range's block
    threads = graph.proc[cpu]
    _, first_seen, thread_of = np.unique(threads, return_index=True, return_inverse=True)
    seen_rank = np.argsort(np.argsort(first_seen))     # threads in the order their first task comes
    order = np.lexsort((graph.ts[cpu], seen_rank[thread_of.reshape(-1)]))
    key = np.where(ann >= 0, ann, -2 - top)[order]     # ("ann", a) or ("op", top) as one number
    cut = np.ones(len(order), bool)
    cut[1:] = (key[1:] != key[:-1]) | (threads[order][1:] != threads[order][:-1])
    blocks: list[Block] = []
    names: list[tuple] = []             # per block: its range's name, its top-level op's name
    seg_block = []
    open_ann: dict[tuple, int] = {}     # (thread, annotation event) -> its block, to rejoin after a nested range
    for i in np.flatnonzero(cut).tolist():
        o = int(order[i])
        p, a = int(threads[o]), int(ann[o])
        if a >= 0 and (p, a) in open_ann:
            seg_block.append(open_ann[(p, a)])
            continue
        if a >= 0:
            open_ann[(p, a)] = len(blocks)
        seg_block.append(len(blocks))
        blocks.append(Block(kind="glue", rank=int(table.rank), thread_role=int(proc_role[p]),
                            start=float(graph.ts[cpu[o]])))
        names.append((table.name[a] if a >= 0 else None, table.name[top[o]] if top[o] >= 0 else None))
    cpu_block = np.empty(len(cpu), np.int64)
    cpu_block[order] = np.asarray(seg_block, np.int64)[np.cumsum(cut) - 1]
    top_of = dict(zip(cpu[order].tolist(), top[order].tolist()))
    gpu = tasks[graph.kind[tasks] == TaskKind.GPU]
    if blocks:     # a kernel whose launch is not on record goes with the first block
        launcher = by_correlation(table.corr[cev[calls]], np.flatnonzero(calls), table.corr[graph.event[gpu]], -1)
        gpu_block = np.where(launcher >= 0, cpu_block[launcher], 0)
    else:
        gpu, gpu_block = gpu[:0], np.zeros(0, np.int64)
    # members of each block in the order they joined (its thread's tasks, then the kernels it
    # launched), sorted by kind, then time
    members = np.concatenate([cpu[order], gpu])
    member_block = np.concatenate([cpu_block[order], gpu_block])
    by_block = np.lexsort((np.arange(len(members)), graph.ts[members], graph.kind[members], member_block))
    members = members[by_block]
    bounds = np.searchsorted(member_block[by_block], np.arange(len(blocks) + 1))
    for b, (b_ann, b_top), lo, hi in zip(blocks, names, bounds[:-1], bounds[1:]):
        b.tasks = members[lo:hi]
        a = parse(b_ann) if b_ann else None
        mb_ = BUCKET.match(b_ann) if b_ann else None
        comm_kinds = [k for k in coll[b.tasks] if k is not None]
        if a is not None and a.is_block:     # the names ANN matches
            b.kind = a.kind                  # layer | embedding | head
            b.layer = a.first                # -1 for the embedding and the head
            b.phase, b.mb = a.phase, a.micro_batch
        elif mb_ and not comm_kinds:
            b.kind, b.layer = "bucket", int(mb_.group(1))
        elif b_ann in OPTIMIZER or (b_ann or "").startswith("Optimizer.step#"):
            b.kind = "optimizer"
        elif b_top == P2P_OP:
            b.kind = "p2p"
            gt = [t for t in b.tasks if coll[t] in ("send", "recv")]
            gt.sort(key=lambda t: graph.ts[t])
            b.shape = tuple(coll[t] for t in gt)
        elif comm_kinds and all(k == "allreduce" for k in comm_kinds):
            b.kind = "dp"
    blocks, _ = join_exchanges(blocks, names, graph, coll)    # Megatron's overlapped exchange: no batch op
    blocks = [part for b in blocks for part in _one_bucket_each(b, graph, coll, corr_to_cpu, table, top_of)]
    return sorted(blocks, key=lambda b: b.start)


def _one_bucket_each(b: Block, graph: Graph, coll: np.ndarray, corr_to_cpu: dict, table: TraceTable,
                     top_of: dict) -> list[Block]:
    """A data-parallel block that holds several all-reduces (DeepSpeed's `allreduce_gradients`
    range around every bucket of an iteration) as one block per bucket: the rebuild re-issues a
    DP block once per bucket of the target. Each bucket's block starts at the first host task of
    the top-level op that launches its all-reduce."""
    comm = [t for t in b.tasks if coll[t] is not None]
    if b.kind != "dp" or len(comm) < 2:
        return [b]
    cpu = [int(t) for t in b.tasks if graph.kind[t] == TaskKind.CPU]
    cpu.sort(key=lambda t: graph.ts[t])
    launcher = {int(t): corr_to_cpu.get(int(table.corr[graph.event[t]]), -1) for t in comm}
    firsts = {}
    for t in cpu:
        firsts.setdefault(top_of.get(t, -1), t)
    cuts = sorted({firsts[top_of.get(launcher[t], -1)] for t in comm if launcher[t] in top_of})
    if len(cuts) < 2:
        return [b]
    pos = {t: k for k, t in enumerate(cpu)}
    seg_start = [pos[c] for c in cuts]
    seg_start[0] = 0                    # host work before the first bucket's op goes with it
    seg_of = {t: int(np.searchsorted(seg_start, pos[t], side="right") - 1) for t in cpu}
    parts: list[list[int]] = [[] for _ in seg_start]
    for t in b.tasks:
        t = int(t)
        if graph.kind[t] == TaskKind.CPU:
            parts[seg_of[t]].append(t)
        else:
            src = corr_to_cpu.get(int(table.corr[graph.event[t]]), -1)
            parts[seg_of.get(src, 0)].append(t)
    # every segment opens with a host task (its cut), so none is empty and each starts there
    return [dataclasses.replace(b, tasks=np.array(sorted(members, key=lambda t: (graph.kind[t], graph.ts[t])),
                                                  dtype=np.int64), start=float(graph.ts[cpu[k]]))
            for k, members in zip(seg_start, parts)]


def _dims_of(table: TraceTable, row: int):
    d = table.input_dims[row]
    return tuple(tuple(x) if isinstance(x, list) else x for x in d) if d is not None else None


def _is_shape_op(name: str) -> bool:
    return (name in GEMM_OPS or name in LAYER_NORM_OPS or name in RMS_NORM_OPS or name in EMBEDDING_OPS
            or "attention" in name or any(a in name for a in ("gelu", "silu", "swiglu")))


def _shape_ops(graph: Graph, by_rank: dict):
    """(op name, input dims, op row) per task of a run without kernels: the outermost GEMM,
    layer-norm, attention or embedding op around each CPU task.

    A CPU trace's tasks are its innermost ops (`aten::copy_` and `aten::view` under
    `aten::addmm` under `aten::linear`), so the op that says the shape is an ancestor.
    """
    n = graph.n_tasks
    name, dims, row = np.empty(n, dtype=object), np.empty(n, dtype=object), np.full(n, -1, dtype=np.int64)
    for r, table in by_rank.items():
        tasks = np.flatnonzero((graph.rank == r) & (graph.event >= 0) & (graph.kind == TaskKind.CPU))
        ops = np.flatnonzero(table.cat == schema.CPU_OP)
        ops = ops[[_is_shape_op(str(x)) for x in table.name[ops]]]
        ev = graph.event[tasks]
        outer = innermost(table, ops, table.pid[ev], table.tid[ev], table.ts[ev], outermost=True)
        for t, o in zip(tasks, outer):
            if o >= 0:
                name[t], dims[t], row[t] = table.name[o], _dims_of(table, o), r * (1 << 40) + o
    return name, dims, row


def _tp_groups(blocks: list, task_block: np.ndarray, coll, group) -> set:
    """Sizes of the groups of the all-reduces inside layer forward blocks (Megatron's TP all-reduces;
    an FSDP unit's all-gathers there are not counted)."""
    fwd = np.array([b.kind == "layer" and b.phase == "forward" for b in blocks] + [False], bool)[task_block]
    return {len(group[t]) for t in np.flatnonzero(fwd & (coll == "allreduce")).tolist()
            if group[t] and len(group[t]) > 1}


class ShapeError(ValueError):
    """The base trace does not say the model's shape: which file, which layer, and what is missing."""


def infer_shape(blocks: list, op_name, op_dims, is_gpu=None, op_row=None, paths=None,
                tp_groups: set = frozenset()) -> ModelShape:
    """Hidden, FFN, sequence, micro-batch, vocabulary, heads, KV heads, MLP kind and TP from one layer's
    op shapes (`layer_shape.read_layer`; `tp_groups`: the sizes of the TP all-reduces' groups there).

    The layer's GEMMs in launch order are its QKV projections (T x h -> ..., T = b*s tokens), the
    attention projection and its MLP (an unfused attention's batched products between them are not
    counted). The layer norm, when the trace has one, gives h (its weight) and the
    activation's two leading dims, and attention says which of them is the sequence
    (Megatron's activations are [s, b, h], an eager PyTorch model's [b, s, h]).

    A trace whose element-wise kernels are fused into their GEMMs (the emulator's
    `granularity=coarse`, or a user's fused kernels) has no layer-norm op: then h is the
    QKV GEMM's k and T its m, and attention splits T into (b, s): flash attention's own
    (batch, seq) or, unfused, the sequence of the score matrices [b x heads/t, s, s].
    Both sources give the same shape where both exist. Only the tasks `is_gpu` marks are
    read (kernels, or in a run without kernels the CPU tasks): cuBLAS may launch a memset
    before a GEMM. `op_row` is the trace row of each task's op; the tasks of one op
    (several kernels, or the leaf CPU ops under one `aten::addmm`) count once. `paths`
    ({rank: trace file}) names the file in the error when the shape cannot be read.

    The vocabulary is the first embedding lookup table [V/t, h]; a trace without the lookup
    (fused into the kernels around it) gives it from the head's logits GEMM (T x h -> V/t).
    """
    fwd = next((b for b in blocks if b.kind == "layer" and b.phase == "forward"), None)
    if fwd is None:
        raise ShapeError("no layer forward range (layer_{L}/forward/mb{i}) in the base trace")
    gemms, ln, attn, scores = [], None, None, None
    seen, attn_at, norm, acts, grouped, from_grouped = set(), None, "", set(), [], 0
    for t in fwd.tasks:
        n, d = op_name[t], op_dims[t]
        if is_gpu is not None and not is_gpu[t]:
            continue
        low = str(n).lower()
        acts |= {a for a in ("gelu", "silu", "swiglu", "swish", "relu") if a in low}
        if d is None:
            continue
        batched = n in ("aten::bmm", "aten::baddbmm") and is_batched(d)
        if batched and scores is None:
            scores = d   # unfused attention's first bmm: [b x heads, s, d] x [b x heads, d, s]
            attn_at = len(gemms)
        this = op_row[t] if op_row is not None else id(d)   # one dims tuple per op, shared by its tasks
        if n in GEMM_OPS and not batched:
            mkn = gemm_mkn(str(n), d)
            if mkn is not None and this not in seen:   # one op may launch several kernels
                gemms.append(mkn)
                seen.add(this)
        elif n in GROUPED_GEMM_OPS and this not in seen and grouped_mkn(d) is not None:
            seen.add(this)
            grouped.append(grouped_mkn(d))
            if len(grouped) == 2:   # an MoE's experts: FC1 and FC2 of every local expert
                experts = expert_gemms(*grouped)
                gemms.extend(experts)
                from_grouped = len(experts)
        elif (n in LAYER_NORM_OPS or n in RMS_NORM_OPS) and ln is None:
            ln, norm = d, "rmsnorm" if n in RMS_NORM_OPS else "layernorm"
        elif "attention" in low and attn is None:
            attn = attention_bshd(str(n), d)
            attn_at = len(gemms) if attn_at is None else attn_at
    where = (f"layer {fwd.layer} forward, micro-batch {fwd.mb} of "
             f"{(paths or {}).get(fwd.rank, f'rank {fwd.rank}')}")
    if ln is not None and not (ln[0] and len(ln[0]) == 3):
        ln = None                                   # a layer norm on [T, h]: read the GEMMs instead
    if len(gemms) < 4:
        raise ShapeError(f"cannot read the model shape: a layer forward needs 4 GEMMs (QKV, projection, "
                         f"FC1, FC2) with Input Dims, found {len(gemms)} in {where}")
    tokens = int(gemms[0][0])
    if ln is not None:
        x0, x1, h = (int(x) for x in ln[0])
        s, b = x0, x1                               # [s, b, h] unless attention says [b, s, h]
        if attn is not None and attn[1] == x1 and attn[0] == x0 and x0 != x1:
            b, s = x0, x1
    else:
        h = int(gemms[0][1])
        if attn is not None and attn[0] * attn[1] == tokens:
            b, s = int(attn[0]), int(attn[1])
        elif scores is not None and tokens % int(scores[0][1]) == 0:
            s = int(scores[0][1])
            b = tokens // s
        else:
            raise ShapeError(
                "cannot read the model shape: without a layer norm the sequence and micro-batch come "
                f"from attention, but {where} has no attention op whose batch x sequence is the QKV "
                f"GEMM's {tokens} tokens (layer norm: no, attention: "
                f"{'no' if attn is None and scores is None else 'yes, of another size'}, {len(gemms)} GEMMs)")
    unfused = scores if scores is not None and scores[0][1] == s and scores[1][2] == s else None
    try:
        got = read_layer(gemms, attn_at, attn, h, set(tp_groups), acts, scores=unfused, batch=b, where=where,
                         grouped=from_grouped)
    except ShapeDisagreement as exc:
        raise ShapeError(str(exc)) from None
    if got is None:
        raise ShapeError(f"cannot read the model shape: the GEMMs of {where} ({len(gemms)}: "
                         f"{', '.join(f'{k}->{n}' for _, k, n in gemms)}) are not QKV projections, an attention "
                         "projection and an MLP (FC1 / FC2, or gate / up / down)")
    tp = got.tp
    heads = got.heads_local * tp
    vocab = _vocab(blocks, op_name, op_dims, h, tokens) * tp
    kv = got.kv_heads_local * tp
    return ModelShape(hidden=h, ffn=got.ffn_local * tp, seq=s, micro_batch=b, vocab=vocab, heads=heads, tp=tp,
                      kv_heads=0 if kv == heads else kv, head_dim=got.head_dim if got.head_dim * heads != h else 0,
                      gated=got.gated, norm=norm, moe_at=got.moe_at, evidence=dict(got.evidence, QKV=got.qkv,
                                                                hidden=f"the {norm} weight" if ln is not None
                                                                else "the first GEMM's input",
                                                                **({"gate/up": got.gate_up} if got.gated else {})))


def _vocab(blocks: list, op_name, op_dims, h: int, tokens: int) -> int:
    """V/t: the lookup table [V/t, h] of the first embedding forward that has one, else the widest
    T x h -> V/t GEMM of the first head forward that has one (the logits); 0 when neither does."""
    def table_rows(t):
        d = op_dims[t]
        ok = op_name[t] in EMBEDDING_OPS and d and len(d[0]) == 2 and int(d[0][1]) == h
        return int(d[0][0]) if ok else 0

    def logits(t):
        mkn = gemm_mkn(str(op_name[t]), op_dims[t]) if op_name[t] in GEMM_OPS and op_dims[t] else None
        return int(mkn[2]) if mkn is not None and mkn[0] == tokens and mkn[1] == h else 0

    for kind, read, pick in (("embedding", table_rows, lambda vs: vs[0]), ("head", logits, max)):
        for bl in blocks:
            found = [v for v in map(read, bl.tasks) if v] if bl.kind == kind and bl.phase == "forward" else []
            if found:
                return pick(found)
    return 0


# the transforms' names for the classifier's kinds (`lumos.trace.collectives.KINDS`; the rest keep theirs)
TRANSFORM_KINDS = {"all_reduce": "allreduce", "all_gather": "allgather"}


def _read_collectives(table: TraceTable, graph: Graph, comm_tasks: np.ndarray, coll, group, nbytes) -> None:
    """Kind (in the transforms' names), process group and bytes of each communication kernel, as the
    one reader of collectives whatever their name reads it (`lumos.trace.collectives.classify_rows`),
    so PyTorch's own names (FSDP2's `allgather_into_tensor_coalesced` and `reduce_scatter_tensor_coalesced`,
    `_allgather_base`, `allreduce_coalesced`) are the gathers, reduce-scatters and all-reduces they
    are: read verbatim, an FSDP2 GPU trace's gathers were no FSDP gathers to the rebuild, and a PP
    change of it came out half the emulated time without a word. A kernel without its call's args
    (PyTorch before Kineto copied record_param_comms' args onto it) is read from the ops that
    launched it, where they give a kind and a process group; one still unread keeps its measured
    time in a prediction. A `Collective name` the classifier does not know is kept as it is."""
    for t, call in zip(comm_tasks.tolist(), classify_rows(table, graph.event[comm_tasks])):
        named = table.coll_name[graph.event[t]]
        if named is None and (call.kind is None or not call.group):
            continue
        coll[t] = TRANSFORM_KINDS.get(call.kind, call.kind) if call.kind else str(named)
        group[t] = call.group
        nbytes[t] = (call.nelems or 0) * DTYPE_BYTES.get(str(call.dtype), 2)


def find_structure(graph: Graph, tables: list[TraceTable], dp_hint: int = 1) -> RunStructure:
    """Blocks and facts of a run graph built (by `build_run_graph`) from `tables`. `dp_hint`: the DP
    degree the run's sharded or host-side collectives show (`dp_flavour.host_dp_degree`), taken when
    no gradient all-reduce says one (an FSDP run, a CPU run on gloo), so its ranks are not read as
    pipeline stages."""
    n = graph.n_tasks
    coll = np.empty(n, dtype=object)
    group = np.empty(n, dtype=object)
    nbytes = np.zeros(n)
    op_name = np.empty(n, dtype=object)
    op_dims = np.empty(n, dtype=object)
    task_block = np.full(n, -1, dtype=np.int64)
    op_row = np.full(n, -1, dtype=np.int64)
    proc_role = np.zeros(graph.n_procs, dtype=np.int64)
    by_rank = {t.rank: t for t in tables}
    blocks: list[Block] = []
    stage_params = {}
    for r, table in by_rank.items():
        tasks = np.flatnonzero((graph.rank == r) & (graph.event >= 0))
        procs = np.flatnonzero(graph.proc_rank == r)
        threads = procs[graph.proc_kind[procs] == TaskKind.CPU]
        for i, p in enumerate(sorted(threads, key=lambda p: graph.proc_key[p])):
            proc_role[p] = i
        streams = procs[graph.proc_kind[procs] == TaskKind.GPU]
        proc_role[streams] = graph.proc_key[streams] & 0xFFFFFFFF
        ev = graph.event[tasks]
        gpu = graph.kind[tasks] == TaskKind.GPU
        _read_collectives(table, graph, tasks[gpu & graph.comm[tasks]], coll, group, nbytes)
        # the CPU op that launched each task: innermost cpu_op around its launcher
        cpu_ops = np.flatnonzero(table.cat == schema.CPU_OP)
        launcher_ev = ev.copy()
        launcher_ev[gpu] = launching_events(table, ev[~gpu], ev[gpu])
        inner = innermost(table, cpu_ops, table.pid[launcher_ev], table.tid[launcher_ev],
                           table.ts[launcher_ev])
        hit = inner >= 0
        rows, which = np.unique(inner[hit], return_inverse=True)
        dims = np.empty(len(rows), dtype=object)
        for i, o in enumerate(rows.tolist()):     # one tuple per op, shared by the tasks it launched
            dims[i] = _dims_of(table, o)
        op_name[tasks[hit]] = table.name[inner[hit]]
        op_dims[tasks[hit]] = dims[which]
        op_row[tasks[hit]] = inner[hit]
        rb = _rank_blocks(graph, table, tasks, 0, proc_role, coll, None)
        for b in rb:
            task_block[b.tasks] = len(blocks)
            blocks.append(b)
        zero = cpu_ops[table.name[cpu_ops] == "aten::zero_"]
        if len(zero) and table.input_dims[zero[0]]:
            stage_params[r] = float(table.input_dims[zero[0]][0][0])
    kernel = graph.kind == TaskKind.GPU
    kernel[kernel] = [not n.startswith("Mem") for n in map(str, graph.name[kernel])]
    paths = {r: t.path for r, t in by_rank.items()}
    tp_groups = _tp_groups(blocks, task_block, coll, group)
    if kernel.any():
        shape = infer_shape(blocks, op_name, op_dims, is_gpu=kernel, op_row=op_row, paths=paths, tp_groups=tp_groups)
    else:
        name, dims, row = _shape_ops(graph, by_rank)
        shape = infer_shape(blocks, name, dims, op_row=row, paths=paths, tp_groups=tp_groups)
    moe, moe_error = None, ""
    if shape.moe_at >= 0:
        try:
            moe = read_moe_blocks(graph, by_rank, blocks, coll, group, shape, kernel if kernel.any() else None,
                            *((op_name, op_dims, op_row) if kernel.any() else (name, dims, row)))
        except MoEDisagreement as exc:
            moe_error = str(exc)
    layers = {b.layer for b in blocks if b.kind == "layer"}
    mbs = {b.mb for b in blocks if b.mb >= 0}
    ranks = sorted(by_rank)
    world = max(t.world_size for t in tables)
    dp_sizes = [len(group[t]) for t in np.flatnonzero(coll != None)  # noqa: E711
                if coll[t] == "allreduce" and task_block[t] >= 0 and blocks[task_block[t]].kind == "dp"]
    dp = max(dp_sizes) if dp_sizes else max(int(dp_hint), 1)
    pp = max(world // (shape.tp * dp), 1)
    if pp != len(ranks):
        raise StageMismatch(f"the base run must hold one rank per pipeline stage: world {world} = "
                            f"tp {shape.tp} x dp {dp} x pp {pp}, but {len(ranks)} ranks are present", shape, moe,
                            moe_error)
    stage_of_rank = {r: i for i, r in enumerate(ranks)}
    chunks, stage_layers, chunk_layers = layer_chunks(blocks, ranks)
    cp = context_parallel(blocks, task_block, coll, group, shape.tp)
    shape = dataclasses.replace(shape, cp=cp)
    return RunStructure(blocks=blocks, task_block=task_block, coll=coll, group=group, nbytes=nbytes,
                        op_name=op_name, op_dims=op_dims, proc_role=proc_role, shape=shape,
                        tp=shape.tp, pp=pp, dp=dp, layers=len(layers), microbatches=len(mbs),
                        stage_of_rank=stage_of_rank, stage_params=stage_params, chunks=chunks,
                        stage_layers=stage_layers, chunk_layers=chunk_layers, cp=cp, moe=moe, moe_error=moe_error,
                        recomputed=recomputed_layers(tables))
