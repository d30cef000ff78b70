"""A graph of several ranks (a prediction's) as Chakra traces, one file per rank, and back as one graph.

`lumos predict BASE ... --export DIR` replays one graph that holds every rank it simulates (one per
pipeline stage), joined by rendezvous tasks: virtual, zero-duration tasks on which the members of a
collective or a send/receive pair meet (`edges/cross_rank.add_rendezvous`). Chakra has no
dependency between files, and ASTRA-sim matches its ranks' communication itself, so each rank's
tasks go to `NAME.RANK.et` as `chakra.graph_nodes` writes them (node id = task index in the joint
graph, `data_deps` / `ctrl_deps` only within the rank), every in-edge in the `lumos_*` lists with
its place in the graph (`lumos_in_edge`), and what is no rank's (the rendezvous tasks, their
in-edges, the processors, the graph's summary) in the `GlobalMetadata` of the first file. Reading
the files back puts every task and edge at its index again, so the joint graph replays exactly as
the prediction replayed it.

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

from lumos.trace import TraceError
from lumos.trace.chakra import Metadata, Node, write_et

from .chakra import (_DTYPES, LUMOS_ATTRS, LUMOS_FORMAT, ExportSummary, _array, _plain, graph_nodes,
                     wait_deps)
from .model import Graph, TaskKind

__all__ = ["export_joint", "is_joint", "joint_graph"]


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


def is_joint(meta: Metadata) -> bool:
    return meta.value("lumos_joint_ranks") is not None


def joint_graph(files: dict[int, tuple[Metadata, list[Node], Path]]) -> Graph:
    """The joint graph an `export_joint` wrote, from every one of its files (rank -> (metadata, nodes,
    path)): each task and edge at its index in the exported graph."""
    first = next(iter(files.values()))
    ranks = list(first[0].value("lumos_joint_ranks"))
    if sorted(files) != ranks:
        raise TraceError(first[2].parent, f"a joint export of ranks {ranks} (a prediction's), but the files here "
                                          f"are ranks {sorted(files)}: every file of the export is needed")
    head = [v for v in files.values() if v[0].value("lumos_joint_tasks") is not None]
    if len(head) != 1:
        raise TraceError(first[2].parent, "a joint export needs exactly one file with the graph's "
                                          f"lumos_joint_tasks (found {len(head)})")
    meta, _, path = head[0]
    n, m = int(meta.value("lumos_joint_tasks")), int(meta.value("lumos_joint_edges"))
    cols = {f: [None] * n for f in _DTYPES}
    floor = np.full(n, -np.inf)
    seen = np.zeros(n, bool)
    e_cols = {f: [None] * m for f in ("src", "dst", "cls", "lag", "inferred")}
    e_seen = np.zeros(m, bool)

    def put_task(i, values, where):
        if not 0 <= i < n or seen[i]:
            raise TraceError(where, f"task {i} outside the graph's {n} tasks, or written twice")
        seen[i] = True
        for f, v in values.items():
            cols[f][i] = v

    def put_edges(ids, src, dst, cls, lag, inferred, where):
        if not len(ids) == len(src) == len(cls) == len(lag) == len(inferred):
            raise TraceError(where, "lumos_in_* lists of unequal length")
        for k, e in enumerate(ids):
            if not 0 <= e < m or e_seen[e]:
                raise TraceError(where, f"edge {e} outside the graph's {m} edges, or written twice")
            e_seen[e] = True
            for f, v in (("src", src[k]), ("dst", dst[k]), ("cls", cls[k]), ("lag", lag[k]),
                         ("inferred", inferred[k])):
                e_cols[f][e] = v

    for rank, (_, nodes, where) in files.items():
        for nd in nodes:
            vals = {"name": nd.name, "rank": rank}
            for a, (_, f, skip) in LUMOS_ATTRS.items():
                vals[f] = nd.value(a, skip)
                if vals[f] is None:
                    raise TraceError(where, f"node {nd.id} lacks {a}, which every node of a Lumos export carries")
            put_task(nd.id, vals, where)
            floor[nd.id] = nd.value("lumos_floor_us", -np.inf)
            ins = nd.value("lumos_in_src", [])
            put_edges(nd.value("lumos_in_edge", []), ins, [nd.id] * len(ins), nd.value("lumos_in_class", []),
                      nd.value("lumos_in_lag_us", []), nd.value("lumos_in_inferred", [False] * len(ins)), where)
    for k, i in enumerate(meta.value("lumos_v_id", [])):
        vals = {"name": meta.value("lumos_v_name")[k], "rank": meta.value("lumos_v_rank")[k]}
        for a, (_, f, _) in LUMOS_ATTRS.items():
            vals[f] = meta.value(f"lumos_v_{a[len('lumos_'):]}")[k]
        put_task(i, vals, path)
        floor[i] = meta.value("lumos_v_floor_us", [-np.inf] * (k + 1))[k]
    put_edges(*(meta.value(f"lumos_v_{x}", []) for x in ("edge", "src", "dst", "class", "lag_us", "inferred")),
              path)
    if not seen.all() or not e_seen.all():
        raise TraceError(path, f"the joint export lacks {int(np.sum(~seen))} of its {n} tasks and "
                               f"{int(np.sum(~e_seen))} of its {m} edges")
    g = Graph(**{f: _array(v, _DTYPES[f]) for f, v in cols.items()},
              proc_kind=np.asarray(meta.value("lumos_proc_kind"), np.int8),
              proc_rank=np.asarray(meta.value("lumos_proc_rank"), np.int32),
              proc_key=np.asarray(meta.value("lumos_proc_key"), np.int64),
              proc_name=_array(meta.value("lumos_proc_name"), object),
              src=np.asarray(e_cols["src"], np.int64), dst=np.asarray(e_cols["dst"], np.int64),
              cls=np.asarray(e_cols["cls"], np.int8), lag=np.asarray(e_cols["lag"], np.float64),
              inferred=np.asarray(e_cols["inferred"], bool),
              finish_floor=floor if np.isfinite(floor).any() else None)
    g.summary = json.loads(meta.value("lumos_summary", "{}"))
    g.summary["chakra"] = str(path.parent)
    g.summary["chakra_joint"] = ranks
    return g
