"""Data-parallel degree: local work unchanged; data-parallel collectives re-timed.

Each gradient all-reduce keeps its message size and gets the new group (Megatron
layout: stride tp, dp members), so its topology level may change (a group that
outgrows a host goes over RoCE); the collective supplier adds the model's change
to the measured duration. Pipeline peers move to their new global ranks too.
"""

from __future__ import annotations

import dataclasses

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
    for t in range(g.n_tasks):
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
    for p in range(g.n_procs):
        g.proc_rank[p] = remap.get(int(g.proc_rank[p]), int(g.proc_rank[p]))
    for t in range(g.n_tasks):
        g.rank[t] = remap.get(int(g.rank[t]), int(g.rank[t]))
    # new blocks, not edits: the clone shares its Block objects with the base, which other targets reuse
    st.blocks = [dataclasses.replace(b, rank=remap.get(b.rank, b.rank)) for b in st.blocks]
    out.dp, out.ranks = dp, new_ranks
    out.st.dp = dp
    return out
