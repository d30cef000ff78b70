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

CATEGORY_NAMES = schema.CATEGORY_NAMES


def timeline_events(graph: Graph, start: np.ndarray, end: np.ndarray, table: TraceTable | None,
                    label: str = "replayed") -> list[dict]:
    """Task i as events[i] (a complete event on its thread or stream), then the step annotation.

    The columns are turned into Python lists before the loop: a run's timelines hold millions of
    events, and a numpy scalar or enum read per task costs more than the rest of the loop."""
    keys = graph.proc_key[graph.proc].astype(np.int64)
    pids = (keys >> 32).tolist()
    lo = keys & 0xFFFFFFFF
    tids = np.where(lo >= 1 << 31, lo - (1 << 32), lo).tolist()
    gpu = (graph.kind == TaskKind.GPU).tolist()
    names = [str(n) for n in graph.name]
    starts, durs = start.tolist(), (end - start).tolist()
    has = (graph.event >= 0) if table is not None else np.zeros(graph.n_tasks, bool)
    rows = np.where(has, graph.event, 0)
    has = has.tolist()
    if table is not None and len(table.cat):
        cats, corrs, exts = table.cat[rows].tolist(), table.corr[rows].tolist(), table.ext[rows].tolist()
        dims, colls = table.input_dims[rows].tolist(), table.coll_name[rows].tolist()
    events = []
    for i in range(graph.n_tasks):
        args: dict = {}
        if has[i]:
            cat = CATEGORY_NAMES[cats[i]]
            if corrs[i] >= 0:
                args["correlation"] = corrs[i]
            if exts[i] >= 0:
                args["External id"] = exts[i]
            if dims[i] is not None:
                args["Input Dims"] = dims[i]
            if colls[i] is not None:
                args["Collective name"] = colls[i]
        else:
            cat = "kernel" if gpu[i] else "cpu_op"
        if gpu[i]:
            args.update({"device": pids[i], "stream": tids[i]})
        events.append({"ph": "X", "cat": cat, "name": names[i], "pid": pids[i], "tid": tids[i],
                       "ts": round(starts[i], 3), "dur": round(durs[i], 3), "args": args})
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
