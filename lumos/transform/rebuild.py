"""Re-sequence a run's blocks into a new pipeline: new stage count, layer count or micro-batches.

Each target stage's program is the 1F1B schedule (`schedule.py`) expanded into
blocks, each a copy of a template block of the base run (the same layer,
phase and micro-batch where the base has it; else layer l mod L). A copy keeps
the template's tasks, durations and internal edges: its CPU launch chain,
streams, inter-stream waits, TP collectives. Edges from outside the block are
re-pointed by processor: "the last task on that thread/stream before this
block" (program order, FIFO streams, event waits on earlier work); a change of
thread (forward on the main thread, backward on the autograd thread) gets the
base run's hand-off edge. Data-parallel gradient buckets are re-issued after
the last micro-batch's backward layers as parameters become ready (bucket size
as observed in the base); sends and receives of neighbouring stages are paired
for rendezvous. One-off stalls of the base (a bucket that waited for a late
peer, a host stall inside one block or before one step) are kept at most once:
re-issued buckets take the median bucket, repeated blocks and replicated step
leads that are outliers (modified z-score > 3.5) take the median one. What a copy
needs to know about its base block is read once by `templates.Templates`.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from lumos.durations import CollectiveSpec, ComputeSpec
from lumos.graph.model import EdgeClass, Graph, TaskKind, WaitKind
from lumos.model.p2p_exchange import overlapped
from lumos.model.structure import Block, RunStructure

from .p2p_overlap import RESHARED, own_lanes as _own_lanes, overlap_waits as _overlap_waits, unshared as _unshared
from .plan import Plan, comm_roles, dp_group, mp_group, stage_ranks
from .schedule import check_interleaved, chunk_ranges, pipeline_schedule, stage_split
from .templates import Templates

# plain ints: a numpy scalar or array compared with an IntEnum member probes the member for array
# protocols, which costs more than the comparison itself (millions of times in one rebuild)
_GPU, _CPU = int(TaskKind.GPU), int(TaskKind.CPU)
_INTRA, _INTER, _CROSS = int(EdgeClass.INTRA_THREAD), int(EdgeClass.INTER_THREAD), int(EdgeClass.CROSS_RANK)
_WAIT_EVENT = int(EdgeClass.INTER_STREAM)
_STREAM_WAIT, _DEVICE_WAIT = int(WaitKind.STREAM), int(WaitKind.DEVICE)

MULTI_TENSOR_OPS = ("aten::_foreach_", "aten::_fused_adam", "aten::_fused_sgd")
_PHASE_CODE = {"forward": 0, "backward": 1}     # a new task's phase (2: optimizer, -1: other)
BWD_LANE = 1 << 20    # added to a stream's role: the backward direction's pipeline stream (interleaved)


class _Builder:
    """Accumulates the new run graph's tasks, processors and edges. A copied block's columns that
    are the base's own (name, kind, event, ...) are kept as its base tasks and read from the base
    graph once for all blocks, in `_assemble`; the rest are kept per block."""

    def __init__(self, plan: Plan):
        self.g, self.st = plan.graph, plan.st
        self.base_tasks: list = []             # per block: its base tasks
        self.t_parts: dict[str, list] = defaultdict(list)   # per block: its columns that a copy changes
        self.m_parts: dict[str, list] = defaultdict(list)
        self.fill: dict[str, list] = defaultdict(list)      # per block: a value all its tasks share
        self.e_arrays: list[tuple] = []        # (singles before it, src, dst, cls, lag) of each edge array
        self._one: list[tuple] = []            # single edges, in order
        self.procs: list[tuple] = []          # (kind, rank, key, name, role)
        self.proc_index: dict[tuple, int] = {}
        self.placed: dict[tuple, tuple] = {}  # (block, rank) -> its tasks' processors and wait targets
        self.blocks: list[Block] = []
        self.n = 0
        self.lanes: dict | None = None          # (kind, direction) -> stream role of a p2p kernel (`_p2p_lanes`)
        self.lane_of: dict = {}                 # a base p2p stream's role -> the lane of its direction
        self.reshare = False                    # the overlapped exchange: its kernels unshared (`rebuild`)

    def proc(self, rank: int, kind: int, role: int) -> int:
        key = (rank, int(kind), int(role))
        p = self.proc_index.get(key)
        if p is None:
            p = len(self.procs)
            self.proc_index[key] = p
            pkey = (rank << 32) | role if kind == _GPU else ((10000 + rank) << 32) | (10000 + rank + role)
            name = f"stream {role} (rank {rank})" if kind == _GPU else f"thread {role} (rank {rank})"
            self.procs.append((int(kind), rank, pkey, name, int(role)))
        return p

    def place(self, bi: int, rank: int, lay) -> tuple[np.ndarray, np.ndarray]:
        """Processor of each task of a copy of block `bi` on `rank`, and each task's wait target
        (the same for every copy there: made once, the processors in the order a copy first asks)."""
        got = self.placed.get((bi, rank))
        if got is None:
            procs = np.array([self.proc(rank, k, r) for k, r in zip(lay.kinds, lay.roles)], np.int64)[lay.which]
            wt = lay.wait_target.copy()
            for k, role in lay.stream_waits:
                wt[k] = self.proc(rank, _GPU, role)
            wt[lay.device_waits] = rank
            got = self.placed[(bi, rank)] = (procs, wt)
        return got

    def edge(self, s, d, c, lag):
        """Edges s -> d (arrays, or one edge as scalars), in the order given."""
        if not isinstance(s, np.ndarray):
            self._one.append((int(s), int(d), int(c), float(lag)))
            return
        self.e_arrays.append((len(self._one), np.asarray(s, np.int64), np.asarray(d, np.int64),
                              np.asarray(c, np.int8), np.asarray(lag, np.float64)))

    def edges(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """All edges (src, dst, class, lag) in the order they were added."""
        s, d, c, lag = (zip(*self._one) if self._one else ((), (), (), ()))
        one = (np.array(s, np.int64), np.array(d, np.int64), np.array(c, np.int8), np.array(lag, np.float64))
        parts: list[list] = [[], [], [], []]
        done = 0
        for upto, *arrays in self.e_arrays:
            for j in range(4):
                parts[j] += [one[j][done:upto], arrays[j]]
            done = upto
        for j in range(4):
            parts[j].append(one[j][done:])
        return tuple(np.concatenate(p) for p in parts)


def rebuild(plan: Plan, pp: int | None = None, layers: int | None = None,
            microbatches: int | None = None, chunks: int | None = None, split=None, sizes=None) -> Plan:
    """A plan for `pp` stages, `layers` layers and `microbatches` per iteration, from `plan`'s blocks;
    `chunks` model chunks per stage (interleaved 1F1B when > 1), `split` the layers of each stage (default:
    the base's where the stages and layers are the base's, else as even as they go), or `sizes` the layers of
    each stage's chunks (`schedule.accounted_chunks`)."""
    pp = pp or plan.pp
    layers = layers or plan.layers
    m = microbatches or plan.microbatches
    chunks = chunks or plan.chunks
    if sizes is not None:
        split = [sum(c) for c in sizes]
    if split is None:
        split = stage_split(pp, layers, plan.stage_layers)
    if len(split) != pp or sum(split) != layers:
        raise ValueError(f"a split of {'/'.join(map(str, split))} layers is not {layers} layers over {pp} stages")
    if sizes is not None:
        check_interleaved(pp, chunks, m)
        sizes = [list(c) for c in sizes]
    elif chunks == plan.chunks and plan.chunk_layers and list(split) == list(plan.stage_layers):
        sizes = [list(c) for c in plan.chunk_layers]     # the base's own chunks (Llama 3's empty end chunks)
        check_interleaved(pp, chunks, m)
    else:
        check_interleaved(pp, chunks, m, split)
        sizes = [[n // chunks] * chunks for n in split]
    tm = plan.memo.get("templates")
    if tm is None:      # the same plan rebuilt again (a search's two replays): its templates are reused
        tm = plan.memo["templates"] = Templates(plan)
    tm.reset()
    if not tm.layer:
        raise ValueError("the base run has no layer ranges: cannot rebuild its pipeline")
    st = plan.st
    b = _Builder(plan)
    if chunks > 1 or plan.chunks > 1:
        b.lanes, b.lane_of = _p2p_lanes(plan, both_ways=chunks > 1)
    overlap = chunks > 1 and overlapped(st)     # Megatron's --overlap-p2p-communication (`p2p_exchange`)
    if not overlap:     # a batched exchange synchronizes: no step waits for a receive across blocks
        b.lane_of = {}
    b.reshare = overlap     # a moved exchange kernel's base NIC sharing taken out (`p2p_overlap.unshared`)
    ranks = stage_ranks(pp, plan.tp, plan.dp)
    pairs: dict[tuple, list] = defaultdict(list)
    shape = plan.shape
    params_layer, params_embed = shape.layer_params(), shape.embed_params()
    base_stage_params = {}
    bsh = plan.base_shape or shape     # the templates' parameters are the profiled model's
    layer_ratio = params_layer / bsh.layer_params()
    for i, r in enumerate(tm.ranks):
        nl = len({bl.layer for bl in st.blocks if bl.rank == r and bl.kind == "layer"})
        base_stage_params[r] = nl * bsh.layer_params() + bsh.embed_params() * (
            (i == 0) + (i == len(tm.ranks) - 1))
    recomputed: set = set()     # the target's layers whose backward re-runs their forward
    for s in range(pp):
        rank = ranks[s]
        base_rank = tm.base_rank_for(s, pp)
        my_chunks = chunk_ranges(s, sizes)
        my_layers = [l for c in my_chunks for l in c]
        ckpt = tm.checkpointed(my_layers)     # per-layer selective AC: the stage's own every-N-th blocks
        recomputed.update(ckpt if ckpt is not None else (l for l in my_layers if l % tm.base_layers in tm.recomputed))

        def block_of(l: int, phase: str, mb: int) -> int:
            return tm.layer_block(l, phase, mb, None if ckpt is None else l in ckpt)
        first, last = s == 0, s == pp - 1
        stage_params = len(my_layers) * params_layer + params_embed * (first + last)
        ratio = stage_params / tm.stage_param_count(base_rank, base_stage_params[base_rank])
        state = {"last_on": {}, "thread": None, "counters": defaultdict(int), "ready": 0.0, "launched": 0.0,
                 "clock": 0.0, "base_rank": base_rank}

        def emit(bi: int, scale_params: float | None = None, p2p_ops=None, dp_bytes=None, lead=None,
                 layer=None, mb=None, waits=None):
            _emit(plan, tm, b, state, bi, rank, s, pp, ranks, pairs, scale_params, p2p_ops, dp_bytes, lead,
                  layer, mb, waits)

        def step_blocks(phase: str, mb: int, blocks: list, chunk: int) -> None:
            """Emit one forward/backward step: base step-start lags first, interior lags after."""
            src_rank = (tm.ranks[0] if first else tm.ranks[-1]) if phase == "forward" else \
                (tm.ranks[-1] if last else tm.ranks[0])
            # the base stage plays itself (first -> first, last -> last) for the base's micro-batches and
            # chunks; middle stages, extra micro-batches and chunks are replicas of a role
            own = (first if src_rank == tm.ranks[0] else last) and mb < tm.base_mb and chunk < tm.base_chunks
            start = tm.lead(src_rank, phase, mb, replica=not own, chunk=chunk)
            if tm.sharded is not None:
                blocks = _with_shard_glue(tm, st, blocks, base_rank, phase, mb, m, has_root=first or last)
            waits = _overlap_waits(b, state, phase, (first and chunk == 0) if phase == "forward" else
                                   (last and chunk == chunks - 1), cooldown) if overlap else None
            for k, (bi, after, layer, *own_lag) in enumerate(blocks):
                if k == 0:
                    lead = start
                elif own_lag:       # next to its sharded-DP glue: the base's own lags into it
                    lead = None
                else:
                    lead = (tm.interior_lag.get(phase), None)
                emit(bi, lead=lead, layer=layer, mb=mb, waits=waits if k == 0 else None)
                if after is not None:
                    after()

        for bi in tm.prologue.get(base_rank, []):
            emit(bi, scale_params=ratio)
        acts = pipeline_schedule(s, pp, m, chunks, overlap)
        last_f = max((i for i, a in enumerate(acts) if a[0] == "F"), default=-1)
        for i_act, act in enumerate(acts):
            cooldown = i_act > last_f
            if act[0] == "p2p":
                for ops in _p2p_batches(tm, act[1]):
                    shape = tuple(sorted(k for k, _ in ops))
                    emit(tm.p2p_block(tm.p2p[shape], state["counters"][("p2p", shape)]), p2p_ops=ops)
                    state["counters"][("p2p", shape)] += 1
                continue
            mb, chunk = act[1], (act[2] if len(act) > 2 else 0)
            embeds, heads = first and chunk == 0, last and chunk == chunks - 1
            if act[0] == "F":
                seq = []
                if embeds and (bi := tm.role_block(tm.embed, "forward", mb)) is not None:
                    seq.append((bi, None, None))
                seq += [(block_of(l, "forward", mb), None, l) for l in my_chunks[chunk]]
                if heads and (bi := tm.role_block(tm.head, "forward", mb)) is not None:
                    seq.append((bi, None, None))
                step_blocks("forward", mb, seq, chunk)
            else:
                # the last micro-batch's backward of a chunk readies its gradients (each chunk's buckets
                # after its own, as Megatron keeps a gradient buffer per model chunk)
                grads = mb == m - 1 and plan.dp > 1 and tm.dp_template is not None

                def ready(params):
                    return (lambda: _grads(state, params, tm, emit)) if grads else None

                def layer_done(layer):
                    """After a layer's last backward: its gradient bucket (when the base reduces per
                    layer), then the DP buckets that became full."""
                    bucket = tm.bucket.get(layer % tm.base_layers) if mb == m - 1 else None
                    dp_ready = ready(params_layer)
                    if bucket is None:
                        return dp_ready

                    def after():
                        emit(bucket, scale_params=layer_ratio, layer=layer)
                        if dp_ready is not None:
                            dp_ready()
                    return after
                seq = []
                if heads and (bi := tm.role_block(tm.head, "backward", mb)) is not None:
                    seq.append((bi, ready(params_embed), None))
                seq += [(block_of(l, "backward", mb), layer_done(l), l) for l in reversed(my_chunks[chunk])]
                if embeds and (bi := tm.role_block(tm.embed, "backward", mb)) is not None:
                    seq.append((bi, ready(params_embed), None))
                step_blocks("backward", mb, seq, chunk)
                if grads:
                    _grads(state, 0.0, tm, emit, flush=True)
        for bi in tm.optimizer.get(base_rank, []):
            emit(bi, scale_params=ratio)
    graph, stt = _assemble(plan, b)
    stt.pp = pp     # the roles of the new collectives (a model-parallel group spans the new stages)
    stt.recomputed = frozenset(recomputed)
    groups = [v for key, v in pairs.items() if len(v) == (pp if key[0] == "mp" else 2)]
    out = plan.clone()
    out.graph, out.st = graph, stt
    out.role = comm_roles(stt)
    out.pp, out.layers, out.microbatches, out.ranks = pp, layers, m, ranks
    out.chunks, out.stage_layers = chunks, tuple(split)
    out.chunk_layers = tuple(tuple(c) for c in sizes) if chunks > 1 else ()
    out.pairs = groups
    if overlap:
        out.reshared = RESHARED
    return out


def _p2p_batches(tm: Templates, ops: tuple) -> list[tuple]:
    """The base's exchange blocks that make up one batch of `ops`: a block of the same shape where the
    base has one; else the forward and the backward direction's pair apart (the four-way exchange of the
    interleaved schedule from a 1F1B base), else op by op."""
    def has(part) -> bool:
        return tuple(sorted(k for k, _ in part)) in tm.p2p
    if has(ops):
        return [ops]
    halves = [h for h in (tuple(o for o in ops if o[1] == "fwd"), tuple(o for o in ops if o[1] == "bwd")) if h]
    out = []
    for h in halves:
        if has(h):
            out.append(h)
            continue
        for o in h:
            if not has((o,)):
                raise ValueError(f"the base run has no pipeline exchange to copy for a {o[0]} "
                                 f"({'forward' if o[1] == 'fwd' else 'backward'} direction)")
            out.append((o,))
    return out


def _p2p_lanes(plan: Plan, both_ways: bool) -> tuple[dict, dict]:
    """(kind, direction) -> the stream role a copied send / receive kernel runs on, when the base or the
    target is interleaved: sends on the base's first send stream, receives on its first receive stream,
    and with `both_ways` (an interleaved target) the backward direction on a stream of its own beside
    each. Megatron's four-way exchange sends (and receives) both ways at once; with one stream per kind a
    rank's second send would queue behind its first around the ring. Also: each base p2p stream's role ->
    the lane of its direction (an interleaved base's first stream of a kind forward, the others backward),
    for the edges of a step that waits for a receive posted before it (the overlapped exchange)."""
    g, st = plan.graph, plan.st
    lanes, lane_of = {}, {}
    for kind in ("send", "recv"):
        tasks = np.flatnonzero(st.coll == kind)
        roles = sorted({int(st.proc_role[g.proc[t]]) % BWD_LANE for t in tasks.tolist()})
        if not roles:
            continue
        lanes[(kind, "fwd")] = roles[0]
        lanes[(kind, "bwd")] = roles[0] + (BWD_LANE if both_ways else 0)
        pipe = sorted({int(st.proc_role[g.proc[t]]) for t in tasks.tolist() if plan.role[t] != "cp"})
        for r in pipe:
            lane_of[r] = lanes[(kind, "fwd")] if r % BWD_LANE == roles[0] else lanes[(kind, "bwd")]
    return lanes, lane_of


def _with_shard_glue(tm: Templates, st: RunStructure, blocks: list, base_rank: int, phase: str, mb: int,
                     m: int, has_root: bool) -> list:
    """A step's blocks with the sharded base's gathers before and reduce-scatters after each
    (`dp_shard_units.py`); a glue block, and a main block after one, enter on the base's own lags."""
    out = []
    for k, (bi, after, layer) in enumerate(blocks):
        next_layer = k + 1 < len(blocks) and st.blocks[blocks[k + 1][0]].kind == "layer"
        pre, suf = tm.sharded.around(base_rank, phase, mb, m, st.blocks[bi].kind, k == 0, next_layer, has_root)
        out += [(g, None, layer, True) for g in pre]
        out.append((bi, after, layer, True) if pre else (bi, after, layer))
        out += [(g, None, layer, True) for g in suf]
    return out


def _grads(state, params: float, tm: Templates, emit, flush: bool = False) -> None:
    """Issue every gradient bucket that is now full (all remaining ones with `flush`); where the base
    all-reduces only after its backward (`Templates.dp_after_backward`), only at the flush."""
    state["ready"] += params
    if tm.dp_after_backward and not flush:
        return
    bucket = tm.bucket_bytes / 2.0     # elements (BF16 gradients)
    while state["ready"] - state["launched"] >= bucket or (flush and state["ready"] - state["launched"] > 1e-9):
        n = min(bucket, state["ready"] - state["launched"])
        first = state["launched"] == 0.0
        state["launched"] += n
        emit(tm.dp_bucket(state["base_rank"], first), dp_bytes=2.0 * n)


def _emit(plan, tm, b: _Builder, state, bi, rank, stage, pp, ranks, pairs, scale_params, p2p_ops, dp_bytes,
          lead=None, layer=None, mb=None, waits=None):
    g, st = plan.graph, plan.st
    blk = st.blocks[bi]
    layer = blk.layer if layer is None else layer
    mb = blk.mb if mb is None or blk.mb < 0 else mb
    T = blk.tasks
    n = len(T)
    first_id = b.n
    lay = tm.layout(bi)
    procs, wt = b.place(bi, rank, lay)
    # external in-edges: last task on the same (kind, role) processor of this stage
    isrc, idst, icls, ilag = tm.edges[bi][0]
    # a CPU capture's optimizer runs one loop of host ops per parameter tensor: its ops and the
    # host time between them grow with the parameters (a GPU run's grow in its kernels, below)
    host_scale = scale_params if scale_params is not None and tm.host_only and blk.kind == "optimizer" else None
    if len(isrc):
        b.edge(first_id + isrc, first_id + idst, icls, ilag if host_scale is None else ilag * host_scale)
    joined = set()
    intra_lead = lead[0] if lead is not None else None
    if lead is not None and len(lead) > 2 and lead[2] and state["thread"] in (None, blk.thread_role):
        # the base started this step after a hand-off from another thread (the main thread resuming
        # after the autograd thread's backward) plus host time (the next batch, the forward's Python);
        # here nothing hands off (a warm-up forward after a pipeline send and its synchronize), so
        # that host time follows the thread's own last task
        intra_lead = max(intra_lead or 0.0, lead[1])
    last_on = state["last_on"]
    lane_of = b.lane_of
    own_lane = _own_lanes(g, st, b, T, lay.coll, p2p_ops) if lane_of and p2p_ops is not None else {}
    for ekind, erole, edst, ecls, lg in lay.external:
        if ekind == _GPU and edst in own_lane and own_lane[edst][0] == erole:   # its stream's order: its new lane's
            src = last_on.get((ekind, own_lane[edst][1]))
        elif ekind == _GPU and erole in lane_of and p2p_ops is None:   # a step's waits: `_overlap_waits` makes them
            continue
        else:
            src = last_on.get((ekind, lane_of.get(erole, erole) if ekind == _GPU else erole))
        if src is not None:
            if lead is not None and edst == 0 and ecls == _INTRA and intra_lead is not None:
                lg = intra_lead
            b.edge(src, first_id + edst, ecls, lg)
            joined.add(edst)
    if lay.first_cpu >= 0:
        first_cpu = lay.first_cpu
        role = blk.thread_role
        prev = state["thread"]
        src = state["last_on"].get((_CPU, role))
        if src is not None and first_cpu not in joined and (prev is None or prev == role):
            # program order: a block whose base copy opened its thread's step (the first
            # micro-batch's embedding) has no in-edge there; a replica still follows the
            # work before it on the thread
            lg = intra_lead if intra_lead is not None else 0.0
            b.edge(src, first_id + first_cpu, _INTRA, lg)
        if prev is not None and prev != role:
            src = state["last_on"].get((_CPU, prev))
            if src is not None:
                lag = tm.switch_lag[bi]
                if lead is not None and lead[1] is not None:
                    lag = lead[1]
                if lag is None:
                    lag = tm.handoff.get((prev, role), 0.0)
                b.edge(src, first_id + first_cpu, _INTER, lag)
        state["thread"] = role
    # tasks
    clock = state["clock"]
    ts = clock + lay.rel_ts
    if n:
        latest = int(np.argmax(ts))
        state["clock"] = float(ts[latest] + lay.dur[latest])
    dur = lay.dur.copy()
    if host_scale is not None:
        dur *= host_scale
    coll = lay.coll     # read only
    group = lay.group.copy() if lay.comm else lay.group
    nbytes = lay.nbytes.copy() if dp_bytes is not None else lay.nbytes
    dims = lay.dims.copy() if scale_params is not None else lay.dims
    if scale_params is not None:
        for k, t in enumerate(T):
            d = dims[k]
            if g.kind[t] != _GPU or coll[k] is not None:
                continue
            op = str(st.op_name[t])
            if d and len(d) == 1 and isinstance(d[0], tuple) and len(d[0]) == 1 and d[0][0] > 1e6:
                new = ((int(round(d[0][0] * scale_params)),),)
                dur[k] = plan.compute.retime(dur[k], ComputeSpec(op, d), ComputeSpec(op, new))
                dims[k] = new
            elif op.startswith(MULTI_TENSOR_OPS) or blk.kind == "bucket":
                # a multi-tensor kernel (foreach / fused optimizer) sweeps a share of all parameters, a
                # bucket's flatten / reduce / unflatten kernels its layer's; the trace gives no sizes
                # (tensor lists), so their time scales with the parameter count
                dur[k] = plan.compute.scale(dur[k], "elementwise", scale_params)
    comm_k = lay.comm
    for k in comm_k:
        t = T[k]
        role = plan.role[t]
        if role == "tp":
            group[k] = tuple(range(rank, rank + plan.tp))
        elif role == "cp" and coll[k] in ("send", "recv"):   # a ring's exchange: the stage rank and its neighbour
            group[k] = (rank, rank + group[k][1] - group[k][0])
        elif role == "cp":      # the stage rank's context-parallel peers, TP apart
            group[k] = tuple(rank + c * plan.tp for c in range(plan.cp))
        elif role == "dp":     # a gradient bucket's all-reduce, or a sharded base's gather / reduce-scatter
            old = CollectiveSpec(coll[k], nbytes[k], group[k])
            group[k] = dp_group(rank, plan.tp, plan.dp)
            if dp_bytes is not None:
                nbytes[k] = dp_bytes
            dur[k] = plan.collectives.retime(dur[k], old, CollectiveSpec(coll[k], nbytes[k], group[k]))
        elif role == "mp":
            # the grad norm's all-reduce spans every stage: the new stages' TP ranks, one rendezvous of all
            # the stages (each stage's n-th such call meets the others' n-th), so no stage ends before the last
            old = CollectiveSpec(coll[k], nbytes[k], group[k])
            group[k] = mp_group(rank, plan.tp, pp, plan.dp)
            dur[k] = plan.collectives.retime(dur[k], old, CollectiveSpec(coll[k], nbytes[k], group[k]))
            c = state["counters"]
            pairs[("mp", c[("mp",)])].append(first_id + k)
            c[("mp",)] += 1
    if p2p_ops is not None:
        p2p_k = sorted([k for k in comm_k if coll[k] in ("send", "recv")], key=lambda k: g.ts[T[k]])
        avail = {"send": [k for k in p2p_k if coll[k] == "send"], "recv": [k for k in p2p_k if coll[k] == "recv"]}
        moved = {}      # a template stream's role -> the lane its kernel now runs on
        if b.lanes:
            procs = procs.copy()
        for kind, direction in p2p_ops:
            k = avail[kind].pop(0)
            to_next = (kind, direction) in (("send", "fwd"), ("recv", "bwd"))
            # the link is named by the stage that sends forward on it; the ring of an interleaved
            # pipeline wraps from the last stage to the first
            peer_stage = (stage + 1) % pp if to_next else (stage - 1) % pp
            link = stage if to_next else peer_stage
            if b.lanes and (kind, direction) in b.lanes:
                moved[int(st.proc_role[g.proc[T[k]]])] = procs[k] = b.proc(rank, _GPU, b.lanes[(kind, direction)])
            c = state["counters"]
            key = (direction, link, c[(kind, direction)])
            c[(kind, direction)] += 1
            old = CollectiveSpec(kind, nbytes[k], group[k])
            group[k] = (min(rank, ranks[peer_stage]), max(rank, ranks[peer_stage]))
            new = CollectiveSpec(kind, nbytes[k], group[k])
            dur[k] = plan.collectives.retime(dur[k], old, new)
            if b.reshare:
                dur[k] = _unshared(plan.collectives, dur[k], new)
            pairs[key].append(first_id + k)
        if moved:   # a synchronize of a stream whose kernel moved waits for it on its lane
            wt = wt.copy()
            for k, role in lay.stream_waits:
                if role in moved:
                    wt[k] = moved[role]
    if waits:   # the overlapped exchange: the step's first kernel waits for its receive (`_overlap_waits`)
        gk = [k for k in range(n) if g.kind[T[k]] == _GPU and coll[k] is None]
        if gk:
            k0 = min(gk, key=lambda k: lay.rel_ts[k])
            for src in waits:
                b.edge(src, first_id + k0, _WAIT_EVENT, 0.0)
    b.base_tasks.append(T)
    parts = b.t_parts
    parts["proc"].append(procs)
    parts["dur"].append(dur)
    parts["ts"].append(ts)
    parts["wait_target"].append(wt)
    fill = b.fill
    fill["n"].append(n)
    fill["rank"].append(rank)
    fill["layer"].append(layer)
    fill["phase"].append(_PHASE_CODE.get(blk.phase, 2 if blk.kind == "optimizer" else -1))
    fill["block"].append(len(b.blocks))
    mp = b.m_parts
    mp["coll"].append(coll)
    mp["group"].append(group)
    mp["nbytes"].append(nbytes)
    mp["op_dims"].append(dims)
    nb = Block(kind=blk.kind, phase=blk.phase, layer=layer, mb=mb, shape=blk.shape, rank=rank,
               thread_role=blk.thread_role, tasks=np.arange(first_id, first_id + n, dtype=np.int64),
               overlapped=blk.overlapped,
               start=float(clock + lay.rel_first) if n else 0.0)
    b.blocks.append(nb)
    # the block's last task on each processor becomes "last on" for the next block (a pipeline kernel: on
    # the lane it runs on now)
    for key, k in lay.last:
        if not (lane_of and p2p_ops is not None and key[0] == _GPU and key[1] in lane_of):
            last_on[key] = first_id + k
    if lane_of and p2p_ops is not None:
        before = state.setdefault("before_last", {})    # the kernel posted before the last, per lane
        for k in sorted((k for k in comm_k if coll[k] in ("send", "recv")), key=lambda k: g.ts[T[k]]):
            key = (_GPU, b.procs[procs[k]][4])
            before[key] = last_on.get(key)
            last_on[key] = first_id + k
    b.n += n


def _assemble(plan: Plan, b: _Builder) -> tuple[Graph, RunStructure]:
    cat = np.concatenate
    g = plan.graph
    base = cat(b.base_tasks)      # each new task's base task
    tp = {k: cat(v) for k, v in b.t_parts.items()}
    counts = np.array(b.fill["n"], np.int64)
    n = len(tp["dur"])
    kind = g.kind[base]
    tp.update(name=g.name[base], kind=kind, comm=g.comm[base], in_step=kind == _GPU,
              wait_kind=g.wait_kind[base], event=g.event[base], base_rank=g.rank[base],
              rank=np.repeat(np.array(b.fill["rank"], np.int32), counts),
              layer=np.repeat(np.array(b.fill["layer"], np.int32), counts),
              phase=np.repeat(np.array(b.fill["phase"], np.int8), counts))
    src, dst, cls, lag = b.edges()
    # stream order = emission order on each stream
    stream_pos = np.full(n, -1, np.int32)
    gpu = np.flatnonzero(tp["kind"] == _GPU)
    order = gpu[np.lexsort((gpu, tp["proc"][gpu]))]
    if len(order):
        p = tp["proc"][order]
        starts = np.r_[0, np.flatnonzero(np.diff(p)) + 1]
        pos = np.arange(len(order)) - np.repeat(starts, np.diff(np.r_[starts, len(order)]))
        stream_pos[order] = pos
    has_in = np.zeros(n, bool)
    has_in[dst] = True
    release = np.where(has_in, -np.inf, 0.0)
    procs = b.procs
    names = np.empty(len(procs), dtype=object)
    names[:] = [p[3] for p in procs]
    tname = tp["name"].astype(object)
    graph = Graph(name=tname, kind=tp["kind"].astype(np.int8), proc=tp["proc"].astype(np.int32),
                  dur=tp["dur"].astype(np.float64), ts=tp["ts"].astype(np.float64), release=release,
                  comm=tp["comm"].astype(bool), in_step=tp["in_step"].astype(bool),
                  rank=tp["rank"].astype(np.int32), stream_pos=stream_pos,
                  wait_kind=tp["wait_kind"].astype(np.int8), wait_target=tp["wait_target"].astype(np.int32),
                  event=np.full(n, -2, np.int64), layer=tp["layer"], phase=tp["phase"],
                  proc_kind=np.array([p[0] for p in procs], np.int8),
                  proc_rank=np.array([p[1] for p in procs], np.int32),
                  proc_key=np.array([p[2] for p in procs], np.int64), proc_name=names,
                  src=src.astype(np.int64), dst=dst.astype(np.int64), cls=cls.astype(np.int8),
                  lag=lag.astype(np.float64), inferred=np.zeros(len(src), bool))
    # each task's origin in the base (its rank's trace row; -1: made here), for what is keyed by it
    # (the host step draw of an interval, `lumos.analysis.uncertainty.host_step_ratios`)
    graph.summary = {"tasks": n, "edges": graph.edge_counts(), "predicted": True,
                     "base_event": tp["event"].astype(np.int64), "base_rank": tp["base_rank"].astype(np.int64)}
    mp = {k: cat(v) for k, v in b.m_parts.items()}
    mp.update(op_name=plan.st.op_name[base], block=np.repeat(np.array(b.fill["block"], np.int64), counts))
    role = np.zeros(len(procs), np.int64)
    role[:] = [p[4] for p in procs]
    st = RunStructure(blocks=b.blocks, task_block=mp["block"], coll=mp["coll"], group=mp["group"],
                      nbytes=mp["nbytes"].astype(np.float64), op_name=mp["op_name"], op_dims=mp["op_dims"],
                      proc_role=role, shape=plan.shape, tp=plan.tp, pp=0, dp=plan.dp, cp=plan.cp,
                      layers=0, microbatches=0, stage_of_rank={}, stage_params={})
    return graph, st
