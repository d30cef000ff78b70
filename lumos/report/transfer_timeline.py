"""The transfer panel of the Fig. 6 analogue: step k's graph with step k+1's durations, bin by bin.

An unchanged replay draws the measured duty cycle again by construction, so the other panels
cannot show whether the graph is right. Here step k's graph (Lumos, and the dPRO-style graph)
is replayed with the durations measured in step k+1 (`lumos.analysis.transfer`) and its stream
duty cycle is drawn against step k+1 as measured: only dependencies that are the real ones move
the timeline the way the hardware did. Each curve's bins start at its own iteration start.

    step k+1 measured   [####  ######   ###]
    Lumos transfer      [####  ######  ###]     k's edges and gaps, k+1's durations
    dPRO-style transfer [######  ######  ###]

k is the trace's second step (the first may be warm-up) and k+1 the next; with two steps,
the first and the second. A pair holding a step with nothing to replay (a stub the profiler cut)
is passed over for the next one.

Example
-------
>>> from lumos.trace import load_trace                              # doctest: +SKIP
>>> df = transfer_timeline_frame(load_trace("trace.json.gz"))       # doctest: +SKIP
>>> df.groupby("curve")[["iteration_ms", "error_pct"]].first()      # doctest: +SKIP
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from lumos.analysis import duty_cycle
from lumos.analysis.breakdown import relative_error_pct
from lumos.analysis.replay import measured_breakdown, replay_graph, replayed_breakdown
from lumos.analysis.transfer import StepModels, Transfer, dpro_with_durations, transfer_pair
from lumos.baselines.dpro import replay_dpro
from lumos.graph.model import TaskKind
from lumos.trace import EmptyStepError, TraceTable
from lumos.trace.steps import find_steps

__all__ = ["CURVES", "COLUMNS", "step_pairs", "transfer_timeline_frame"]

# The panel draws GPU activity, bin by bin over the GPU span: the iteration it reports is that span.
ITERATION = "gpu"
CURVES = ("measured", "lumos", "dpro")   # step k+1 as measured, then the two transfers of step k
COLUMNS = ("rank", "step", "durations_from_step", "curve", "iteration_ms", "error_pct", "bin", "t_ms", "duty")


def step_pairs(table: TraceTable) -> list[tuple[int, int]]:
    """(k, k+1) candidates in order of preference: from the second step on when there are three
    or more (the first may be warm-up, as in `transfer_steps`), else from the first."""
    steps = [s.number for s in find_steps(table)]
    first = 1 if len(steps) >= 3 else 0
    return list(zip(steps[first:-1], steps[first + 1:]))


def transfer_timeline_frame(table: TraceTable, bin_us: float = 1000.0, engine: str = "auto") -> pd.DataFrame:
    """Duty cycle per `bin_us` bin of step k+1 measured, and of step k's Lumos and dPRO-style graphs
    with step k+1's durations: one row per (curve, bin). No rows when no two steps replay."""
    models = StepModels(table)
    for k, k1 in step_pairs(table):
        try:
            t = transfer_pair(table, k, table, k1, engine=engine, models=(models, models), iteration=ITERATION)
        except EmptyStepError:
            continue   # a stub step: try the next pair
        curves = {"measured": _measured(models.graph(k1), bin_us),
                  "lumos": _lumos(t, engine, bin_us),
                  "dpro": _dpro(models, table, k, k1, bin_us)}
        return _frame(int(table.rank), t, curves, bin_us)
    return pd.DataFrame(columns=list(COLUMNS))


def _measured(g, bin_us: float) -> tuple[float, np.ndarray]:
    gpu = g.kind == TaskKind.GPU
    return measured_breakdown(g, ITERATION).iteration_us, duty_cycle(g.ts, g.end, gpu, g.in_step, bin_us)


def _lumos(t: Transfer, engine: str, bin_us: float) -> tuple[float, np.ndarray]:
    """`Transfer` keeps the moved graph, not its schedule: replay it again (deterministic)."""
    r = replay_graph(t.graph, engine=engine, iteration=ITERATION)
    gpu = t.graph.kind == TaskKind.GPU
    return r.replayed.iteration_us, duty_cycle(r.schedule.start, r.schedule.end, gpu, t.graph.in_step, bin_us)


def _dpro(models: StepModels, table: TraceTable, k: int, k1: int, bin_us: float) -> tuple[float, np.ndarray]:
    """The dPRO-style graph of step k with step k+1's GPU op durations (`dpro_with_durations`)."""
    d = dpro_with_durations(models.dpro(k), table, models.dpro(k1), table)
    sched = replay_dpro(d)
    ops = np.ones(len(d), bool)   # every dPRO-style node is a device op
    return (replayed_breakdown(d.to_graph(), sched, ITERATION).iteration_us,
            duty_cycle(sched.start, sched.end, ops, d.in_step, bin_us))


def _frame(rank: int, t: Transfer, curves: dict, bin_us: float) -> pd.DataFrame:
    actual_us = curves["measured"][0]
    parts = []
    for curve in CURVES:
        iteration_us, duty = curves[curve]
        err = None if curve == "measured" else relative_error_pct(iteration_us, actual_us)
        n = len(duty)
        parts.append(pd.DataFrame({"rank": rank, "step": t.step, "durations_from_step": t.source_step,
                                   "curve": curve, "iteration_ms": iteration_us / 1e3,
                                   "error_pct": np.nan if err is None else err,
                                   "bin": np.arange(n), "t_ms": np.arange(n) * bin_us / 1e3, "duty": duty}))
    return pd.concat(parts, ignore_index=True)[list(COLUMNS)]
