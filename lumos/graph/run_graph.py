"""One execution graph over several ranks (one per pipeline stage), joined by cross-rank edges.

Per-rank graphs are built with `build_graph` exactly as for single-rank
replay, renumbered into one graph (tasks, processors), then collective peers
and pipeline send/receive pairs are matched and tied by rendezvous tasks
(`edges/cross_rank.py`). Replaying it reproduces the measured run as well as
single-rank replay does, and lets a what-if change on one stage move the others.
Reading a replay of it back out (the run-level breakdown) is analysis
(`lumos.analysis.run_replay`); this module only builds the graph.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from lumos.lean_numpy import unique
from lumos.trace import TraceTable
from lumos.trace.collectives import P2P_KINDS, Call, classify_rows
from lumos.trace.comm_kernels import OWN_PROTOCOL

from .build import DEFAULT_GAP_THRESHOLD_US, build_graph
from .edges.cross_rank import CommOp, add_rendezvous, match_key, match_ops
from .profiled_steps import profiled_steps, with_step_medians
from .model import ALL_EDGE_CLASSES, EdgeClass, Graph


def concat_graphs(graphs: Sequence[Graph]) -> tuple[Graph, np.ndarray]:
    """One graph holding all of `graphs` (task and processor ids renumbered); task offsets."""
    offsets = np.cumsum([0] + [g.n_tasks for g in graphs])
    poff = np.cumsum([0] + [g.n_procs for g in graphs])
    kw = {}
    for f in Graph.TASK_FIELDS + Graph.PROC_FIELDS + Graph.EDGE_FIELDS:
        kw[f] = np.concatenate([getattr(g, f) for g in graphs])
    kw["proc"] = np.concatenate([g.proc + poff[i] for i, g in enumerate(graphs)]).astype(np.int32)
    kw["src"] = np.concatenate([g.src + offsets[i] for i, g in enumerate(graphs)]).astype(np.int64)
    kw["dst"] = np.concatenate([g.dst + offsets[i] for i, g in enumerate(graphs)]).astype(np.int64)
    wt = []
    for i, g in enumerate(graphs):
        w = g.wait_target.astype(np.int64).copy()
        stream = g.wait_kind == 1
        w[stream] += poff[i]
        wt.append(w)
    kw["wait_target"] = np.concatenate(wt).astype(np.int32)
    out = Graph(**kw)
    out.summary = {"ranks": [g.summary for g in graphs], "tasks": int(out.n_tasks)}
    return out, offsets[:-1]


# Why a communication op found no peers, as `lumos replay --joint` words it (one line per rank).
UNMATCHED_REASONS = {
    "no_kind": "no kind (no Collective name arg, and neither the kernel nor its launching op is named "
               "as a known collective)",
    "own_protocol": "kernels of a library that synchronises its peers inside them (DeepEP, NVSHMEM, symmetric "
                    "memory, userbuffers; lumos.trace.comm_kernels), no enclosing op naming a collective: "
                    "kept on their stream with their measured time",
    "no_group": "no process group (no Process Group Ranks, no Process Group Name in "
                "distributedInfo.pg_config, and the ranks' calls without a group differ, so none can be inferred)",
    "no_peer": "a send/recv whose peer the trace does not name",
    "peers_missing": "peers absent (their files not in the run, or without a matching call)",
}


def comm_calls(graph: Graph, table: TraceTable, offset: int = 0) -> list[tuple[int, Call]]:
    """(task id + offset, Call) of one rank's in-step communication kernels, in issue order.

    A call that launches several kernels (a coalesced group, an op split by NCCL) is one call:
    its first kernel stands for it. A kernel that states its collective and group itself is its
    own call.
    """
    comm = np.flatnonzero(graph.comm & graph.in_step & (graph.event >= 0))
    # issue order: launch order is the order on the stream; across streams use measured start
    comm = comm[np.argsort(graph.ts[comm], kind="stable")]
    out, seen = [], set()
    for t, call in zip(comm.tolist(), classify_rows(table, graph.event[comm])):
        if call.carrier >= 0:
            if call.carrier in seen:
                continue
            seen.add(call.carrier)
        out.append((t + offset, call))
    return out


def resolve_ops(calls: dict[int, list[tuple[int, Call]]], world: int | None) -> tuple[list[CommOp], dict]:
    """CommOps of every rank's calls, groups inferred where the trace has none; why the rest has none.

    A collective without a group is given the whole world when that is the only reading: every rank
    of the world is loaded, and the ranks' calls without a group are the same kinds in the same
    order (and any `Group size` given is the world's). Anything else is left unmatched, and said.
    Returns (ops, {rank: {reason: count}}).
    """
    ranks = sorted(calls)
    loose = {r: [c.kind for _, c in calls[r] if c.group is None and c.kind is not None and c.kind not in P2P_KINDS
                 and not _own_protocol(c)] for r in ranks}
    whole = world is not None and ranks == list(range(world)) and len(ranks) > 1
    same = whole and len({tuple(k) for k in loose.values()}) == 1
    sizes_ok = all(c.group_size in (None, world) for r in ranks for _, c in calls[r] if c.group is None)
    inferred = tuple(ranks) if same and sizes_ok else None
    ops, why = [], {r: {} for r in ranks}
    for r in ranks:
        for t, c in calls[r]:
            group = c.group
            if _own_protocol(c):
                reason = "own_protocol"
            elif c.kind is None:
                reason = "no_kind"
            elif group is None and c.kind in P2P_KINDS:
                reason = "no_peer"
            elif group is None and inferred is None:
                reason = "no_group"
            else:
                ops.append(CommOp(task=t, rank=r, kind=c.kind, group=group or inferred, nelems=c.nelems))
                continue
            why[r][reason] = why[r].get(reason, 0) + 1
    return ops, why


def _own_protocol(c: Call) -> bool:
    """A kernel of a library that synchronises its peers itself (DeepEP, NVSHMEM, ...), with no
    enclosing op or arg saying its collective: its own name is no call issued in order on every rank."""
    return c.rule in OWN_PROTOCOL and c.kind_from not in ("args", "op")


def unmatched_lines(unmatched: dict, paths: dict[int, str]) -> list[str]:
    """One line per rank with unmatched communication ops: how many, and why."""
    lines = []
    for r, by in sorted(unmatched.items()):
        n = sum(by.values())
        if not n:
            continue
        parts = "; ".join(f"{k} {UNMATCHED_REASONS[reason]}" for reason, k in sorted(by.items()))
        lines.append(f"{paths.get(r, f'rank {r}')}: {n} communication op{'s' if n > 1 else ''} "
                     f"not matched to peers: {parts}")
    return lines


def build_run_graph(tables: Sequence[TraceTable], step=None, ranks: Iterable[int] | None = None,
                    edge_classes=ALL_EDGE_CLASSES,
                    gap_threshold_us: float = DEFAULT_GAP_THRESHOLD_US, host_medians: bool = False,
                    kernel_medians: bool = False, recordings: Sequence[Sequence[TraceTable]] = ()) -> Graph:
    """Per-rank graphs of `tables` (or of `ranks` among them), concatenated and joined by rendezvous.
    `host_medians`, `kernel_medians`: each rank's host work, its kernels, the median over its profiled
    steps (`profiled_steps`) and over those of the same rank in each run of `recordings` (other
    recordings of the configuration); the pairing is kept in `summary["profiled_steps"]` (rank ->
    `ProfiledSteps`, ranks with two steps or more): whose steps the medians are over, and what an
    interval draws host work from."""
    if ranks is not None:
        want = set(int(r) for r in ranks)
        tables = [t for t in tables if t.rank in want]
    build = {"edge_classes": edge_classes, "gap_threshold_us": gap_threshold_us}
    graphs = [build_graph(t, step=step, **build) for t in tables]
    steps = ({t.rank: profiled_steps(g, t, recordings, **build) for g, t in zip(graphs, tables)}
             if host_medians or kernel_medians else {})
    if steps:
        graphs = [with_step_medians(g, steps[t.rank], host=host_medians, kernels=kernel_medians)
                  for g, t in zip(graphs, tables)]
    calls = ({int(t.rank): comm_calls(g, t) for g, t in zip(graphs, tables)}
             if EdgeClass.CROSS_RANK in frozenset(EdgeClass(c) for c in edge_classes) else None)
    return join_ranks(graphs, [int(t.rank) for t in tables], calls, {int(t.world_size) for t in tables},
                      steps=steps)


def join_ranks(graphs: list[Graph], ranks: Sequence[int], calls: dict[int, list[tuple[int, Call]]] | None,
               worlds: set[int], steps: dict | None = None, consume: bool = False) -> Graph:
    """The run graph of per-rank graphs (`ranks[i]` is `graphs[i]`'s rank, in that order): concatenated,
    then, where `calls` is given (rank -> `comm_calls` of its graph, task ids the rank's own), its
    communication ops matched and joined by rendezvous. `worlds`: the world sizes the ranks' files
    say. The second half of `build_run_graph`, apart so that a replay that streams the ranks
    (`lumos.analysis.run_stream`) keeps only each rank's graph and calls, not its trace. `consume`:
    empty `graphs` once they are concatenated, so that they can be freed before the join goes on."""
    run, offsets = concat_graphs(graphs)
    if consume:
        graphs.clear()
    if steps:
        run.summary["profiled_steps"] = {r: h for r, h in steps.items() if h.n_steps >= 2}
    if calls is None:
        return run
    calls = {r: [(t + int(off), c) for t, c in calls[r]] for r, off in zip(ranks, offsets)}
    ops, unmatched = resolve_ops(calls, worlds.pop() if len(worlds) == 1 else None)
    groups = match_ops(ops, list(ranks))
    matched = set(np.concatenate([np.asarray(g, np.int64) for g in groups]).tolist()) if groups else set()
    for op in ops:
        if op.task not in matched:
            by = unmatched[op.rank]
            reason = "no_peer" if match_key(op) is None else "peers_missing"
            by[reason] = by.get(reason, 0) + 1
    out = add_rendezvous(run, groups)
    kept = ("ranks", "profiled_steps")
    out.summary = {**out.summary, **{k: run.summary[k] for k in kept if k in run.summary}}
    out.summary["comm_ops"] = {r: len(c) for r, c in calls.items()}
    out.summary["unmatched_comm"] = {r: by for r, by in unmatched.items() if by}
    return out


def rendezvous_links(graph: Graph) -> tuple[np.ndarray, np.ndarray]:
    """(rendezvous task, member task) pairs: the CROSS_RANK edges out of rendezvous tasks."""
    e = np.flatnonzero(graph.cls == EdgeClass.CROSS_RANK)
    src = graph.src[e]
    virtual = graph.event[src] < 0
    # the names of the few distinct virtual sources, not one fixed-width string per edge: a run's
    # longest kernel name times its cross-rank edges is hundreds of MB at a few hundred ranks
    cand = unique(src[virtual])
    named = np.fromiter((isinstance(n, str) and n.startswith("rendezvous") for n in graph.name[cand].tolist()),
                        bool, count=len(cand))
    e = e[virtual & np.isin(src, cand[named])]
    return graph.src[e], graph.dst[e]
