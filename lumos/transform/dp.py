"""Data-parallel degree: local work unchanged; data-parallel collectives re-timed.

Each gradient all-reduce keeps its message size and gets the new group (Megatron
layout: stride tp, dp members), so its topology level may change (a group that
outgrows a host goes over RoCE); the collective supplier adds the model's change
to the measured duration. Pipeline peers move to their new global ranks too.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .plan import Plan, dp_group, stage_ranks
from .suppliers import CollectiveSpec


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
        if role not in ("dp", "pp", "tp"):
            continue
        old = CollectiveSpec(st.coll[t], st.nbytes[t], st.group[t])
        r = remap.get(int(g.rank[t]), int(g.rank[t]))
        if role == "dp":
            group = dp_group(r, plan.tp, dp) if dp > 1 else (r,)
        elif role == "tp":
            group = tuple(range(r, r + plan.tp))
        else:
            group = tuple(sorted(remap.get(x, x) for x in st.group[t]))
        st.group[t] = group
        g.dur[t] = out.collectives.retime(g.dur[t], old, CollectiveSpec(st.coll[t], st.nbytes[t], group))
    g.proc_rank[:] = _remapped(g.proc_rank, remap)
    g.rank[:] = _remapped(g.rank, remap)
    # new blocks, not edits: the clone shares its Block objects with the base, which other targets reuse
    st.blocks = [dataclasses.replace(b, rank=remap.get(b.rank, b.rank)) for b in st.blocks]
    out.dp, out.ranks = dp, new_ranks
    out.st.dp = dp
    return out


def _remapped(ranks: np.ndarray, remap: dict) -> np.ndarray:
    """`ranks` with each one in `remap` replaced (others kept)."""
    out = np.asarray(ranks).copy()
    for old, new in remap.items():
        out[ranks == old] = new
    return out
