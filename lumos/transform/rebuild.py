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
leads that are outliers (modified z-score > 3.5) take the median one.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from lumos.graph.model import EdgeClass, Graph, TaskKind, WaitKind

from .plan import Plan, comm_roles, dp_group, stage_ranks
from .schedule import layers_of_stage, one_f_one_b
from .structure import Block, RunStructure
from .suppliers import CollectiveSpec, ComputeSpec

# plain ints: a numpy scalar or array compared with an IntEnum member probes the member for array
# protocols, which costs more than the comparison itself (millions of times in one rebuild)
_GPU, _CPU = int(TaskKind.GPU), int(TaskKind.CPU)
_INTRA, _INTER, _CROSS = int(EdgeClass.INTRA_THREAD), int(EdgeClass.INTER_THREAD), int(EdgeClass.CROSS_RANK)
_STREAM_WAIT, _DEVICE_WAIT = int(WaitKind.STREAM), int(WaitKind.DEVICE)

MULTI_TENSOR_OPS = ("aten::_foreach_", "aten::_fused_adam", "aten::_fused_sgd")


class _Templates:
    """Template blocks of the input plan, looked up by role, with their edges pre-split."""

    def __init__(self, plan: Plan):
        g, st = plan.graph, plan.st
        self.plan = plan
        self.layer, self.embed, self.head, self.p2p = {}, {}, {}, defaultdict(list)
        self.dp, self.optimizer, self.prologue = [], {}, {}
        self.bucket = {}      # layer -> its gradient-bucket reduction (lumos capture gpt)
        first_main = {}
        for i, b in enumerate(st.blocks):
            if b.kind == "layer":
                self.layer.setdefault((b.layer, b.phase, b.mb), i)
            elif b.kind == "embedding":
                self.embed.setdefault((b.phase, b.mb), i)
            elif b.kind == "head":
                self.head.setdefault((b.phase, b.mb), i)
            elif b.kind == "p2p":
                self.p2p[tuple(sorted(b.shape))].append(i)
            elif b.kind == "dp":
                self.dp.append(i)
            elif b.kind == "bucket":
                self.bucket.setdefault(b.layer, i)
            elif b.kind == "optimizer":
                self.optimizer.setdefault(b.rank, []).append(i)
            if b.kind in ("p2p", "layer", "embedding", "head") and b.rank not in first_main:
                first_main[b.rank] = b.start
        for i, b in enumerate(st.blocks):
            if b.kind == "glue" and b.start < first_main.get(b.rank, np.inf):
                self.prologue.setdefault(b.rank, []).append(i)
            elif b.kind == "glue":
                self.optimizer.setdefault(b.rank, []).append(i)   # trailing glue goes with the optimizer
        for r in self.optimizer:
            self.optimizer[r].sort(key=lambda i: st.blocks[i].start)
        self.base_layers = 1 + max(k[0] for k in self.layer) if self.layer else 0
        self.base_mb = 1 + max(k[2] for k in self.layer) if self.layer else 0
        self.ranks = sorted({b.rank for b in st.blocks})
        self.host_only = not np.any(g.kind == _GPU)   # a CPU capture: the host does the work
        # per block: tasks, internal edges (local ids), external in-edges (by source processor)
        keep = g.cls != _CROSS
        src, dst = g.src[keep], g.dst[keep]
        cls, lag = g.cls[keep], g.lag[keep]
        blk = st.task_block
        order = np.argsort(blk[dst], kind="stable")
        bounds = np.searchsorted(blk[dst][order], np.arange(len(st.blocks) + 1))
        self.edges = []
        self.switch_lag = []     # lag of the hand-off into the block in the base (None: none)
        self.lead_lag = []       # (intra-thread, inter-thread) lag into the block's first task
        self.handoff_binds = []  # the hand-off (not program order) set the block's start in the base
        local = np.full(g.n_tasks, -1, np.int64)     # a task's index in its block
        for b in st.blocks:
            local[b.tasks] = np.arange(len(b.tasks))
        for i, b in enumerate(st.blocks):
            e = order[bounds[i]:bounds[i + 1]]
            inside = blk[src[e]] == i
            ei, ee = e[inside], e[~inside]
            intra = (local[src[ei]], local[dst[ei]], cls[ei], lag[ei])
            lead = local[dst[ee]] == 0
            lead_intra = lag[ee[lead & (cls[ee] == _INTRA)]]
            lead_inter = lag[ee[lead & (cls[ee] == _INTER)]]
            self.lead_lag.append((float(lead_intra.max()) if len(lead_intra) else None,
                                  float(lead_inter.max()) if len(lead_inter) else None))
            into = ee[lead & ((cls[ee] == _INTRA) | (cls[ee] == _INTER))]
            ready = g.ts[src[into]] + g.dur[src[into]] + lag[into]
            self.handoff_binds.append(bool(len(into)) and cls[into[np.argmax(ready)]] == _INTER)
            ext_ok = cls[ee] != _INTER
            hand_lags = lag[ee[~ext_ok]]
            self.switch_lag.append(float(hand_lags.max()) if len(hand_lags) else None)
            ee = ee[ext_ok]
            ext = (g.proc_kind[g.proc[src[ee]]], st.proc_role[g.proc[src[ee]]], local[dst[ee]], cls[ee], lag[ee])
            self.edges.append((intra, ext))
        # hand-off lags between threads, from the base's inter-thread edges
        it = np.flatnonzero(g.cls == _INTER)
        hand = defaultdict(list)
        for k in it:
            a, c = st.proc_role[g.proc[g.src[k]]], st.proc_role[g.proc[g.dst[k]]]
            hand[(int(a), int(c))].append(float(g.lag[k]))
        self.handoff = {k: float(np.median(v)) for k, v in hand.items()}
        # host time before a forward / backward step starts, and between blocks inside a step
        self.step_lead = {}
        self.step_handoff_binds = {}
        interior = defaultdict(list)
        seen = set()
        for i in sorted(range(len(st.blocks)), key=lambda i: st.blocks[i].start):
            bl = st.blocks[i]
            if bl.kind not in ("layer", "embedding", "head"):
                continue
            key = (bl.rank, bl.phase, bl.mb)
            if key in seen:
                if self.lead_lag[i][0] is not None:
                    interior[bl.phase].append(self.lead_lag[i][0])
                continue
            seen.add(key)
            self.step_lead[key] = self.lead_lag[i]
            self.step_handoff_binds[key] = self.handoff_binds[i]
        self.interior_lag = {ph: float(np.median(v)) for ph, v in interior.items()}
        # step leads of stages that replicate a base stage's role (middle stages, extra micro-batches):
        # the base's value for that micro-batch unless it is an outlier among the base's micro-batches
        # of the same (rank, phase, lead pattern) -- a one-off host stall -- which a replica replaces
        # by their median (ordinary run-to-run variation of host time is kept, so totals stay unbiased)
        pat = defaultdict(list)
        for (r, ph, mb), ll in self.step_lead.items():
            pat[(r, ph, ll[0] is None, ll[1] is None)].append(ll)
        self.step_lead_pool = {k: [np.array([x[j] for x in v], float) if not k[2 + j] else None
                                   for j in range(2)] for k, v in pat.items()}
        # a block used more than once in the new program (layer l >= L takes base layer l mod L;
        # micro-batch i >= m takes i mod m) is, on a repeated use, replaced by a typical block -- the
        # median host+device time among the base's interior layer blocks of the same rank and phase,
        # over layers and micro-batches (all transformer layers do the same work) -- when its own time
        # is an outlier among them: a one-off stall inside one block is kept once, where it happened,
        # never copied
        self.uses: dict[int, int] = defaultdict(int)
        self._pools: dict = {}
        self._layouts: dict = {}
        self._pool_stats: dict = {}
        self.typical = {}
        cand = defaultdict(list)
        for r in self.ranks:
            mine = [i for i, bl in enumerate(st.blocks) if bl.rank == r and bl.kind == "layer"]
            ls = sorted({st.blocks[i].layer for i in mine})
            inner = set(ls[1:-1]) if len(ls) > 2 else set(ls)
            for i in mine:
                bl = st.blocks[i]
                if bl.layer in inner:
                    cost = self._cost(i)
                    cand[(r, bl.phase)].append((cost, bl.layer, i))
        self.block_cost = {}
        self.cost_pool = {}
        for k, v in cand.items():
            v.sort()
            self.typical[k] = v[(len(v) - 1) // 2][2]
            self.cost_pool[k] = np.array([c for c, _, _ in v])
            for c, _, i in v:
                self.block_cost[i] = c
        # DP buckets: the bucket size is the largest data-parallel all-reduce observed; the template
        # re-issued for every new bucket is a *typical* full-size bucket (median duration), never one
        # specific bucket: a bucket's measured span includes waiting for DP peers that were not
        # profiled (the first bucket of an iteration absorbs their arrival skew, a straggling peer
        # delays a few others), and copying one such bucket into every re-issued one replicates a
        # one-off wait tens of times. The base's first bucket is kept once per stage, as the first
        # bucket issued (its wait is a property of the iteration, not of a bucket).
        self.bucket_bytes = 0.0
        self.dp_after_backward = False
        self.dp_template = None
        self.dp_first: dict[int, int] = {}
        self.dp_typical: dict[int, int] = {}
        dp_rows = []          # (rank, start, bytes, duration, block)
        for i in self.dp:
            ts = [t for t in st.blocks[i].tasks if st.coll[t] is not None]
            if ts:
                dp_rows.append((st.blocks[i].rank, st.blocks[i].start, float(st.nbytes[ts[0]]),
                                float(g.dur[ts[0]]), i))
        if dp_rows:
            self.bucket_bytes = max(r[2] for r in dp_rows)
            for r in self.ranks:
                mine = sorted((x for x in dp_rows if x[0] == r), key=lambda x: x[1])
                if not mine:
                    continue
                self.dp_first[r] = mine[0][4]
                full = [x for x in mine if x[2] >= self.bucket_bytes] or mine
                self.dp_typical[r] = _median_block(full)
            self.dp_template = _median_block([x for x in dp_rows if x[2] >= self.bucket_bytes])
        # DeepSpeed without gradient bucketing in the backward (vTrain's setup) all-reduces every bucket
        # once the backward is done: then no DP block of the base starts before its rank's last backward
        last_bwd = {}
        for b in st.blocks:
            if b.kind in ("layer", "embedding", "head") and b.phase == "backward":
                last_bwd[b.rank] = max(last_bwd.get(b.rank, -np.inf), b.start)
        self.dp_after_backward = bool(dp_rows) and all(row[1] > last_bwd.get(row[0], np.inf) for row in dp_rows)

    def layout(self, bi: int) -> "_BlockLayout":
        """What `_emit` needs of block `bi` that does not depend on where it is emitted (cached:
        a rebuild emits each base block many times)."""
        lay = self._layouts.get(bi)
        if lay is None:
            lay = self._layouts[bi] = _BlockLayout.of(self.plan, self.plan.st.blocks[bi])
        return lay

    def _stats(self, pool: np.ndarray) -> tuple[float, float]:
        """Median and MAD of one of the templates' pools (each kept for the templates' life)."""
        st = self._pool_stats.get(id(pool))
        if st is None:
            med = float(np.median(pool))
            st = self._pool_stats[id(pool)] = (med, float(np.median(np.abs(pool - med))))
        return st

    def _outlier(self, x: float, pool: np.ndarray) -> bool:
        """`is_outlier(x, pool)`, the pool's median and MAD computed once."""
        if len(pool) < 3:
            return False
        return _beyond(x, *self._stats(pool))

    def reset(self) -> None:
        """Forget the uses of the previous rebuild (the templates are kept per plan, `rebuild`)."""
        self.uses = defaultdict(int)

    def dp_bucket(self, base_rank: int, first: bool) -> int:
        """Template block of a re-issued gradient bucket on a stage played by `base_rank`."""
        if first and base_rank in self.dp_first:
            return self.dp_first[base_rank]
        return self.dp_typical.get(base_rank, self.dp_template)

    def stage_param_count(self, rank: int, fallback: float) -> float:
        """Parameters of a base stage, as its gradient-zeroing / grad-norm op's Input Dims say."""
        st = self.plan.st
        for i in self.prologue.get(rank, []) + self.optimizer.get(rank, []):
            for t in st.blocks[i].tasks:
                d = st.op_dims[t]
                if st.op_name[t] in ("aten::zero_", "aten::_foreach_norm") and d and len(d) == 1 \
                        and isinstance(d[0], tuple) and len(d[0]) == 1:
                    return float(d[0][0])
        return fallback

    def layer_block(self, layer: int, phase: str, mb: int) -> int:
        key = (layer % self.base_layers, phase, mb % self.base_mb)
        bi = self.layer[key]
        self.uses[bi] += 1
        if self.uses[bi] > 1:      # a replica: this block again unless it holds a one-off stall
            bl = self.plan.st.blocks[bi]
            k = (bl.rank, bl.phase)
            if k in self.typical:
                cost = self.block_cost.get(bi)
                if cost is None:    # a first/last layer of its base stage: not in the pool
                    cost = self._cost(bi)
                if self._outlier(cost, self.cost_pool[k]):
                    return self.typical[k]
        return bi

    def role_block(self, table: dict, phase: str, mb: int) -> int | None:
        return table.get((phase, mb % self.base_mb))

    def p2p_block(self, blocks: list, k: int) -> int:
        """The k-th pipeline exchange of a shape: the base's blocks in turn; a repeated use of one that
        holds a one-off wait (an outlier among the shape's blocks) takes the median one instead."""
        bi = blocks[k % len(blocks)]
        self.uses[bi] += 1
        if self.uses[bi] > 1 and len(blocks) >= 3:
            key = tuple(blocks)
            if key not in self._pools:      # durations do not change during a rebuild
                cost = {i: self._cost(i) for i in blocks}
                self._pools[key] = (cost, np.array(sorted(cost.values())))
            cost, pool = self._pools[key]
            if self._outlier(cost[bi], pool):
                return _median_block([(0, 0.0, 0.0, cost[i], i) for i in blocks])
        return bi

    def _cost(self, bi: int) -> float:
        """Host + device time of a block: its tasks' durations plus its internal (host) lags."""
        return float(self.plan.graph.dur[self.plan.st.blocks[bi].tasks].sum()) + float(
            np.clip(self.edges[bi][0][3], 0.0, None).sum())

    def lead(self, rank: int, phase: str, mb: int, replica: bool):
        """Host lag before a step's first block: the base's own value, or a robust one for a replica;
        as (program-order lag, hand-off lag, whether the hand-off set the start in the base)."""
        key = (rank, phase, mb % self.base_mb)
        ll = self.step_lead.get(key)
        if ll is None:
            return None
        if replica:
            pool = self.step_lead_pool[(rank, phase, ll[0] is None, ll[1] is None)]
            ll = tuple(x if x is None or not self._outlier(x, pool[j]) else self._stats(pool[j])[0]
                       for j, x in enumerate(ll))
        return (*ll, self.step_handoff_binds[key])

    def base_rank_for(self, stage: int, pp: int) -> int:
        """The base rank whose stage plays the same role (first, last, or middle -> first)."""
        if stage == pp - 1 and pp > 1:
            return self.ranks[-1]
        return self.ranks[0]


def is_outlier(x: float, pool, z: float = 3.5) -> bool:
    """A one-off high value: modified z-score 0.6745 (x - median) / MAD above `z` (Iglewicz-Hoaglin).

    With a zero MAD (identical samples) anything above the median is an outlier; fewer than three
    samples say nothing about what is typical, so nothing is.
    """
    pool = np.asarray(pool, float)
    if len(pool) < 3:
        return False
    med = float(np.median(pool))
    return _beyond(x, med, float(np.median(np.abs(pool - med))), z)


def _beyond(x: float, med: float, mad: float, z: float = 3.5) -> bool:
    if mad <= 0.0:
        return x > med * (1 + 1e-9) + 1e-9
    return 0.6745 * (x - med) / mad > z


def _median_block(rows: list) -> int:
    """The block of the lower-median duration among rows (rank, start, bytes, duration, block)."""
    rows = sorted(rows, key=lambda x: (x[3], x[1]))
    return rows[(len(rows) - 1) // 2][4]


@dataclass
class _BlockLayout:
    """A base block's tasks by processor: the distinct (kind, role) pairs and each task's index into
    them, the last task (by start) on each, its collectives and its first CPU task."""
    kinds: list
    roles: list
    which: np.ndarray
    last: list          # ((kind, role), local index of the last task there)
    comm: list          # local indices of the collective tasks
    first_cpu: int      # local index of the first CPU task, -1: none

    @classmethod
    def of(cls, plan: Plan, blk) -> "_BlockLayout":
        g, st = plan.graph, plan.st
        T = blk.tasks
        pk = g.proc_kind[g.proc[T]].astype(np.int64)
        pr = st.proc_role[g.proc[T]].astype(np.int64)
        pairs = list(zip(pk.tolist(), pr.tolist()))
        uniq = list(dict.fromkeys(pairs))
        index = {u: i for i, u in enumerate(uniq)}
        last = {}
        for k in np.argsort(g.ts[T], kind="stable").tolist():
            last[pairs[k]] = k
        cpu = np.flatnonzero(g.kind[T] == _CPU)
        return cls(kinds=[u[0] for u in uniq], roles=[u[1] for u in uniq],
                   which=np.array([index[p] for p in pairs], np.int64), last=list(last.items()),
                   comm=[k for k, c in enumerate(st.coll[T]) if c is not None],
                   first_cpu=int(cpu[0]) if len(cpu) else -1)


class _Builder:
    """Accumulates the new run graph's tasks, processors and edges."""

    def __init__(self, plan: Plan):
        self.g, self.st = plan.graph, plan.st
        self.t_parts: dict[str, list] = defaultdict(list)
        self.m_parts: dict[str, list] = defaultdict(list)
        self.e_src, self.e_dst, self.e_cls, self.e_lag = [], [], [], []
        self._one: list[tuple] = []            # single edges not yet in e_*
        self.procs: list[tuple] = []          # (kind, rank, key, name, role)
        self.proc_index: dict[tuple, int] = {}
        self.blocks: list[Block] = []
        self.n = 0

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

    def edge(self, s, d, c, lag):
        """Edges s -> d (arrays, or one edge as scalars), in the order given."""
        if np.ndim(s) == 0:
            self._one.append((int(s), int(d), int(c), float(lag)))
            return
        self._flush()
        self.e_src.append(np.asarray(s, np.int64))
        self.e_dst.append(np.asarray(d, np.int64))
        self.e_cls.append(np.asarray(c, np.int8))
        self.e_lag.append(np.asarray(lag, np.float64))

    def _flush(self) -> None:
        """The single edges added since the last array, as arrays (the order is kept)."""
        if self._one:
            s, d, c, lag = zip(*self._one)
            self.e_src.append(np.array(s, np.int64))
            self.e_dst.append(np.array(d, np.int64))
            self.e_cls.append(np.array(c, np.int8))
            self.e_lag.append(np.array(lag, np.float64))
            self._one = []


def rebuild(plan: Plan, pp: int | None = None, layers: int | None = None,
            microbatches: int | None = None) -> Plan:
    """A plan for `pp` stages, `layers` layers and `microbatches` per iteration, from `plan`'s blocks."""
    pp = pp or plan.pp
    layers = layers or plan.layers
    m = microbatches or plan.microbatches
    tm = plan.memo.get("templates")
    if tm is None:      # the same plan rebuilt again (a search's two replays): its templates are reused
        tm = plan.memo["templates"] = _Templates(plan)
    tm.reset()
    if not tm.layer:
        raise ValueError("the base run has no layer ranges: cannot rebuild its pipeline")
    st = plan.st
    b = _Builder(plan)
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
    for s in range(pp):
        rank = ranks[s]
        base_rank = tm.base_rank_for(s, pp)
        my_layers = list(layers_of_stage(s, pp, layers))
        first, last = s == 0, s == pp - 1
        stage_params = len(my_layers) * params_layer + params_embed * (first + last)
        ratio = stage_params / tm.stage_param_count(base_rank, base_stage_params[base_rank])
        state = {"last_on": {}, "thread": None, "counters": defaultdict(int), "ready": 0.0, "launched": 0.0,
                 "clock": 0.0, "base_rank": base_rank}

        def emit(bi: int, scale_params: float | None = None, p2p_ops=None, dp_bytes=None, lead=None,
                 layer=None, mb=None):
            _emit(plan, tm, b, state, bi, rank, s, pp, ranks, pairs, scale_params, p2p_ops, dp_bytes, lead,
                  layer, mb)

        def step_blocks(phase: str, mb: int, blocks: list) -> None:
            """Emit one forward/backward step: base step-start lags first, interior lags after."""
            src_rank = (tm.ranks[0] if first else tm.ranks[-1]) if phase == "forward" else \
                (tm.ranks[-1] if last else tm.ranks[0])
            # the base stage plays itself (first -> first, last -> last) for the base's micro-batches;
            # middle stages and extra micro-batches are replicas of a role
            own = (first if src_rank == tm.ranks[0] else last) and mb < tm.base_mb
            start = tm.lead(src_rank, phase, mb, replica=not own)
            for k, (bi, after, layer) in enumerate(blocks):
                if k == 0:
                    lead = start
                else:
                    lead = (tm.interior_lag.get(phase), None)
                emit(bi, lead=lead, layer=layer, mb=mb)
                if after is not None:
                    after()

        for bi in tm.prologue.get(base_rank, []):
            emit(bi, scale_params=ratio)
        for act in one_f_one_b(s, pp, m):
            if act[0] == "p2p":
                ops = act[1]
                tb = tm.p2p.get(tuple(sorted(k for k, _ in ops)))
                if not tb:
                    raise ValueError(f"the base run has no pipeline exchange of shape {ops}")
                emit(tm.p2p_block(tb, state["counters"][("p2p", tuple(sorted(k for k, _ in ops)))]),
                     p2p_ops=ops)
                state["counters"][("p2p", tuple(sorted(k for k, _ in ops)))] += 1
            elif act[0] == "F":
                mb = act[1]
                seq = []
                if first and (bi := tm.role_block(tm.embed, "forward", mb)) is not None:
                    seq.append((bi, None, None))
                seq += [(tm.layer_block(l, "forward", mb), None, l) for l in my_layers]
                if last and (bi := tm.role_block(tm.head, "forward", mb)) is not None:
                    seq.append((bi, None, None))
                step_blocks("forward", mb, seq)
            else:
                mb = act[1]
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
                if last and (bi := tm.role_block(tm.head, "backward", mb)) is not None:
                    seq.append((bi, ready(params_embed), None))
                seq += [(tm.layer_block(l, "backward", mb), layer_done(l), l) for l in reversed(my_layers)]
                if first and (bi := tm.role_block(tm.embed, "backward", mb)) is not None:
                    seq.append((bi, ready(params_embed), None))
                step_blocks("backward", mb, seq)
                if grads:
                    _grads(state, 0.0, tm, emit, flush=True)
        for bi in tm.optimizer.get(base_rank, []):
            emit(bi, scale_params=ratio)
    graph, stt = _assemble(plan, b)
    groups = [v for v in pairs.values() if len(v) == 2]
    out = plan.clone()
    out.graph, out.st = graph, stt
    out.role = comm_roles(stt)
    out.pp, out.layers, out.microbatches, out.ranks = pp, layers, m, ranks
    out.pairs = groups
    return out


def _grads(state, params: float, tm: _Templates, emit, flush: bool = False) -> None:
    """Issue every gradient bucket that is now full (all remaining ones with `flush`); where the base
    all-reduces only after its backward (`_Templates.dp_after_backward`), only at the flush."""
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
          lead=None, layer=None, mb=None):
    g, st = plan.graph, plan.st
    blk = st.blocks[bi]
    layer = blk.layer if layer is None else layer
    mb = blk.mb if mb is None or blk.mb < 0 else mb
    T = blk.tasks
    n = len(T)
    ids = b.n + np.arange(n, dtype=np.int64)
    lay = tm.layout(bi)
    procs = np.array([b.proc(rank, k, r) for k, r in zip(lay.kinds, lay.roles)], np.int64)[lay.which]
    # external in-edges: last task on the same (kind, role) processor of this stage
    (isrc, idst, icls, ilag), (ekind, erole, edst, ecls, elag) = tm.edges[bi]
    # a CPU capture's optimizer runs one loop of host ops per parameter tensor: its ops and the
    # host time between them grow with the parameters (a GPU run's grow in its kernels, below)
    host_scale = scale_params if scale_params is not None and tm.host_only and blk.kind == "optimizer" else None
    if len(isrc):
        b.edge(ids[isrc], ids[idst], icls, ilag if host_scale is None else ilag * host_scale)
    joined = set()
    intra_lead = lead[0] if lead is not None else None
    if lead is not None and len(lead) > 2 and lead[2] and state["thread"] in (None, blk.thread_role):
        # the base started this step after a hand-off from another thread (the main thread resuming
        # after the autograd thread's backward) plus host time (the next batch, the forward's Python);
        # here nothing hands off (a warm-up forward after a pipeline send and its synchronize), so
        # that host time follows the thread's own last task
        intra_lead = max(intra_lead or 0.0, lead[1])
    for k in range(len(edst)):
        src = state["last_on"].get((int(ekind[k]), int(erole[k])))
        if src is not None:
            lg = elag[k]
            if lead is not None and edst[k] == 0 and ecls[k] == _INTRA and intra_lead is not None:
                lg = intra_lead
            b.edge(src, ids[edst[k]], ecls[k], lg)
            joined.add(int(edst[k]))
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
            b.edge(src, ids[first_cpu], _INTRA, lg)
        if prev is not None and prev != role:
            src = state["last_on"].get((_CPU, prev))
            if src is not None:
                lag = tm.switch_lag[bi]
                if lead is not None and lead[1] is not None:
                    lag = lead[1]
                if lag is None:
                    lag = tm.handoff.get((prev, role), 0.0)
                b.edge(src, ids[first_cpu], _INTER, lag)
        state["thread"] = role
    # tasks
    ts = state["clock"] + (g.ts[T] - blk.start)
    state["clock"] = float(ts.max() + g.dur[T][np.argmax(ts)]) if n else state["clock"]
    dur = g.dur[T].copy()
    if host_scale is not None:
        dur *= host_scale
    coll = st.coll[T].copy()
    group = st.group[T].copy()
    nbytes = st.nbytes[T].copy()
    dims = st.op_dims[T].copy()
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
        elif role == "dp":
            old = CollectiveSpec("allreduce", nbytes[k], group[k])
            group[k] = dp_group(rank, plan.tp, plan.dp)
            if dp_bytes is not None:
                nbytes[k] = dp_bytes
            dur[k] = plan.collectives.retime(dur[k], old, CollectiveSpec("allreduce", nbytes[k], group[k]))
    if p2p_ops is not None:
        p2p_k = sorted([k for k in comm_k if coll[k] in ("send", "recv")], key=lambda k: g.ts[T[k]])
        avail = {"send": [k for k in p2p_k if coll[k] == "send"], "recv": [k for k in p2p_k if coll[k] == "recv"]}
        for kind, direction in p2p_ops:
            k = avail[kind].pop(0)
            to_next = (kind, direction) in (("send", "fwd"), ("recv", "bwd"))
            peer_stage = stage + 1 if to_next else stage - 1
            lo = min(stage, peer_stage)
            c = state["counters"]
            key = (direction, lo, c[(kind, direction)])
            c[(kind, direction)] += 1
            old = CollectiveSpec(kind, nbytes[k], group[k])
            group[k] = (min(rank, ranks[peer_stage]), max(rank, ranks[peer_stage]))
            dur[k] = plan.collectives.retime(dur[k], old, CollectiveSpec(kind, nbytes[k], group[k]))
            pairs[key].append(int(ids[k]))
    wk = g.wait_kind[T].copy()
    wt = g.wait_target[T].astype(np.int64).copy()
    for k in np.flatnonzero(wk == _STREAM_WAIT):
        p = wt[k]
        wt[k] = b.proc(rank, _GPU, st.proc_role[p])
    wt[wk == _DEVICE_WAIT] = rank
    parts = b.t_parts
    parts["name"].append(g.name[T])
    parts["kind"].append(g.kind[T])
    parts["proc"].append(procs)
    parts["dur"].append(dur)
    parts["ts"].append(ts)
    parts["comm"].append(g.comm[T])
    parts["in_step"].append(g.kind[T] == _GPU)
    parts["rank"].append(np.full(n, rank, np.int32))
    parts["wait_kind"].append(wk)
    parts["wait_target"].append(wt)
    parts["event"].append(g.event[T])
    parts["layer"].append(np.full(n, layer, np.int32))
    parts["phase"].append(np.full(n, {"forward": 0, "backward": 1}.get(blk.phase, 2 if blk.kind == "optimizer" else -1), np.int8))
    mp = b.m_parts
    mp["coll"].append(coll)
    mp["group"].append(group)
    mp["nbytes"].append(nbytes)
    mp["op_name"].append(st.op_name[T])
    mp["op_dims"].append(dims)
    mp["block"].append(np.full(n, len(b.blocks), np.int64))
    nb = Block(kind=blk.kind, phase=blk.phase, layer=layer, mb=mb, shape=blk.shape, rank=rank,
               thread_role=blk.thread_role, tasks=ids, start=float(ts.min()) if n else 0.0)
    b.blocks.append(nb)
    # the block's last task on each processor becomes "last on" for the next block
    for key, k in lay.last:
        state["last_on"][key] = b.n + k
    b.n += n


def _assemble(plan: Plan, b: _Builder) -> tuple[Graph, RunStructure]:
    b._flush()
    cat = np.concatenate
    tp = {k: cat(v) for k, v in b.t_parts.items()}
    n = len(tp["dur"])
    src = cat(b.e_src) if b.e_src else np.zeros(0, np.int64)
    dst = cat(b.e_dst) if b.e_dst else np.zeros(0, np.int64)
    cls = cat(b.e_cls) if b.e_cls else np.zeros(0, np.int8)
    lag = cat(b.e_lag) if b.e_lag else np.zeros(0)
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
    graph.summary = {"tasks": n, "edges": graph.edge_counts(), "predicted": True}
    mp = {k: cat(v) for k, v in b.m_parts.items()}
    role = np.zeros(len(procs), np.int64)
    role[:] = [p[4] for p in procs]
    st = RunStructure(blocks=b.blocks, task_block=mp["block"], coll=mp["coll"], group=mp["group"],
                      nbytes=mp["nbytes"].astype(np.float64), op_name=mp["op_name"], op_dims=mp["op_dims"],
                      proc_role=role, shape=plan.shape, tp=plan.tp, pp=0, dp=plan.dp,
                      layers=0, microbatches=0, stage_of_rank={}, stage_params={})
    return graph, st
