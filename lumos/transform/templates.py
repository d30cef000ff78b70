"""Template blocks of a base run for the rebuild: each block's tasks, edges and host leads by role.

`rebuild` re-sequences a run from copies of its blocks (`rebuild.py`). What a copy needs to know
about its base block is read here once: the block's internal edges and where its external in-edges
come from (by processor role), the host lag before each forward / backward step and whether a
thread hand-off or program order set that step's start, which block plays a role that the base
has several of (the typical one where a one-off stall made one an outlier), and each block's tasks
by processor.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from lumos.graph.model import EdgeClass, TaskKind, WaitKind
from lumos.model.checkpointing import checkpointed, run_ac_period
from lumos.model.parallel_layout import chunk_of_layer

from .dp_shard_units import ShardedGlue
from .plan import Plan

__all__ = ["Templates", "BlockLayout", "is_outlier"]

_GPU, _CPU = int(TaskKind.GPU), int(TaskKind.CPU)
_INTRA, _INTER, _CROSS = int(EdgeClass.INTRA_THREAD), int(EdgeClass.INTER_THREAD), int(EdgeClass.CROSS_RANK)
_STREAM_WAIT, _DEVICE_WAIT = int(WaitKind.STREAM), int(WaitKind.DEVICE)


class Templates:
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
        # a sharded base's per-unit gathers and reduce-scatters go with the blocks they serve
        self.sharded = ShardedGlue(plan) if plan.sharding else None
        attached = self.sharded.attached if self.sharded else set()
        for i, b in enumerate(st.blocks):
            if i in attached:
                continue
            if b.kind == "glue" and b.start < first_main.get(b.rank, np.inf):
                self.prologue.setdefault(b.rank, []).append(i)
            elif b.kind == "glue":
                self.optimizer.setdefault(b.rank, []).append(i)   # trailing glue goes with the optimizer
        for r in self.optimizer:
            self.optimizer[r].sort(key=lambda i: st.blocks[i].start)
        self.base_layers = 1 + max(k[0] for k in self.layer) if self.layer else 0
        self.base_mb = 1 + max(k[2] for k in self.layer) if self.layer else 0
        self.ranks = sorted({b.rank for b in st.blocks})
        self.base_chunks = max(plan.chunks, 1)
        # activation checkpointing: the base layers whose backward re-runs their forward, and the N of torchtitan's
        # per-layer selective AC that explains them (`lumos.model.checkpointing`; None: no N does)
        self.recomputed = st.recomputed
        self.ac_every = run_ac_period(st)
        chunk_of = _chunk_of(st, self.base_chunks, plan.chunk_layers)
        self.host_only = not np.any(g.kind == _GPU)   # a CPU capture: the host does the work
        # per block: tasks, internal edges (local ids), external in-edges (by source processor)
        local = np.full(g.n_tasks, -1, np.int64)     # a task's index in its block
        for b in st.blocks:
            local[b.tasks] = np.arange(len(b.tasks))
        self.edges, self.lead_lag, self.handoff_binds, self.switch_lag = _block_edges(g, st, local)
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
            key = (bl.rank, bl.phase, bl.mb, chunk_of(bl))
            if key in seen:
                if self.lead_lag[i][0] is not None:
                    interior[bl.phase].append(self.lead_lag[i][0])
                continue
            seen.add(key)
            j = self.sharded.opening(i) if self.sharded else i   # a step may open with its gathers
            self.step_lead[key] = self.lead_lag[j]
            self.step_handoff_binds[key] = self.handoff_binds[j]
        self.interior_lag = {ph: float(np.median(v)) for ph, v in interior.items()}
        # a base whose every step held one block of a phase (interleaved chunks of one layer) has no sample of the
        # host time between two layers of a step; a target that runs several per step (fewer chunks) would
        # otherwise enter each on its template's own lead, the whole step's host time: the host time between two
        # ops inside its layers stands in for it
        for ph in ("forward", "backward"):
            if ph not in self.interior_lag:
                inner = [self.edges[i][0][3][self.edges[i][0][2] == _INTRA] for i, bl in enumerate(st.blocks)
                         if bl.kind == "layer" and bl.phase == ph]
                inner = np.concatenate(inner) if inner else np.empty(0)
                if len(inner):
                    self.interior_lag[ph] = float(np.median(inner))
        # step leads of stages that replicate a base stage's role (middle stages, extra micro-batches):
        # the base's value for that micro-batch unless it is an outlier among the base's micro-batches
        # of the same (rank, phase, lead pattern) -- a one-off host stall -- which a replica replaces
        # by their median (ordinary run-to-run variation of host time is kept, so totals stay unbiased)
        pat = defaultdict(list)
        for (r, ph, mb, _), ll in self.step_lead.items():
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
        self._costs: dict[int, float] = {}
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
                    cand[self._pool_key(bl)].append((cost, bl.layer, i))
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
        if "dp" in plan.inserted:     # an added bucket template sits after backward; Megatron overlaps them
            self.dp_after_backward = False

    def layout(self, bi: int) -> "BlockLayout":
        """What `_emit` needs of block `bi` that does not depend on where it is emitted (cached:
        a rebuild emits each base block many times)."""
        lay = self._layouts.get(bi)
        if lay is None:
            lay = self._layouts[bi] = BlockLayout.of(self.plan, self.plan.st.blocks[bi], self.edges[bi][1])
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

    def _pool_key(self, bl) -> tuple:
        """The pool of blocks a block is typical of: its rank and phase, and in the backward whether it
        re-runs its forward (a checkpointed layer's backward is not an outlier among plain ones)."""
        return (bl.rank, bl.phase, bl.phase == "backward" and bl.layer in self.recomputed)

    def layer_block(self, layer: int, phase: str, mb: int, recompute: bool | None = None) -> int:
        """Template of layer `layer`'s `phase` for micro-batch `mb`: base layer `layer` mod L; where the target
        says whether the layer is checkpointed (`recompute`) and that base layer differs, the nearest base layer
        that is as the target's (torchtitan's per-layer selective AC with other stages or layers)."""
        base = layer % self.base_layers
        if recompute is not None and (base in self.recomputed) != recompute:
            base = self._nearest(base, recompute, phase, mb % self.base_mb)
        key = (base, phase, mb % self.base_mb)
        bi = self.layer[key]
        self.uses[bi] += 1
        if self.uses[bi] > 1:      # a replica: this block again unless it holds a one-off stall
            bl = self.plan.st.blocks[bi]
            k = self._pool_key(bl)
            if k in self.typical:
                cost = self.block_cost.get(bi)
                if cost is None:    # a first/last layer of its base stage: not in the pool
                    cost = self._cost(bi)
                if self._outlier(cost, self.cost_pool[k]):
                    return self.typical[k]
        return bi

    def _nearest(self, base: int, recompute: bool, phase: str, mb: int) -> int:
        """The base layer nearest `base` (the lower one on a tie) that recomputes as `recompute` says and has a
        `phase` block for micro-batch `mb`; `base` itself where none does."""
        for d in range(1, self.base_layers):
            for l in (base - d, base + d):
                if 0 <= l < self.base_layers and (l in self.recomputed) == recompute and (l, phase, mb) in self.layer:
                    return l
        return base

    def checkpointed(self, layers) -> frozenset | None:
        """Which of a target stage's `layers` (in build order) recompute, where the base's checkpointing is
        torchtitan's per-layer selective AC with N > 1 (`ac_period`); None otherwise (each layer keeps base layer
        l mod L, as it recomputes there)."""
        if not self.ac_every or self.ac_every == 1:
            return None
        return checkpointed(layers, self.ac_every)

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
        """Host + device time of a block: its tasks' durations plus its internal (host) lags (once per
        block: a replica of a first or last layer asks again at every use)."""
        cost = self._costs.get(bi)
        if cost is None:
            cost = self._costs[bi] = float(self.plan.graph.dur[self.plan.st.blocks[bi].tasks].sum()) + float(
                np.clip(self.edges[bi][0][3], 0.0, None).sum())
        return cost

    def lead(self, rank: int, phase: str, mb: int, replica: bool, chunk: int = 0):
        """Host lag before a step's first block: the base's own value, or a robust one for a replica;
        as (program-order lag, hand-off lag, whether the hand-off set the start in the base). A chunk
        the base did not have takes the base's last one's."""
        key = (rank, phase, mb % self.base_mb, min(chunk, self.base_chunks - 1))
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


def _chunk_of(st, chunks: int, sizes: tuple):
    """Block -> the model chunk it ran in: a layer by its place in its stage's chunks (`sizes`, per stage in
    rank order; `parallel_layout.layer_chunks`), the embedding in the first chunk, the head in the last."""
    if chunks == 1 or not sizes:
        return lambda bl: 0
    where = {}
    for stage, r in enumerate(sorted({b.rank for b in st.blocks})):   # a transform may have renumbered the ranks
        held = sorted({b.layer for b in st.blocks if b.rank == r and b.kind == "layer"})
        where.update({(r, l): c for l, c in chunk_of_layer(held, sizes[stage]).items()})

    def of(bl) -> int:
        if bl.kind == "layer":
            return where[(bl.rank, bl.layer)]
        return 0 if bl.kind == "embedding" else chunks - 1
    return of


def _block_edges(g, st, local: np.ndarray) -> tuple[list, list, list, list]:
    """Per block of the base: its internal edges (local ids) and its in-edges from outside (by source
    processor, hand-offs between threads apart); the largest program-order and hand-off lags into
    its first task; whether a hand-off (not program order) set its start; the largest hand-off lag
    into it (None: none). Read for all blocks at once: edges grouped by block, then by which of
    the three they are (inside, from outside, a hand-off), each group in the graph's edge order."""
    keep = np.flatnonzero(g.cls != _CROSS)
    blk = st.task_block
    n = len(st.blocks)
    to = blk[g.dst[keep]]
    keep, to = keep[to >= 0], to[to >= 0]
    src, dst, cls, lag = g.src[keep], g.dst[keep], g.cls[keep], g.lag[keep]
    part = np.where(blk[src] == to, 0, np.where(cls == _INTER, 2, 1))
    order = np.lexsort((part, to))            # stable: each group keeps the graph's edge order
    src, dst, cls, lag, to, part = src[order], dst[order], cls[order], lag[order], to[order], part[order]
    cuts = np.searchsorted(to * 3 + part, np.arange(3 * n + 1))
    lsrc, ldst = local[src], local[dst]
    kind, role = g.proc_kind[g.proc[src]], st.proc_role[g.proc[src]]
    outside = part > 0
    lead = outside & (ldst == 0)

    def largest(mask, value):
        """Per block, the largest `value` where `mask` (None where none), as np.max reads it."""
        best = np.full(n, -np.inf)
        np.maximum.at(best, to[mask], value[mask])
        has = np.zeros(n, bool)
        has[to[mask]] = True
        return [float(v) if h else None for v, h in zip(best.tolist(), has.tolist())]

    lead_intra = largest(lead & (cls == _INTRA), lag)
    lead_inter = largest(lead & (cls == _INTER), lag)
    switch = largest(part == 2, lag)
    # the in-edge that last released the block's first task in the base (np.argmax: the first such)
    into = np.flatnonzero(lead & ((cls == _INTRA) | (cls == _INTER)))
    ready = g.ts[src[into]] + g.dur[src[into]] + lag[into]
    top = np.full(n, -np.inf)
    np.maximum.at(top, to[into], ready)
    peak = top[to[into]]
    first = into[(ready == peak) | (np.isnan(ready) & np.isnan(peak))]
    first = first[np.lexsort((order[first], to[first]))]     # ties: the first in the graph's edge order
    blocks_with, at = np.unique(to[first], return_index=True)
    binds = np.zeros(n, bool)
    binds[blocks_with] = cls[first[at]] == _INTER
    edges = []
    for i in range(n):
        a, b, c = cuts[3 * i], cuts[3 * i + 1], cuts[3 * i + 2]
        edges.append(((lsrc[a:b], ldst[a:b], cls[a:b], lag[a:b]),
                      (kind[b:c], role[b:c], ldst[b:c], cls[b:c], lag[b:c])))
    return edges, list(zip(lead_intra, lead_inter)), binds.tolist(), switch


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
class BlockLayout:
    """A base block's tasks by processor: the distinct (kind, role) pairs and each task's index into
    them, the last task (by start) on each, its collectives and its first CPU task; and the columns
    a copy starts from (read once here: a rebuild copies each base block many times)."""
    kinds: list
    roles: list
    which: np.ndarray
    last: list          # ((kind, role), local index of the last task there)
    comm: list          # local indices of the collective tasks
    first_cpu: int      # local index of the first CPU task, -1: none
    rel_ts: np.ndarray = None     # each task's start after the block's
    rel_first: float = 0.0        # the earliest of them
    dur: np.ndarray = None
    group: np.ndarray = None      # the run structure's columns of the block's tasks
    nbytes: np.ndarray = None
    dims: np.ndarray = None
    coll: np.ndarray = None       # read only: shared by every copy
    stream_waits: list = None     # (local index, role of the stream it waits for)
    device_waits: np.ndarray = None   # local indices of the tasks that wait for their whole device
    wait_target: np.ndarray = None
    external: list = None         # in-edges from outside: (kind, role, local dst, class, lag)

    @classmethod
    def of(cls, plan: Plan, blk, external=None) -> "BlockLayout":
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
        coll = st.coll[T]
        rel_ts = g.ts[T] - blk.start
        wk, wt = g.wait_kind[T], g.wait_target[T].astype(np.int64)
        stream = np.flatnonzero(wk == _STREAM_WAIT)
        return cls(kinds=[u[0] for u in uniq], roles=[u[1] for u in uniq],
                   which=np.array([index[p] for p in pairs], np.int64), last=list(last.items()),
                   comm=[k for k, c in enumerate(coll) if c is not None],
                   first_cpu=int(cpu[0]) if len(cpu) else -1,
                   rel_ts=rel_ts, rel_first=float(rel_ts.min()) if len(T) else 0.0, dur=g.dur[T],
                   group=st.group[T], nbytes=st.nbytes[T], dims=st.op_dims[T], coll=coll,
                   stream_waits=list(zip(stream.tolist(), st.proc_role[wt[stream]].tolist())),
                   device_waits=np.flatnonzero(wk == _DEVICE_WAIT), wait_target=wt,
                   external=list(zip(*(x.tolist() for x in external))) if external is not None else None)
