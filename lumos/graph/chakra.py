"""Our execution graph as MLCommons Chakra execution traces (what ASTRA-sim runs), and back.

One module, both directions, so that an export round-trips: `export_run` writes one
`NAME.RANK.et` per rank (a `GlobalMetadata`, then one node per task) and the
`--comm-group-configuration` file ASTRA-sim reads beside them; `load_chakra_run` turns `.et`
files into graphs our simulator replays.

What ASTRA-sim reads (astra-sim/astra-sim `astra-sim/workload/Workload.cc` and
`HardwareResource.cc`, 518bd51; its feeder astra-sim/chakra `src/feeder_v3/`, branch feederv3):
- node ids unique in a file, and every id in `data_deps` / `ctrl_deps` present in it (the feeder
  resolves both lists, and throws on an id it cannot find); our ids are task indices;
- a COMP_NODE replays `duration_micros` (an integer: our durations rounded to the microsecond;
  0 replays as 1 ns); `is_cpu_op` (bool) puts it on the rank's one CPU slot, else on its one GPU
  compute slot; communication nodes take the one communication slot (a RECV takes none). So
  ASTRA-sim runs at most one CPU op, one kernel and one collective per rank at a time, where our
  graph has a processor per thread and per stream;
- collectives and send/recv as `chakra_comm` decides.

Dependencies: program order (a thread's calls, a stream's kernels: the ordering Chakra's own
PyTorch converter leaves out) and launches go to `ctrl_deps`; waits between threads, syncs,
cross-stream events to `data_deps`. A sync our simulator resolves at run time (it waits for
whatever was last enqueued on a stream when it starts) becomes a data dependency on the kernel
that was last enqueued when it started in the measured timeline.

What ASTRA-sim does not read, the round trip needs: exact durations and start times, the
processor (thread or stream) and kind of each task, each edge's class and lag (host gaps and
launch latencies our replay keeps on the edges), release times and run-time waits. They travel
as `lumos_*` attributes (`LUMOS_ATTRS`), which ASTRA-sim ignores, and as `lumos_*` metadata
(processors, the graph's summary). A file without them (a Chakra trace from elsewhere) replays
too: its nodes on one lane per kind and rank (CPU ops, kernels, communication: ASTRA-sim's own
slots), with zero lags, starting at 0 as ASTRA-sim starts them.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from lumos.trace import TraceError, TraceTable
from lumos.trace.atomic import write_text_atomic
from lumos.trace.chakra import Metadata, Node, NodeType, et_files, read_et, write_et

from .build import DEFAULT_GAP_THRESHOLD_US, build_graph
from .chakra_comm import CommPlan, plan_comm
from .model import EdgeClass, Graph, TaskKind, WaitKind

__all__ = ["export_run", "ExportSummary", "graph_nodes", "graph_from_nodes", "load_chakra_run", "joint_graph",
           "COMM_GROUPS_FILE", "LUMOS_FORMAT", "CTRL_CLASSES"]

LUMOS_FORMAT = 1                 # metadata `lumos_format`: the version of the lumos_* attributes
COMM_GROUPS_FILE = "comm_groups.json"
# program order and launches: control dependencies; the rest carry data or a wait
CTRL_CLASSES = frozenset({EdgeClass.INTRA_THREAD, EdgeClass.INTRA_STREAM, EdgeClass.LAUNCH})
# per-node attributes of the round trip: name -> (oneof field, Graph field, value left out)
LUMOS_ATTRS = {"lumos_dur_us": ("double_val", "dur", None), "lumos_ts_us": ("double_val", "ts", None),
               "lumos_proc": ("int64_val", "proc", None), "lumos_kind": ("int32_val", "kind", None),
               "lumos_comm": ("bool_val", "comm", False), "lumos_in_step": ("bool_val", "in_step", False),
               "lumos_release_us": ("double_val", "release", -np.inf),
               "lumos_stream_pos": ("int64_val", "stream_pos", -1),
               "lumos_wait_kind": ("int32_val", "wait_kind", 0), "lumos_wait_target": ("int64_val", "wait_target", -1),
               "lumos_event": ("int64_val", "event", -1), "lumos_layer": ("int32_val", "layer", -1),
               "lumos_phase": ("int32_val", "phase", -1)}
_DTYPES = {"name": object, "kind": np.int8, "proc": np.int32, "dur": np.float64, "ts": np.float64,
           "release": np.float64, "comm": bool, "in_step": bool, "rank": np.int32, "stream_pos": np.int32,
           "wait_kind": np.int8, "wait_target": np.int32, "event": np.int64, "layer": np.int32, "phase": np.int8}


# -- graph -> nodes ---------------------------------------------------------------------------
def _micros(x: float) -> int:
    """A duration or time in whole microseconds, as the schema's uint64 fields want (never negative)."""
    return max(int(round(float(x))), 0)


def wait_deps(graph: Graph) -> list[tuple[int, int]]:
    """(kernel, sync) for each run-time wait: the kernel last enqueued on the waited stream (each
    stream of the rank, for a device sync) when the sync started in the measured timeline. A
    kernel is enqueued when its launch call ends (a carried-in one from the start); a stream
    is FIFO, so its enqueued prefix ends at the last position whose running maximum is reached."""
    waits = np.flatnonzero(graph.wait_kind != WaitKind.NONE)
    if not len(waits):
        return []
    enq = np.full(graph.n_tasks, -np.inf)
    launch = np.flatnonzero(graph.cls == EdgeClass.LAUNCH)
    np.maximum.at(enq, graph.dst[launch], graph.end[graph.src[launch]])
    gpu = np.flatnonzero(graph.kind == TaskKind.GPU)
    per_stream = {}
    for p in np.unique(graph.proc[gpu]):
        ops = gpu[graph.proc[gpu] == p]
        ops = ops[np.argsort(graph.stream_pos[ops], kind="stable")]
        per_stream[int(p)] = (ops, np.maximum.accumulate(enq[ops]))
    out = []
    for t in waits.tolist():
        if graph.wait_kind[t] == WaitKind.STREAM:
            streams = [int(graph.wait_target[t])]
        else:
            streams = [int(p) for p in np.flatnonzero((graph.proc_kind == TaskKind.GPU)
                                                      & (graph.proc_rank == graph.wait_target[t]))]
        for s in streams:
            if s not in per_stream:
                continue
            ops, ready = per_stream[s]
            k = int(np.searchsorted(ready, graph.ts[t], side="right")) - 1
            if k >= 0:
                out.append((int(ops[k]), t))
    return out


def graph_nodes(graph: Graph, comm: dict | None = None, ours: bool = True, tasks=None,
                edge_ids: bool = False) -> list[Node]:
    """One Chakra node per task (id = task index), with its dependencies and attributes.
    `comm`: task -> `chakra_comm.CommNode` for the kernels exported as communication; `ours`: with
    the `lumos_*` attributes of the round trip (without: what ASTRA-sim reads, and nothing else).
    `tasks`: only these tasks (one rank's of a graph of several, `chakra_joint`): a dependency on a
    task outside them is left out of `data_deps` / `ctrl_deps` (ASTRA-sim resolves them in the file)
    and kept in the `lumos_in_*` lists; `edge_ids`: each in-edge's index too (`lumos_in_edge`)."""
    comm = comm or {}
    n = graph.n_tasks
    order = np.argsort(graph.dst, kind="stable")
    bounds = np.searchsorted(graph.dst[order], np.arange(n + 1))
    mine = np.ones(n, bool) if tasks is None else np.isin(np.arange(n), tasks)
    extra: dict[int, list[int]] = {}
    for src, dst in wait_deps(graph):
        extra.setdefault(dst, []).append(src)
    ctrl_cls = np.isin(graph.cls, [int(c) for c in CTRL_CLASSES])
    gap = host_gaps(graph)
    nodes = []
    cols = {a: getattr(graph, f) for a, (_, f, _) in LUMOS_ATTRS.items()}
    for i in (range(n) if tasks is None else np.asarray(tasks).tolist()):
        e = order[bounds[i]:bounds[i + 1]]
        ctrl, data = [], []
        for s, is_ctrl in zip(graph.src[e].tolist(), ctrl_cls[e].tolist()):
            if mine[s]:
                (ctrl if is_ctrl else data).append(s)
        data = list(dict.fromkeys(data + [s for s in extra.get(i, []) if mine[s]]))
        seen = set(data)
        ctrl = [s for s in dict.fromkeys(ctrl) if s not in seen]
        cpu = graph.kind[i] == TaskKind.CPU
        if i in comm:
            ntype, attr = comm[i].type, dict(comm[i].attr)
        else:
            ntype, attr = NodeType.COMP_NODE, {"is_cpu_op": ("bool_val", bool(cpu))}
        for a, (kind, _, skip) in (LUMOS_ATTRS.items() if ours else ()):
            v = cols[a][i]
            if skip is None or v != skip:
                attr[a] = (kind, float(v) if kind == "double_val" else (bool(v) if kind == "bool_val" else int(v)))
        if ours and graph.finish_floor is not None and np.isfinite(graph.finish_floor[i]):
            attr["lumos_floor_us"] = ("double_val", float(graph.finish_floor[i]))
        if ours and len(e):
            attr["lumos_in_src"] = ("int64_list", graph.src[e].tolist())
            attr["lumos_in_class"] = ("int32_list", graph.cls[e].astype(int).tolist())
            attr["lumos_in_lag_us"] = ("double_list", graph.lag[e].astype(float).tolist())
            if graph.inferred[e].any():
                attr["lumos_in_inferred"] = ("bool_list", graph.inferred[e].tolist())
            if edge_ids:
                attr["lumos_in_edge"] = ("int64_list", e.tolist())
        nodes.append(Node(id=i, name=str(graph.name[i]), type=ntype, ctrl_deps=ctrl, data_deps=data,
                          start_time_micros=_micros(graph.ts[i] - gap[i]),
                          duration_micros=_micros(graph.dur[i] + gap[i]), attr=attr))
    return nodes


def host_gaps(graph: Graph) -> np.ndarray:
    """Each task's untraced time on its thread before it: the largest positive lag of its intra-thread
    in-edges. Chakra has no lag on a dependency, so the export adds it to the task's duration
    (`duration_micros`): the thread was busy running what the profiler did not record, and the task
    ends when it did. The exact duration and lag stay in the `lumos_*` attributes."""
    gap = np.zeros(graph.n_tasks)
    e = np.flatnonzero((graph.cls == EdgeClass.INTRA_THREAD) & (graph.lag > 0))
    np.maximum.at(gap, graph.dst[e], graph.lag[e])
    return gap


def graph_metadata(graph: Graph, rank: int) -> Metadata:
    summary = json.dumps(graph.summary, default=_plain, sort_keys=True)
    return Metadata(attr={
        "lumos_format": ("int64_val", LUMOS_FORMAT), "lumos_rank": ("int64_val", int(rank)),
        "lumos_summary": ("string_val", summary),
        "lumos_proc_kind": ("int32_list", graph.proc_kind.astype(int).tolist()),
        "lumos_proc_rank": ("int64_list", graph.proc_rank.astype(int).tolist()),
        "lumos_proc_key": ("int64_list", graph.proc_key.astype(int).tolist()),
        "lumos_proc_name": ("string_list", [str(x) for x in graph.proc_name])})


def _plain(x):
    if isinstance(x, np.ndarray):
        return x.tolist()
    if hasattr(x, "item"):
        return x.item()
    if isinstance(x, (set, frozenset, tuple)):
        return list(x)
    return str(x)


@dataclass
class ExportSummary:
    """What an export wrote and what it could not give ASTRA-sim as communication."""
    out: Path
    files: list[Path]
    groups: dict[tuple[int, ...], int]
    nodes: dict[str, int] = field(default_factory=dict)      # node type name -> count
    cpu_ops: int = 0
    edges: int = 0
    wait_deps: int = 0
    demoted: dict[str, int] = field(default_factory=dict)
    bytes: int = 0
    ranks: list[int] = field(default_factory=list)
    world_size: int | None = None
    virtual: int = 0                 # tasks of no rank (a joint graph's rendezvous), in the first file's metadata

    @property
    def missing_ranks(self) -> list[int]:
        """Ranks of the world not exported: ASTRA-sim reads NAME.i.et for every NPU i."""
        world = self.world_size or (max(self.ranks) + 1 if self.ranks else 0)
        return sorted(set(range(world)) - set(self.ranks))

    def as_dict(self) -> dict:
        return {"out": str(self.out), "files": [p.name for p in self.files], "bytes": self.bytes,
                "comm_groups": {str(v): list(k) for k, v in self.groups.items()}, "nodes": self.nodes,
                "cpu_ops": self.cpu_ops, "edges": self.edges, "wait_deps": self.wait_deps,
                "comm_as_compute": {k: n for k, n in self.demoted.items() if n}, "ranks": self.ranks,
                "missing_ranks": self.missing_ranks}


def export_run(tables: Sequence[TraceTable], out: str | os.PathLike, name: str = "trace", step=None,
               gap_threshold_us: float = DEFAULT_GAP_THRESHOLD_US, bare: bool = False) -> ExportSummary:
    """Each rank's graph (as `lumos replay` builds it) written to `out/NAME.RANK.et`, and the process
    groups of its collectives to `out/comm_groups.json` ({"1": [ranks], ...}). `bare`: without the
    `lumos_*` attributes (smaller; replayed back as a foreign trace is)."""
    if "." in name or "/" in name or not name:
        raise ValueError(f"trace name {name!r}: give a plain name (ASTRA-sim appends .RANK.et to it)")
    out = Path(out)
    graphs = {int(t.rank): build_graph(t, step=step, gap_threshold_us=gap_threshold_us) for t in tables}
    plan: CommPlan = plan_comm(graphs, {int(t.rank): t for t in tables})
    worlds = {int(t.world_size) for t in tables}
    summary = ExportSummary(out=out, files=[], groups=plan.groups, demoted=plan.demoted, ranks=sorted(graphs),
                            world_size=worlds.pop() if len(worlds) == 1 else None)
    for r, g in sorted(graphs.items()):
        nodes = graph_nodes(g, plan.nodes[r], ours=not bare)
        path = out / f"{name}.{r}.et"
        summary.bytes += write_et(path, Metadata() if bare else graph_metadata(g, r), nodes)
        summary.files.append(path)
        for nd in nodes:
            t = NodeType(nd.type).name
            summary.nodes[t] = summary.nodes.get(t, 0) + 1
        summary.cpu_ops += int(np.sum(g.kind == TaskKind.CPU))
        summary.edges += g.n_edges
        summary.wait_deps += len(wait_deps(g))
    groups = {str(v): list(k) for k, v in sorted(plan.groups.items(), key=lambda kv: kv[1])}
    write_text_atomic(out / COMM_GROUPS_FILE, json.dumps(groups, indent=1) + "\n")
    return summary


# -- nodes -> graph ---------------------------------------------------------------------------
def load_chakra_run(path: str | os.PathLike) -> list[Graph]:
    """The graph of each rank of a Chakra trace (a `PREFIX.RANK.et` file or a directory of them); for
    the export of a graph of several ranks (`lumos predict --export`, `chakra_joint`), that one graph."""
    files = et_files(path)
    if files is None:
        raise TraceError(path, "no Chakra trace here (no PREFIX.RANK.et file)")
    graphs, read = [], {}
    for rank, f in files.items():   # one file's nodes at a time, unless the first is a joint export's
        meta, nodes = read_et(f)
        if (graphs or read) and is_joint(meta) != bool(read):
            raise TraceError(path, "some files are a joint export (lumos predict --export) and some are not")
        if is_joint(meta):
            read[rank] = (meta, nodes, Path(f))
        else:
            graphs.append(graph_from_nodes(meta, nodes, rank, f))
    return [joint_graph(read)] if read else graphs


def _index(nodes: list[Node], path) -> dict[int, int]:
    idx = {}
    for i, nd in enumerate(nodes):
        if nd.id in idx:
            raise TraceError(path, f"node id {nd.id} appears twice (messages {idx[nd.id] + 1} and {i + 1}); "
                                   f"ASTRA-sim needs ids unique in a file")
        idx[nd.id] = i
    return idx


def _resolve(idx: dict[int, int], dep: int, nd: Node, path) -> int:
    got = idx.get(dep)
    if got is None:
        raise TraceError(path, f"node {nd.id} ({nd.name!r}) depends on node {dep}, which the file does not hold")
    return got


def graph_from_nodes(meta: Metadata, nodes: list[Node], rank: int, path) -> Graph:
    if not nodes:
        raise TraceError(path, "no node after the GlobalMetadata")
    idx = _index(nodes, path)
    if meta.value("lumos_format") is not None:
        return _lumos_graph(meta, nodes, idx, path)
    return _foreign_graph(nodes, idx, rank, path)


def _lumos_graph(meta: Metadata, nodes: list[Node], idx: dict[int, int], path) -> Graph:
    """The exact graph an export wrote (every task, edge, lag and run-time wait)."""
    if meta.value("lumos_format") != LUMOS_FORMAT:
        raise TraceError(path, f"lumos_format {meta.value('lumos_format')} (this version reads {LUMOS_FORMAT})")
    n, rank = len(nodes), int(meta.value("lumos_rank", 0))
    cols = {"name": [nd.name for nd in nodes], "rank": [rank] * n}
    for a, (_, f, skip) in LUMOS_ATTRS.items():
        vals = [nd.value(a, skip) for nd in nodes]
        if any(v is None for v in vals):
            i = vals.index(None)
            raise TraceError(path, f"node {nodes[i].id} lacks {a}, which every node of a Lumos export carries")
        cols[f] = vals
    kw = {f: _array(v, _DTYPES[f]) for f, v in cols.items()}
    floors = [nd.value("lumos_floor_us", -np.inf) for nd in nodes]
    src, dst, cls, lag, inferred = [], [], [], [], []
    for i, nd in enumerate(nodes):
        ins = nd.value("lumos_in_src", [])
        src += [_resolve(idx, s, nd, path) for s in ins]
        dst += [i] * len(ins)
        cls += nd.value("lumos_in_class", [])
        lag += nd.value("lumos_in_lag_us", [])
        inferred += nd.value("lumos_in_inferred", [False] * len(ins))
    if not len(src) == len(cls) == len(lag) == len(inferred):
        raise TraceError(path, "lumos_in_* lists of unequal length")
    g = Graph(**kw, proc_kind=np.asarray(meta.value("lumos_proc_kind"), np.int8),
              proc_rank=np.asarray(meta.value("lumos_proc_rank"), np.int32),
              proc_key=np.asarray(meta.value("lumos_proc_key"), np.int64),
              proc_name=_array(meta.value("lumos_proc_name"), object),
              src=np.asarray(src, np.int64), dst=np.asarray(dst, np.int64), cls=np.asarray(cls, np.int8),
              lag=np.asarray(lag, np.float64), inferred=np.asarray(inferred, bool),
              finish_floor=np.asarray(floors, np.float64) if np.isfinite(floors).any() else None)
    g.summary = json.loads(meta.value("lumos_summary", "{}"))
    g.summary["chakra"] = str(path)
    return g


def _array(values, dtype) -> np.ndarray:
    if dtype is object:
        out = np.empty(len(values), dtype=object)
        out[:] = values
        return out
    return np.asarray(values, dtype=dtype)


# a foreign trace's lanes, as ASTRA-sim's slots: (lane, kind, communication)
_LANES = {"cpu": (TaskKind.CPU, False), "compute": (TaskKind.GPU, False), "communication": (TaskKind.GPU, True),
          "memory": (TaskKind.GPU, False), "bookkeeping": (TaskKind.CPU, False)}
_COMM_TYPES = (NodeType.COMM_COLL_NODE, NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE)


def _lane(nd: Node) -> str:
    if nd.type in (NodeType.METADATA_NODE, NodeType.INVALID_NODE):
        return "bookkeeping"     # ASTRA-sim finishes them at once
    if nd.value("is_cpu_op", False):
        return "cpu"
    if nd.type in _COMM_TYPES:
        return "communication"
    if nd.type in (NodeType.MEM_LOAD_NODE, NodeType.MEM_STORE_NODE):
        return "memory"
    return "compute"


def _edge_class(a: str, b: str) -> EdgeClass:
    """A foreign dependency's class, by the lanes it joins (no lag: Chakra has none)."""
    ka, kb = _LANES[a][0], _LANES[b][0]
    if a == b:
        return EdgeClass.INTRA_THREAD if ka == TaskKind.CPU else EdgeClass.INTRA_STREAM
    if ka == TaskKind.CPU:
        return EdgeClass.LAUNCH if kb == TaskKind.GPU else EdgeClass.INTER_THREAD
    return EdgeClass.SYNC if kb == TaskKind.CPU else EdgeClass.INTER_STREAM


def _foreign_graph(nodes: list[Node], idx: dict[int, int], rank: int, path) -> Graph:
    """A Chakra trace from elsewhere: each node on its rank's lane for its kind, replaying
    `duration_micros` (0 for bookkeeping nodes) once its dependencies end, from time 0."""
    lanes = [_lane(nd) for nd in nodes]
    used = [x for x in _LANES if x in set(lanes)]
    lane_id = {x: i for i, x in enumerate(used)}
    n = len(nodes)
    proc = np.asarray([lane_id[x] for x in lanes], np.int32)
    kind = np.asarray([_LANES[x][0] for x in lanes], np.int8)
    dur = np.asarray([0.0 if x == "bookkeeping" else float(nd.duration_micros) for x, nd in zip(lanes, nodes)])
    stream_pos = np.full(n, -1, np.int32)
    for p in range(len(used)):
        mine = np.flatnonzero((proc == p) & (kind == TaskKind.GPU))
        stream_pos[mine] = np.arange(len(mine))
    src, dst, cls = [], [], []
    for i, nd in enumerate(nodes):
        for dep in dict.fromkeys(list(nd.ctrl_deps) + list(nd.data_deps)):
            j = _resolve(idx, dep, nd, path)
            src.append(j)
            dst.append(i)
            cls.append(_edge_class(lanes[j], lanes[i]))
    k = len(src)
    g = Graph(name=_array([nd.name for nd in nodes], object), kind=kind, proc=proc, dur=dur,
              ts=np.asarray([float(nd.start_time_micros) for nd in nodes]), release=np.zeros(n),
              comm=np.asarray([_LANES[x][1] for x in lanes], bool), in_step=kind == TaskKind.GPU,
              rank=np.full(n, rank, np.int32), stream_pos=stream_pos, wait_kind=np.zeros(n, np.int8),
              wait_target=np.full(n, -1, np.int32), event=np.full(n, -1, np.int64),
              layer=np.full(n, -1, np.int32), phase=np.full(n, -1, np.int8),
              proc_kind=np.asarray([_LANES[x][0] for x in used], np.int8),
              proc_rank=np.full(len(used), rank, np.int32), proc_key=np.arange(len(used), dtype=np.int64),
              proc_name=_array([f"chakra {x} (rank {rank})" for x in used], object),
              src=np.asarray(src, np.int64), dst=np.asarray(dst, np.int64), cls=np.asarray(cls, np.int8),
              lag=np.zeros(k), inferred=np.zeros(k, bool))
    g.summary = {"trace": str(path), "chakra": str(path), "rank": rank, "step": None, "tasks": n,
                 "cpu_tasks": int(np.sum(kind == TaskKind.CPU)), "gpu_tasks": int(np.sum(kind == TaskKind.GPU)),
                 "carry_in_gpu_ops": 0, "edges": g.edge_counts(), "inferred_edges": 0, "violations": 0,
                 "step_thread": None,
                 "notes": [f"a Chakra trace without Lumos attributes: nodes on {len(used)} lanes "
                           f"({', '.join(used)}), durations in whole microseconds, no lags"]}
    return g


# -- a joint export (a graph of several ranks, `chakra_joint`) back as that one graph ---------------------
def is_joint(meta: Metadata) -> bool:
    """A file of a joint export (`chakra_joint.export_joint`)."""
    return meta.value("lumos_joint_ranks") is not None


def joint_graph(files: dict[int, tuple[Metadata, list[Node], Path]]) -> Graph:
    """The joint graph `chakra_joint.export_joint` wrote, from every one of its files (rank -> (metadata,
    nodes, path)): each task and edge at its index in the exported graph."""
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
