"""Append tasks, processors and edges to a plan's graph and structure, and thread new tasks into blocks.

The transforms re-time and copy what a base has; `add_collectives.py` gives a base what it lacks
(a one-GPU run's missing collectives), and does it through this one door so that every per-task
column of the graph, the run structure and the plan's roles grows together.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from lumos.graph.model import Graph, TaskKind
from lumos.model.structure import Block

from .plan import Plan

_GPU = int(TaskKind.GPU)


@dataclass
class NewTask:
    name: str
    kind: int
    proc: int
    dur: float
    ts: float
    rank: int
    block: int                       # the block it joins (index into st.blocks), -1: none
    comm: bool = False
    layer: int = -1
    phase: int = -1
    wait_kind: int = 0
    wait_target: int = -1
    coll: str | None = None
    group: tuple | None = None
    nbytes: float = 0.0
    op_name: str = ""
    role: str | None = None


@dataclass
class Growth:
    """What is to be added to one plan: processors, tasks, edges, and edges to drop."""
    plan: Plan
    procs: list = field(default_factory=list)     # (kind, rank, key, name, role)
    tasks: list = field(default_factory=list)     # NewTask
    edges: list = field(default_factory=list)     # (src, dst, cls, lag)
    drop: set = field(default_factory=set)        # indices of base edges to remove
    after: dict = field(default_factory=dict)     # new task id -> the block task it follows in its block
    new_blocks: list = field(default_factory=list)   # Block of each new block, indexed after the base's

    def new_block(self, kind: str, rank: int, thread_role: int, index: int, shape: tuple = ()) -> None:
        """Block `index` (the next after the base's and earlier new ones), its tasks those that name it."""
        assert index == len(self.plan.st.blocks) + len(self.new_blocks)
        self.new_blocks.append(Block(kind=kind, rank=rank, thread_role=thread_role, shape=shape))

    def stream(self, rank: int, role: int, name: str) -> int:
        """A new GPU stream of `rank` (its id as the structure's role), made once."""
        g = self.plan.graph
        for i, p in enumerate(self.procs):
            if p[0] == _GPU and p[1] == rank and p[4] == role:
                return g.n_procs + i
        self.procs.append((_GPU, rank, (rank << 32) | role, f"{name} stream {role} (rank {rank})", role))
        return g.n_procs + len(self.procs) - 1

    def task(self, t: NewTask, after: int | None = None) -> int:
        """Add `t`; its id. `after`: the task of its block it is placed behind in the block's order."""
        tid = self.plan.graph.n_tasks + len(self.tasks)
        self.tasks.append(t)
        if after is not None:
            self.after[tid] = after
        return tid

    def edge(self, src: int, dst: int, cls: int, lag: float = 0.0) -> None:
        self.edges.append((int(src), int(dst), int(cls), float(lag)))

    def apply(self) -> Plan:
        """A new plan with everything added (the input plan is left as it was)."""
        plan = self.plan
        out = plan.clone()
        g, st = out.graph, out.st
        new = self.tasks
        n0 = g.n_tasks
        col = {f: getattr(g, f) for f in Graph.TASK_FIELDS}
        add = {
            "name": np.array([t.name for t in new], dtype=object),
            "kind": np.array([t.kind for t in new], np.int8),
            "proc": np.array([t.proc for t in new], np.int32),
            "dur": np.array([t.dur for t in new], np.float64),
            "ts": np.array([t.ts for t in new], np.float64),
            "release": np.full(len(new), -np.inf),
            "comm": np.array([t.comm for t in new], bool),
            "in_step": np.array([t.kind == _GPU for t in new], bool),
            "rank": np.array([t.rank for t in new], np.int32),
            "stream_pos": np.full(len(new), -1, np.int32),
            "wait_kind": np.array([t.wait_kind for t in new], np.int8),
            "wait_target": np.array([t.wait_target for t in new], np.int32),
            "event": np.full(len(new), -1, np.int64),
            "layer": np.array([t.layer for t in new], np.int32),
            "phase": np.array([t.phase for t in new], np.int8),
        }
        for f in Graph.TASK_FIELDS:
            setattr(g, f, np.concatenate([col[f], add[f].astype(col[f].dtype)]))
        if g.finish_floor is not None:
            g.finish_floor = np.concatenate([g.finish_floor, np.full(len(new), -np.inf)])
        if self.procs:
            g.proc_kind = np.concatenate([g.proc_kind, np.array([p[0] for p in self.procs], g.proc_kind.dtype)])
            g.proc_rank = np.concatenate([g.proc_rank, np.array([p[1] for p in self.procs], g.proc_rank.dtype)])
            g.proc_key = np.concatenate([g.proc_key, np.array([p[2] for p in self.procs], g.proc_key.dtype)])
            names = np.empty(len(self.procs), dtype=object)
            names[:] = [p[3] for p in self.procs]
            g.proc_name = np.concatenate([g.proc_name, names])
            st.proc_role = np.concatenate([st.proc_role, np.array([p[4] for p in self.procs], st.proc_role.dtype)])
        # a stream's order: the base's, then the new tasks on it by start
        gpu_new = [i for i, t in enumerate(new) if t.kind == _GPU]
        for p in {new[i].proc for i in gpu_new}:
            mine = sorted((i for i in gpu_new if new[i].proc == p), key=lambda i: new[i].ts)
            start = int(g.stream_pos[:n0][g.proc[:n0] == p].max(initial=-1)) + 1
            for k, i in enumerate(mine):
                g.stream_pos[n0 + i] = start + k
        keep = np.ones(g.n_edges, bool)
        keep[list(self.drop)] = False
        e = self.edges
        g.src = np.concatenate([g.src[keep], np.array([x[0] for x in e], np.int64)])
        g.dst = np.concatenate([g.dst[keep], np.array([x[1] for x in e], np.int64)])
        g.cls = np.concatenate([g.cls[keep], np.array([x[2] for x in e], np.int8)])
        g.lag = np.concatenate([g.lag[keep], np.array([x[3] for x in e], np.float64)])
        g.inferred = np.concatenate([g.inferred[keep], np.zeros(len(e), bool)])
        g.release[np.unique(g.dst)] = -np.inf
        st.coll = np.concatenate([st.coll, _objects([t.coll for t in new])])
        st.group = np.concatenate([st.group, _objects([t.group for t in new])])
        st.nbytes = np.concatenate([st.nbytes, np.array([t.nbytes for t in new], np.float64)])
        st.op_name = np.concatenate([st.op_name, _objects([t.op_name for t in new])])
        st.op_dims = np.concatenate([st.op_dims, _objects([None for _ in new])])
        st.task_block = np.concatenate([st.task_block, np.array([t.block for t in new], st.task_block.dtype)])
        out.role = np.concatenate([out.role, _objects([t.role for t in new])])
        st.blocks = _joined(list(st.blocks) + self.new_blocks, new, n0, self.after)
        for i in range(len(st.blocks) - len(self.new_blocks), len(st.blocks)):
            b = st.blocks[i]
            st.blocks[i] = dataclasses.replace(b, start=float(g.ts[b.tasks].min()) if len(b.tasks) else 0.0)
        return out


def _objects(vals: list) -> np.ndarray:
    a = np.empty(len(vals), dtype=object)
    a[:] = vals
    return a


def _joined(blocks: list, new: list, n0: int, after: dict) -> list:
    """Blocks with each new task in its block: behind the task it follows there (`after`), else last."""
    by_block: dict[int, list] = {}
    for i, t in enumerate(new):
        if t.block >= 0:
            by_block.setdefault(t.block, []).append(n0 + i)
    out = list(blocks)
    for bi, ids in by_block.items():
        tasks = list(blocks[bi].tasks.tolist())
        behind: dict[int, list] = {}
        tail = []
        for tid in ids:
            (behind.setdefault(after[tid], []) if tid in after else tail).append(tid)
        merged: list = []

        def put(t: int) -> None:
            merged.append(t)
            for x in behind.get(t, ()):     # a new task may follow another new one
                put(x)

        for t in tasks + tail:
            put(t)
        out[bi] = dataclasses.replace(blocks[bi], tasks=np.array(merged, np.int64))
    return out
