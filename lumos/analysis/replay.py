"""Replay a measured iteration and compare it with the measurement.

The one place that runs trace -> graph -> sim -> breakdown for a rank or a
run, so the CLI, the pipeline and the tests all measure the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from lumos.graph import ALL_EDGE_CLASSES, DEFAULT_GAP_THRESHOLD_US, EdgeClass, Graph, build_graph
from lumos.graph.model import TaskKind
from lumos.sim import Schedule, simulate
from lumos.trace import TraceTable

from .breakdown import Breakdown, breakdown, relative_error_pct


# What a rank's iteration is: the step period (default) or the span of its GPU work.
ITERATION_KINDS = ("step", "gpu")


@dataclass
class RankReplay:
    rank: int
    graph: Graph
    schedule: Schedule
    measured: Breakdown
    replayed: Breakdown

    @property
    def summary(self) -> dict:
        return self.graph.summary

    @property
    def error_pct(self) -> float | None:
        return relative_error_pct(self.replayed.iteration_us, self.measured.iteration_us)

    def as_dict(self) -> dict:
        return {"rank": self.rank, "measured": self.measured.as_dict(), "replayed": self.replayed.as_dict(),
                "error_pct": _round(self.error_pct), "graph": self.graph.summary}


@dataclass
class RunReplay:
    """Every rank's replay: `RankReplay`s, or the `RankFigures` a streamed replay keeps of them
    (`lumos.analysis.run_stream`); both have a rank, a summary and two breakdowns."""
    ranks: list = field(default_factory=list)

    @property
    def critical(self) -> RankReplay:
        """The rank whose measured iteration is longest: it sets the run's iteration time."""
        return max(self.ranks, key=lambda r: r.measured.iteration_us)

    def as_dict(self) -> dict:
        if len(self.ranks) == 1:
            return self.ranks[0].as_dict()
        crit = self.critical
        errors = [abs(r.error_pct) for r in self.ranks if r.error_pct is not None]
        errors = errors or [float("nan")]
        return {"measured": crit.measured.as_dict(), "replayed": crit.replayed.as_dict(),
                "error_pct": _round(crit.error_pct), "critical_rank": crit.rank,
                "mean_abs_rank_error_pct": round(float(np.mean(errors)), 4),
                "max_abs_rank_error_pct": round(float(np.max(errors)), 4),
                "ranks": [r.as_dict() for r in self.ranks]}


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def step_window(graph: Graph, start: np.ndarray, end: np.ndarray) -> tuple[float, float] | None:
    """The step period in a timeline: from the start of the step to the start of the next,
    on the thread that marks steps. Its first task keeps its measured distance from the step
    start, its last task its distance to the next step's start (the Python around the loop).
    None when the graph does not know its step thread (a predicted graph, a step annotated
    on a process with no CPU task): the breakdown then spans the GPU work."""
    info = graph.summary.get("step_thread")
    if not info:
        return None
    tasks = np.flatnonzero(graph.proc == graph.proc[info["first_task"]])
    return float(start[info["first_task"]] - info["head_us"]), float(end[tasks].max() + info["tail_us"])


def _window(graph: Graph, start, end, iteration: str):
    if iteration not in ITERATION_KINDS:
        raise ValueError(f"iteration must be one of {', '.join(ITERATION_KINDS)}, not {iteration!r}")
    return step_window(graph, start, end) if iteration == "step" else None


def measured_breakdown(graph: Graph, iteration: str = "step") -> Breakdown:
    """`iteration`: 'step' (the step period where the graph knows it) or 'gpu' (the GPU span)."""
    gpu = graph.kind == TaskKind.GPU
    return breakdown(graph.ts, graph.end, gpu, graph.comm, graph.in_step,
                     window=_window(graph, graph.ts, graph.end, iteration))


def replayed_breakdown(graph: Graph, schedule: Schedule, iteration: str = "step") -> Breakdown:
    gpu = graph.kind == TaskKind.GPU
    return breakdown(schedule.start, schedule.end, gpu, graph.comm, graph.in_step,
                     window=_window(graph, schedule.start, schedule.end, iteration))


def replay_graph(graph: Graph, engine: str = "auto", iteration: str = "step") -> RankReplay:
    schedule = simulate(graph, engine=engine)
    return RankReplay(rank=int(graph.summary.get("rank", 0)), graph=graph, schedule=schedule,
                      measured=measured_breakdown(graph, iteration),
                      replayed=replayed_breakdown(graph, schedule, iteration))


def replay_tables(tables: Iterable[TraceTable], step=None,
                  edge_classes: Iterable[EdgeClass] = ALL_EDGE_CLASSES,
                  gap_threshold_us: float = DEFAULT_GAP_THRESHOLD_US, engine: str = "auto",
                  iteration: str = "step") -> RunReplay:
    run = RunReplay()
    for table in tables:
        graph = build_graph(table, step=step, edge_classes=edge_classes, gap_threshold_us=gap_threshold_us)
        run.ranks.append(replay_graph(graph, engine=engine, iteration=iteration))
    return run
