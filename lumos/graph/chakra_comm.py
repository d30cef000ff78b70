"""Which communication kernels of a run ASTRA-sim can simulate, and as what Chakra node.

ASTRA-sim runs a collective only if every rank of its group issues it (it matches the calls of a
group in order), and a send only if its receiver posts the receive with the same tag; a call it
cannot pair hangs or aborts the whole simulation. So a kernel becomes a communication node only
when the run graph's own matching (`edges/cross_rank.match_ops`: the k-th call on a group on every
member) pairs it with every peer among the exported ranks, every member reads it as the same
kind, the kind is one ASTRA-sim simulates, and its size is known. Everything else stays a compute
node that replays its measured duration, counted by reason so the export can say so.

From ASTRA-sim's source (astra-sim/astra-sim `astra-sim/workload/Workload.cc`, 518bd51):
`issue_coll_comm` simulates ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER and ALL_TO_ALL; BROADCAST
only replays `duration_micros`; any other type throws. `extract_comm_group` reads `pg_name` as
an integer naming a group of the `--comm-group-configuration` file ("" and "0": every rank).
`issue_send_comm` / `issue_recv_comm` read `comm_src`, `comm_dst`, `comm_tag`, `comm_size`.
The feeder (astra-sim/chakra `src/feeder_v3/et_feeder_node_attr.h`, branch feederv3) converts
integer attributes between widths but refuses a float for an integer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lumos.trace import TraceTable
from lumos.trace.chakra import CollType, NodeType
from lumos.trace.collectives import message_bytes

from .edges.cross_rank import match_key, match_ops
from .model import Graph
from .run_graph import comm_calls, resolve_ops

__all__ = ["SIMULATED", "CommNode", "CommPlan", "plan_comm", "DEMOTED"]

# our kinds (lumos.trace.collectives.KINDS) that ASTRA-sim simulates as collectives
SIMULATED = {"all_reduce": CollType.ALL_REDUCE, "all_gather": CollType.ALL_GATHER,
             "reduce_scatter": CollType.REDUCE_SCATTER, "all_to_all": CollType.ALL_TO_ALL}

# why a communication kernel went out as a compute node
DEMOTED = {
    "kind": "a kind ASTRA-sim does not simulate (broadcast, reduce, gather, scatter, barrier, coalesced, "
            "a send/recv of unknown direction)",
    "no_kind": "no kind in the trace",
    "no_group": "no process group in the trace",
    "no_peer": "a send/recv whose peer the trace does not name",
    "outside": "a group with ranks outside the export",
    "peers_missing": "not matched to a call on every peer",
    "disagree": "its peers read the matched call as another kind",
    "size": "no message size in the trace",
    "extra_kernel": "a second kernel of one call (its first kernel stands for the call)",
    "not_in_step": "carried in from before the step",
    "predicted": "a predicted graph: one rank per stage simulated, so the other ranks of its groups have no file",
}


@dataclass(frozen=True)
class CommNode:
    """The Chakra type and attributes of one communication kernel."""
    type: NodeType
    attr: dict


@dataclass
class CommPlan:
    nodes: dict[int, dict[int, CommNode]]          # rank -> task -> node
    groups: dict[tuple[int, ...], int]             # process group -> pg_name (1, 2, ...)
    demoted: dict[str, int] = field(default_factory=dict)   # reason (DEMOTED) -> kernels


def plan_comm(graphs: dict[int, Graph], tables: dict[int, TraceTable]) -> CommPlan:
    """The communication nodes of each rank's graph (task ids local to the rank)."""
    ranks = sorted(graphs)
    offsets, off = {}, 0
    for r in ranks:
        offsets[r], off = off, off + graphs[r].n_tasks
    local = {}                                      # run-wide task id -> (rank, task)
    calls, call_of = {}, {}
    for r in ranks:
        calls[r] = comm_calls(graphs[r], tables[r], offsets[r])
        for t, c in calls[r]:
            local[t] = (r, t - offsets[r])
            call_of[t] = c
    worlds = {int(t.world_size) for t in tables.values()}
    ops, unmatched = resolve_ops(calls, worlds.pop() if len(worlds) == 1 else None)
    demoted: dict[str, int] = {}

    def demote(reason: str, n: int = 1) -> None:
        demoted[reason] = demoted.get(reason, 0) + n

    for by in unmatched.values():
        for reason, n in by.items():
            demote(reason, n)
    exported = set(ranks)
    inside = []
    for op in ops:
        if not set(op.group) <= exported:
            demote("outside")
        elif match_key(op) is None:
            demote("no_peer")
        else:
            inside.append(op)
    groups = match_ops(inside, ranks)
    matched = {t for g in groups for t in g}
    demote("peers_missing", sum(op.task not in matched for op in inside))
    op_of = {op.task: op for op in inside}
    tag_of = _tags(inside)
    nodes: dict[int, dict[int, CommNode]] = {r: {} for r in ranks}
    pg: dict[tuple[int, ...], int] = {}
    for members in groups:
        kinds = {op_of[t].kind for t in members}
        sizes = [message_bytes(call_of[t]) for t in members]
        if kinds == {"send", "recv"}:   # a pair: match_key put the send on the source's side
            kind = "p2p"
        elif len(kinds) > 1:
            demote("disagree", len(members))
            continue
        else:
            kind = kinds.pop()
        if kind not in SIMULATED and kind != "p2p":
            demote("kind", len(members))
            continue
        if any(s is None for s in sizes):
            demote("size", len(members))
            continue
        size = max(sizes)   # every member must give ASTRA-sim the same message
        for t in members:
            op = op_of[t]
            r, task = local[t]
            if kind in SIMULATED:
                group = tuple(sorted(op.group))
                name = pg.setdefault(group, len(pg) + 1)
                attr = {"is_cpu_op": ("bool_val", False), "comm_type": ("int64_val", int(SIMULATED[kind])),
                        "comm_size": ("int64_val", int(size)), "pg_name": ("string_val", str(name))}
                nodes[r][task] = CommNode(NodeType.COMM_COLL_NODE, attr)
            else:
                peer = next(x for x in op.group if x != op.rank)
                send = op.kind == "send"
                src, dst = (op.rank, peer) if send else (peer, op.rank)
                attr = {"is_cpu_op": ("bool_val", False), "comm_src": ("int32_val", int(src)),
                        "comm_dst": ("int32_val", int(dst)), "comm_tag": ("int32_val", tag_of[t]),
                        "comm_size": ("int64_val", int(size))}
                kind_type = NodeType.COMM_SEND_NODE if send else NodeType.COMM_RECV_NODE
                nodes[r][task] = CommNode(kind_type, attr)
    for r in ranks:
        g = graphs[r]
        firsts = {t - offsets[r] for t, _ in calls[r]}
        for task in (int(i) for i in g.comm.nonzero()[0]):
            if task in firsts:
                continue
            demote("not_in_step" if not g.in_step[task] or g.event[task] < 0 else "extra_kernel")
    return CommPlan(nodes=nodes, groups=pg, demoted=demoted)


def _tags(ops) -> dict[int, int]:
    """A send's tag: its place among the sends from its rank to its peer (and a receive's among the
    receives from that peer), the same order `match_ops` pairs them in, so both ends agree."""
    seen: dict[tuple, int] = {}
    tags = {}
    for op in ops:
        if op.kind not in ("send", "recv"):
            continue
        key = (op.rank, match_key(op))
        tags[op.task] = seen.get(key, 0)
        seen[key] = tags[op.task] + 1
    return tags
