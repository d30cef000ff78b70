"""Write a replayed (or predicted) timeline as a Kineto trace Perfetto and `lumos` open.

Each task becomes one complete event at its replayed time with its original
category, correlation id and stream, and the iteration gets a `ProfilerStep#N`
annotation, so the file loads and replays with `lumos replay` like a measured one.
"""

from __future__ import annotations

import os

import numpy as np

from lumos.analysis.replay import step_window
from lumos.graph import Graph
from lumos.graph.model import TaskKind
from lumos.trace import TraceTable, schema, write_trace


def timeline_events(graph: Graph, start: np.ndarray, end: np.ndarray, table: TraceTable | None,
                    label: str = "replayed") -> list[dict]:
    events = []
    for i in range(graph.n_tasks):
        p = graph.proc[i]
        key = int(graph.proc_key[p])
        hi, lo = key >> 32, key & 0xFFFFFFFF
        if lo >= 1 << 31:
            lo -= 1 << 32
        row = graph.event[i]
        args: dict = {}
        if table is not None and row >= 0:
            cat = schema.CATEGORY_NAMES[int(table.cat[row])]
            if table.corr[row] >= 0:
                args["correlation"] = int(table.corr[row])
            if table.ext[row] >= 0:
                args["External id"] = int(table.ext[row])
            if table.input_dims[row] is not None:
                args["Input Dims"] = table.input_dims[row]
            if table.coll_name[row] is not None:
                args["Collective name"] = table.coll_name[row]
        else:
            cat = "kernel" if graph.kind[i] == TaskKind.GPU else "cpu_op"
        if graph.kind[i] == TaskKind.GPU:
            args.update({"device": hi, "stream": lo})
        events.append({"ph": "X", "cat": cat, "name": str(graph.name[i]), "pid": hi, "tid": lo,
                       "ts": round(float(start[i]), 3), "dur": round(float(end[i] - start[i]), 3),
                       "args": args})
    cpu = graph.kind == TaskKind.CPU
    if np.any(cpu):
        window = step_window(graph, start, end)  # the replayed step period, on the thread that marks steps
        first = graph.summary["step_thread"]["first_task"] if window else int(np.flatnonzero(cpu)[0])
        main = int(graph.proc_key[graph.proc[first]])
        pid, tid = main >> 32, main & 0xFFFFFFFF
        lo, hi = window if window else (float(np.min(start)), float(np.max(end[cpu])))
        step = graph.summary.get("step")
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step if step is not None else 0}",
                       "pid": pid, "tid": tid, "ts": round(lo, 3), "dur": round(hi - lo, 3), "args": {}})
    return events


def write_timeline(path: str | os.PathLike, graph: Graph, start: np.ndarray, end: np.ndarray,
                   table: TraceTable | None = None, label: str = "replayed") -> None:
    meta = {"traceName": f"lumos {label} timeline", "lumos": {"timeline": label, "source": graph.summary.get("trace")},
            "distributedInfo": {"rank": int(graph.summary.get("rank", 0)), "world_size": 1}}
    write_trace(path, timeline_events(graph, start, end, table, label), meta)
