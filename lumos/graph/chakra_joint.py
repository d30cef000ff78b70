"""A graph of several ranks (a prediction's) as Chakra traces, one file per rank, and back as one graph.

`lumos predict BASE ... --export DIR` replays one graph that holds every rank it simulates (one per
pipeline stage), joined by rendezvous tasks: virtual, zero-duration tasks on which the members of a
collective or a send/receive pair meet (`edges/cross_rank.add_rendezvous`). Chakra has no
dependency between files, and ASTRA-sim matches its ranks' communication itself, so each rank's
tasks go to `NAME.RANK.et` as `chakra.graph_nodes` writes them (node id = task index in the joint
graph, `data_deps` / `ctrl_deps` only within the rank), every in-edge in the `lumos_*` lists with
its place in the graph (`lumos_in_edge`), and what is no rank's (the rendezvous tasks, their
in-edges, the processors, the graph's summary) in the `GlobalMetadata` of the first file. Reading
the files back (`chakra.load_chakra_run`, `chakra.joint_graph`) puts every task and edge at its
index again, so the joint graph replays exactly as the prediction replayed it.

What ASTRA-sim would run from such an export: every task a COMP node (communication included, at
its predicted duration): the prediction simulates one rank per stage, so a collective's other
ranks and a stage's TP peers have no file, and a cross-stage wait lives only in the rendezvous.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from lumos.trace.chakra import Metadata, write_et

from .chakra import LUMOS_ATTRS, LUMOS_FORMAT, ExportSummary, _plain, graph_nodes, wait_deps
from .model import Graph, TaskKind

__all__ = ["export_joint"]


def export_joint(graph: Graph, ranks: Sequence[int], out: str | os.PathLike, name: str = "trace",
                 bare: bool = False) -> ExportSummary:
    """`graph` (several ranks, rendezvous joined) written as `out/NAME.RANK.et` for each of `ranks`.
    `bare`: without the `lumos_*` attributes (what ASTRA-sim reads; no way back to the joint graph)."""
    if "." in name or "/" in name or not name:
        raise ValueError(f"trace name {name!r}: give a plain name (ASTRA-sim appends .RANK.et to it)")
    ranks = sorted(int(r) for r in ranks)
    if not ranks:
        raise ValueError("no rank to export")
    owned = np.isin(graph.rank, ranks)
    empty = [r for r in ranks if not np.any(graph.rank == r)]
    if empty:
        raise ValueError(f"rank {empty[0]} has no task in the graph")
    out = Path(out)
    comm = int(np.sum(graph.comm & owned))
    summary = ExportSummary(out=out, files=[], groups={}, ranks=ranks, world_size=None,
                            demoted={"predicted": comm} if comm else {})
    virtual = np.flatnonzero(~owned)
    for k, r in enumerate(ranks):
        tasks = np.flatnonzero(graph.rank == r)
        nodes = graph_nodes(graph, ours=not bare, tasks=tasks, edge_ids=True)
        meta = Metadata() if bare else _metadata(graph, r, ranks, virtual if k == 0 else None)
        path = out / f"{name}.{r}.et"
        summary.bytes += write_et(path, meta, nodes)
        summary.files.append(path)
        summary.nodes["COMP_NODE"] = summary.nodes.get("COMP_NODE", 0) + len(nodes)
        summary.cpu_ops += int(np.sum(graph.kind[tasks] == TaskKind.CPU))
    mine = owned[graph.src] & owned[graph.dst] & (graph.rank[graph.src] == graph.rank[graph.dst])
    summary.edges = int(np.sum(mine))
    summary.wait_deps = len(wait_deps(graph))
    summary.virtual = len(virtual)
    return summary


def _metadata(graph: Graph, rank: int, ranks: list[int], virtual: np.ndarray | None) -> Metadata:
    """Every file: its rank and the export's ranks; the first (`virtual` given): the rest of the graph."""
    attr = {"lumos_format": ("int64_val", LUMOS_FORMAT), "lumos_rank": ("int64_val", int(rank)),
            "lumos_joint_ranks": ("int64_list", list(ranks))}
    if virtual is None:
        return Metadata(attr=attr)
    attr.update({
        "lumos_joint_tasks": ("int64_val", int(graph.n_tasks)), "lumos_joint_edges": ("int64_val", int(graph.n_edges)),
        "lumos_summary": ("string_val", json.dumps(graph.summary, default=_plain, sort_keys=True)),
        "lumos_proc_kind": ("int32_list", graph.proc_kind.astype(int).tolist()),
        "lumos_proc_rank": ("int64_list", graph.proc_rank.astype(int).tolist()),
        "lumos_proc_key": ("int64_list", graph.proc_key.astype(int).tolist()),
        "lumos_proc_name": ("string_list", [str(x) for x in graph.proc_name]),
        "lumos_v_id": ("int64_list", virtual.tolist()),
        "lumos_v_name": ("string_list", [str(x) for x in graph.name[virtual]]),
        "lumos_v_rank": ("int64_list", graph.rank[virtual].astype(int).tolist())})
    for a, (kind, f, _) in LUMOS_ATTRS.items():
        col = getattr(graph, f)[virtual]
        lst = kind.replace("_val", "_list")
        attr[f"lumos_v_{a[len('lumos_'):]}"] = (lst, col.astype(float if lst == "double_list" else
                                                               bool if lst == "bool_list" else int).tolist())
    if graph.finish_floor is not None:
        attr["lumos_v_floor_us"] = ("double_list", graph.finish_floor[virtual].astype(float).tolist())
    e = np.flatnonzero(~np.isin(graph.rank[graph.dst], ranks))
    attr.update({"lumos_v_edge": ("int64_list", e.tolist()), "lumos_v_src": ("int64_list", graph.src[e].tolist()),
                 "lumos_v_dst": ("int64_list", graph.dst[e].tolist()),
                 "lumos_v_class": ("int32_list", graph.cls[e].astype(int).tolist()),
                 "lumos_v_lag_us": ("double_list", graph.lag[e].astype(float).tolist()),
                 "lumos_v_inferred": ("bool_list", graph.inferred[e].tolist())})
    return Metadata(attr=attr)
