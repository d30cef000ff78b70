"""Cross-rank edges: communication peers meet at a rendezvous.

A collective (or a send and its receive) cannot finish on one rank before
every peer has arrived. The k-th op on a process group on rank A is the same
call as the k-th op on that group on rank B (NCCL issues calls on a
communicator in program order); for point-to-point ops the order is kept per
direction (the k-th send A->B is the k-th receive on B from A). Each matched
call becomes a zero-duration virtual task R: every in-edge of every member
is copied onto R, and R precedes every member, so all members start together
once the last of them is ready.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lumos.lean_numpy import unique

from ..model import EdgeClass, Graph, TaskKind

__all__ = ["P2P", "CommOp", "match_key", "match_ops", "add_rendezvous"]

P2P = frozenset({"send", "recv"})


@dataclass(frozen=True)
class CommOp:
    task: int            # task id in the run graph
    rank: int
    kind: str            # a kind of lumos.trace.collectives.KINDS: all_reduce, all_to_all, send, recv, ...
    group: tuple         # ranks of the process group
    nelems: int | None = None    # message elements, None when the trace does not say


def match_key(op: CommOp) -> tuple | None:
    """Ops with the same key on different ranks are matched by order of occurrence."""
    if op.kind in P2P:
        others = [r for r in op.group if r != op.rank]
        if len(others) != 1:
            return None
        src, dst = (op.rank, others[0]) if op.kind == "send" else (others[0], op.rank)
        return (op.group, "p2p", src, dst)
    return (op.group, "coll")


def match_ops(ops: list[CommOp], included_ranks) -> list[list[int]]:
    """Rendezvous groups (lists of task ids) of ops that several included ranks share.

    `ops` must be in issue order per rank. A group forms only when every
    included member of the process group has its k-th op.
    """
    included = set(int(r) for r in included_ranks)
    per: dict[tuple, dict[int, list[int]]] = {}
    for op in ops:
        key = match_key(op)
        if key is None:
            continue
        per.setdefault(key, {}).setdefault(op.rank, []).append(op.task)
    groups = []
    for key, by_rank in per.items():
        group_ranks = key[0]
        if key[1] == "p2p":
            members = {key[2], key[3]}
        else:
            members = set(group_ranks)
        members &= included
        if len(members) < 2 or not members <= set(by_rank):
            continue
        n = min(len(by_rank[r]) for r in members)
        for k in range(n):
            groups.append([by_rank[r][k] for r in sorted(members)])
    groups.sort(key=lambda g: min(g))
    return groups


def add_rendezvous(graph: Graph, groups: list[list[int]], set_durations: bool = True) -> Graph:
    """A copy of `graph` with one virtual rendezvous task per group and CROSS_RANK edges.

    With `set_durations`, each member's duration becomes its measured end minus
    the latest measured start among the members: the waiting for peers is now
    explained by the rendezvous, not by a long kernel.
    """
    if not groups:
        return graph.copy()
    n0, p0 = graph.n_tasks, graph.n_procs
    m = len(groups)
    sentinel = int(max(graph.rank.max(initial=0), graph.proc_rank.max(initial=0))) + 1
    dur = graph.dur.copy()
    src_in = np.asarray(graph.src)
    dst_in = np.asarray(graph.dst)
    in_edges: dict[int, np.ndarray] = {}
    member_ids = unique(np.concatenate([np.asarray(g) for g in groups]))
    order = np.argsort(dst_in, kind="stable")
    sorted_dst = dst_in[order]
    lo = np.searchsorted(sorted_dst, member_ids, side="left")
    hi = np.searchsorted(sorted_dst, member_ids, side="right")
    for t, a, b in zip(member_ids, lo, hi):
        in_edges[int(t)] = order[a:b]
    new_src, new_dst, new_lag = [], [], []
    r_ts = np.zeros(m)
    r_release = np.full(m, -np.inf)
    end = graph.end   # once: the property computes it over every task of the run
    for j, members in enumerate(groups):
        r = n0 + j
        members = np.asarray(members, dtype=np.int64)
        latest = float(graph.ts[members].max())
        r_ts[j] = latest
        if set_durations:
            dur[members] = np.maximum(end[members] - latest, 0.0)
        rel = graph.release[members]
        if np.any(np.isfinite(rel)):
            r_release[j] = float(rel[np.isfinite(rel)].max())
        for k in members:
            e = in_edges.get(int(k), np.zeros(0, np.int64))
            new_src.extend(src_in[e].tolist())
            new_dst.extend([r] * len(e))
            new_lag.extend(graph.lag[e].tolist())
            new_src.append(r)
            new_dst.append(int(k))
            new_lag.append(0.0)
        # a member anchored by a release time keeps it; R must not wait for it twice
    out = graph.copy()
    names = np.empty(m, dtype=object)
    names[:] = [f"rendezvous #{j}" for j in range(m)]
    pnames = np.empty(m, dtype=object)
    pnames[:] = [f"rendezvous #{j}" for j in range(m)]
    cat = np.concatenate
    out.name = cat([graph.name, names])
    out.kind = cat([graph.kind, np.full(m, TaskKind.GPU, np.int8)])
    out.proc = cat([graph.proc, p0 + np.arange(m, dtype=np.int32)]).astype(np.int32)
    out.dur = cat([dur, np.zeros(m)])
    out.ts = cat([graph.ts, r_ts])
    out.release = cat([graph.release, r_release])
    out.comm = cat([graph.comm, np.zeros(m, bool)])
    out.in_step = cat([graph.in_step, np.zeros(m, bool)])
    out.rank = cat([graph.rank, np.full(m, sentinel, np.int32)]).astype(np.int32)
    out.stream_pos = cat([graph.stream_pos, np.zeros(m, np.int32)]).astype(np.int32)
    out.wait_kind = cat([graph.wait_kind, np.zeros(m, np.int8)]).astype(np.int8)
    out.wait_target = cat([graph.wait_target, np.full(m, -1, np.int32)]).astype(np.int32)
    out.event = cat([graph.event, np.full(m, -1, np.int64)])
    out.layer = cat([graph.layer, np.full(m, -1, np.int32)]).astype(np.int32)
    out.phase = cat([graph.phase, np.full(m, -1, np.int8)]).astype(np.int8)
    if graph.finish_floor is not None:
        out.finish_floor = cat([graph.finish_floor, np.full(m, -np.inf)])
    out.proc_kind = cat([graph.proc_kind, np.full(m, TaskKind.GPU, np.int8)])
    out.proc_rank = cat([graph.proc_rank, np.full(m, sentinel, np.int32)]).astype(np.int32)
    out.proc_key = cat([graph.proc_key, -1 - np.arange(m, dtype=np.int64)])
    out.proc_name = cat([graph.proc_name, pnames])
    k = len(new_src)
    out.src = cat([graph.src, np.asarray(new_src, np.int64)])
    out.dst = cat([graph.dst, np.asarray(new_dst, np.int64)])
    out.cls = cat([graph.cls, np.full(k, EdgeClass.CROSS_RANK, np.int8)])
    out.lag = cat([graph.lag, np.asarray(new_lag, np.float64)])
    out.inferred = cat([graph.inferred, np.zeros(k, bool)])
    out.summary = dict(graph.summary)
    out.summary["rendezvous"] = m
    out.summary["edges"] = out.edge_counts()
    return out
