"""A sharded base's per-unit collectives as attachments of the layer blocks they serve, for the rebuild.

In an FSDP / ZeRO-3 run every unit all-gathers its parameters before its
forward and its backward, and reduce-scatters its gradients after the last
micro-batch's backward (torch `distributed/fsdp/_fully_shard/_fsdp_param_group.py`).
Those ops sit outside the layer ranges, so the structure reads them as glue
blocks between layers. A rebuild that copies only the layers would lose them,
or pile them up after the backward; here each such glue block is attached to
the layer (embedding, head) block it precedes, or, for a reduce-scatter, the
backward block it follows, keyed by what decides which gathers a block's
prefix holds:

- the block's kind and phase;
- whether it opens its stage's forward or backward (the root gathers there,
  and in the backward also the block's own unit);
- whether a layer follows it in that phase (the backward prefetches the next
  unit down: the bottom layer, followed by the embedding or by nothing, does not);
- its micro-batch: the last one reduce-scatters, the first of the base is kept
  as recorded, others take the base's latest middle micro-batch.

A stage of the target that holds neither the embedding nor the head has no
root unit, so a root-sized gather in a copied prefix is left out there. A
target that keeps its units gathered from forward to backward (SHARD_GRAD_OP,
`dp_sharding.py`) takes no backward prefix: each holds only gathers, their
prefetches and the compute's waits on them.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from lumos.durations import CollectiveSpec
from lumos.graph.model import TaskKind

MAIN = ("layer", "embedding", "head")
SHARD_COLLECTIVES = ("allgather", "reduce_scatter")
ORDERING_CALLS = ("cudaStreamWaitEvent", "cudaEventRecord", "hipStreamWaitEvent", "hipEventRecord")


def unit_collectives(plan, kinds=SHARD_COLLECTIVES) -> np.ndarray:
    """Tasks of a sharded base's per-unit collectives (DP-role all-gathers and reduce-scatters)."""
    return np.flatnonzero(np.isin(plan.st.coll.astype(str), kinds) & (plan.role == "dp"))


def scale_units(plan, factor) -> None:
    """Each per-unit collective's message times `factor(message bytes)`, re-timed by the collective
    model (a TP change shards every unit further, a width change re-sizes layers and root apart)."""
    g, st = plan.graph, plan.st
    for t in unit_collectives(plan).tolist():
        old = CollectiveSpec(st.coll[t], st.nbytes[t], st.group[t])
        st.nbytes[t] = st.nbytes[t] * factor(float(st.nbytes[t]))
        g.dur[t] = plan.collectives.retime(g.dur[t], old, CollectiveSpec(st.coll[t], st.nbytes[t], st.group[t]))


def layer_unit_bytes(plan) -> float:
    """The message of a layer unit's all-gather: the most common one among the DP all-gathers (the
    root's is the embedding's or the head's, gathered as often as one layer's); 0 without any."""
    gathers = plan.st.nbytes[unit_collectives(plan, ("allgather",))].astype(float)
    if not len(gathers):
        return 0.0
    vals, counts = np.unique(np.array(gathers), return_counts=True)
    return float(vals[int(np.argmax(counts))])


class ShardedGlue:
    """Prefix and suffix glue blocks of every main block of a sharded base (`Templates.sharded`)."""

    def __init__(self, plan):
        g, st = plan.graph, plan.st
        self.st = st
        self.regather = plan.sharding != "fsdp_grad_op"   # the target gathers again before a backward
        self.prefix: dict[tuple, list[int]] = {}
        self.suffix: dict[tuple, list[int]] = {}
        self.attached: set[int] = set()
        self._opening: dict[int, int] = {}   # main block -> the first glue block of its prefix
        layer_mbs = [b.mb for b in st.blocks if b.kind == "layer"]
        self.base_mb = 1 + max(layer_mbs) if layer_mbs else 1
        self.layer_bytes = layer_unit_bytes(plan)
        self._units = set(unit_collectives(plan).tolist())
        self._root_only = {i: self._gathers_other_than_layer(i) for i, b in enumerate(st.blocks) if b.kind == "glue"}
        by_rank: dict[int, list[int]] = defaultdict(list)
        for i, b in enumerate(st.blocks):
            by_rank[b.rank].append(i)
        for r, idx in by_rank.items():
            idx.sort(key=lambda i: st.blocks[i].start)
            self._attach(r, idx, g)

    def _is_shard_glue(self, g, i: int) -> bool:
        """A glue block of the sharded DP: it holds a DP all-gather or reduce-scatter, or only the
        event record / stream wait that orders one with the compute."""
        b = self.st.blocks[i]
        if b.kind != "glue" or not len(b.tasks):
            return False
        if any(int(t) in self._units for t in b.tasks):
            return True
        return all(g.kind[t] == TaskKind.CPU and str(g.name[t]) in ORDERING_CALLS for t in b.tasks)

    def _gathers_other_than_layer(self, i: int) -> bool:
        """Whether glue block `i` gathers a unit other than a layer (the root) and nothing else."""
        st = self.st
        ag = [float(st.nbytes[t]) for t in st.blocks[i].tasks if int(t) in self._units and st.coll[t] == "allgather"]
        return bool(ag) and all(abs(x - self.layer_bytes) > 0.5 for x in ag)

    def _attach(self, rank: int, idx: list[int], g) -> None:
        st = self.st
        main = [i for i in idx if st.blocks[i].kind in MAIN]
        seq: dict[tuple, list[int]] = defaultdict(list)
        for i in main:
            seq[(st.blocks[i].phase, st.blocks[i].mb)].append(i)
        where = {}
        for blocks in seq.values():
            for k, i in enumerate(blocks):
                nxt = blocks[k + 1] if k + 1 < len(blocks) else None
                where[i] = (k == 0, nxt is not None and st.blocks[nxt].kind == "layer")
        pending: list[int] = []
        last_main = None
        pre, suf = defaultdict(list), defaultdict(list)
        for i in idx:
            b = st.blocks[i]
            if b.kind in MAIN:
                pre[i] = pending
                pending = []
                last_main = i
            elif self._is_shard_glue(g, i):
                rs = any(st.coll[t] == "reduce_scatter" for t in b.tasks)
                if rs and last_main is not None and st.blocks[last_main].phase == "backward" and not pending:
                    suf[last_main].append(i)
                else:
                    pending.append(i)
                self.attached.add(i)
        for i in pending:   # after the last main block, no block to precede: the optimizer's
            self.attached.discard(i)
        for i in main:
            if pre[i]:
                self._opening[i] = pre[i][0]
        for i in main:
            b = st.blocks[i]
            first, next_layer = where[i]
            for mbk in self._mb_keys(b.mb):
                key = (rank, b.phase, mbk, b.kind, first, next_layer)
                self.prefix[key] = pre[i]
                self.suffix[key] = suf[i]

    def opening(self, i: int) -> int:
        """The block a main block's step opens with in the base: its first prefix glue block, or itself."""
        return self._opening.get(i, i)

    def _mb_keys(self, mb: int) -> list:
        """The keys a base micro-batch is filed under: its own, `last`, and `other` for middle ones
        (the latest one wins: the first micro-batch may hold the iteration's start-up)."""
        if mb == self.base_mb - 1:
            return ["last"] + ([mb] if mb > 0 else [])
        return [mb] + (["other"] if mb > 0 or self.base_mb <= 2 else [])

    def around(self, base_rank: int, phase: str, mb: int, m: int, kind: str, first: bool, next_layer: bool,
               has_root: bool) -> tuple[list[int], list[int]]:
        """(prefix, suffix) glue blocks of a main block at this place of a target stage played by
        `base_rank`, micro-batch `mb` of `m`. Where the base has no block at the same place (a stage of
        one layer opens its backward with its bottom layer), the nearest one's prefix is taken, with
        its prefetch of the next unit down dropped or a middle layer's added."""
        if mb == m - 1:
            mbks = ["last"]
        elif mb < self.base_mb - 1:
            mbks = [mb, "other"]
        else:
            mbks = ["other", "last"]
        for mbk in mbks:
            for f, nl in ((first, next_layer), (first, not next_layer), (not first, next_layer),
                          (not first, not next_layer)):
                key = (base_rank, phase, mbk, kind, f, nl)
                if key not in self.prefix:
                    continue
                suffix = list(self.suffix[key]) if mb == m - 1 else []
                if phase == "backward" and not self.regather:
                    return [], suffix
                pre = list(self.prefix[key])
                if phase == "backward" and nl != next_layer:
                    pre = self._prefetch(pre, next_layer, (base_rank, phase, mbk))
                if not has_root:
                    pre = [i for i in pre if not self._root_only.get(i, False)]
                return pre, suffix
        return [], []

    def _prefetch(self, pre: list[int], want: bool, where: tuple) -> list[int]:
        """A backward prefix with its prefetch of the next unit down (its last gather) dropped, or
        a middle layer's prefetch added before its final wait."""
        gathers = [k for k, i in enumerate(pre) if self._gathers(i)]
        if not want:
            return [i for k, i in enumerate(pre) if not gathers or k != gathers[-1]]
        extra = self._prefetch_block(where)
        if extra is None:
            return pre
        return pre[:-1] + [extra] + pre[-1:] if pre else [extra]

    def _gathers(self, i: int) -> bool:
        return any(self.st.coll[t] == "allgather" for t in self.st.blocks[i].tasks)

    def _prefetch_block(self, where: tuple) -> int | None:
        """The gather glue block of a middle layer's backward prefix (a prefetch of the next unit down)."""
        rank, phase, mbk = where
        pre = self.prefix.get((rank, phase, mbk, "layer", False, True), [])
        blocks = [i for i in pre if self._gathers(i)]
        return blocks[-1] if blocks else None
