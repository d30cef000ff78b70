"""Data-parallel degree: local work unchanged; data-parallel collectives re-timed.

Each gradient all-reduce keeps its message size and gets the new group (Megatron
layout: stride tp, dp members), so its topology level may change (a group that
outgrows a host goes over RoCE); the collective supplier adds the model's change
to the measured duration. Pipeline peers move to their new global ranks too.

A sharded base (FSDP, ZeRO; `Plan.sharding`) changes the same way: each unit's
all-gather and reduce-scatter keeps its full message (the unit's parameters, of
which each rank holds 1/DP) and takes the new group, so a ring moves (n-1)/n of it
per rank where it moved (n-1)/n before; where they sit, their streams and the
waits that order them are the base's. Its optimizer updates the rank's shard:
the optimizer's kernels do old DP / new DP of the base's work.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from lumos.durations import CollectiveSpec
from lumos.graph.model import TaskKind

from .plan import Plan, block_mask, dp_group, edp_group, ep_group, stage_ranks


def change_dp(plan: Plan, dp: int) -> Plan:
    if dp == plan.dp:
        return plan
    out = plan.clone()
    g, st = out.graph, out.st
    old_ranks = list(plan.ranks)
    new_ranks = stage_ranks(plan.pp, plan.tp, dp)
    remap = dict(zip(old_ranks, new_ranks))
    for t in np.flatnonzero(out.role != None).tolist():  # noqa: E711 (element-wise)
        role = out.role[t]
        if role not in ("dp", "pp", "tp", "ep", "edp"):
            continue
        old = CollectiveSpec(st.coll[t], st.nbytes[t], st.group[t])
        r = remap.get(int(g.rank[t]), int(g.rank[t]))
        if role == "dp":
            group = dp_group(r, plan.tp, dp) if dp > 1 else (r,)
        elif role == "ep":     # an MoE layer's exchange: the same EP group, at the stage's new ranks
            group = ep_group(r, plan.tp, dp, plan.ep)
        elif role == "edp":    # the experts' gradients: TP x DP / EP ranks hold the same experts
            group = edp_group(r, plan.tp, dp, plan.ep)
        elif role == "tp":
            group = tuple(range(r, r + plan.tp))
        else:
            group = tuple(sorted(remap.get(x, x) for x in st.group[t]))
        st.group[t] = group
        g.dur[t] = out.collectives.retime(g.dur[t], old, CollectiveSpec(st.coll[t], st.nbytes[t], group))
    if plan.sharding:
        _reshard_optimizer(out, plan.dp / dp)
    g.proc_rank[:] = _remapped(g.proc_rank, remap)
    g.rank[:] = _remapped(g.rank, remap)
    # new blocks, not edits: the clone shares its Block objects with the base, which other targets reuse
    st.blocks = [dataclasses.replace(b, rank=remap.get(b.rank, b.rank)) for b in st.blocks]
    out.dp, out.ranks = dp, new_ranks
    out.st.dp = dp
    return out


def _reshard_optimizer(plan: Plan, ratio: float) -> None:
    """The optimizer's device work (norm, Adam, their element-wise kernels) times `ratio` of the
    base's: each rank updates 1/DP of the parameters. Copies and collectives keep their time."""
    g, st = plan.graph, plan.st
    opt = block_mask(st, ("optimizer",)) & (g.kind == TaskKind.GPU) & ~g.comm
    opt &= ~np.char.startswith(g.name.astype(str), "Mem")
    for t in np.flatnonzero(opt).tolist():
        g.dur[t] = plan.compute.scale(g.dur[t], "elementwise", ratio)


def _remapped(ranks: np.ndarray, remap: dict) -> np.ndarray:
    """`ranks` with each one in `remap` replaced (others kept)."""
    out = np.asarray(ranks).copy()
    for old, new in remap.items():
        out[ranks == old] = new
    return out
