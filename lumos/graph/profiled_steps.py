"""Host and kernel time from every profiled step of a rank, not from the one step a graph is built on.

One step's time is one draw. On the H200 base recorded twice (measured on hardware,
`python studies/h200/host.py`), the Python between `base_r0`'s CPU ops summed to 73 ms in its
first profiled step and 96-97 ms in the next two; `base_r1`'s to 50-54 ms in all three. A prediction reuses
the base's CPU work as measured, so a host-bound target (micro-batch 2) inherits whatever the
chosen step's host did: +40.6% from one recording, -18.3% from the other. Kernels move less
(0.5% between the two recordings' GPU time per step), but every re-shaped GEMM is re-timed from
the base's own, so one recording's draw carries into every compute-heavy what-if: width 2x was
-3.7% from one recording and -4.9% from the other (`studies/h200/findings.py`).

`profiled_steps` pairs every task of the step graph, and every program-order edge between two
CPU tasks (the Python between ops), with its partner in each other profiled step of the same
rank (`match.match_tasks`, the pairing transfer uses), and in other recordings of the same
configuration when given. `with_step_medians` puts the median over the steps on the CPU tasks
and gaps (host work) and on the kernels (every GPU task but collectives, whose time is their
peers' as much as their own) where asked: the point a prediction starts from.
`ProfiledSteps.ratios` is each step's host work over that median, which a prediction interval
draws one step at a time, so a host that was slow in one profiled step widens the interval
instead of moving the point. Every other lag stays the step's own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lumos.trace import EmptyStepError, TraceTable, find_steps

from .build import build_graph
from .match import TaskKeys, match_tasks
from .model import EdgeClass, Graph, TaskKind

__all__ = ["MIN_HOST_MATCHED", "ProfiledSteps", "profiled_steps", "with_step_medians", "host_median_step_graph"]

# Below this share of the step's CPU tasks finding a partner, another step is not the same
# program (a first step that also compiled, a step that checkpointed) and says nothing here.
MIN_HOST_MATCHED = 0.9


@dataclass
class ProfiledSteps:
    """Per profiled step (rows; the graph's own step first): each CPU task's replay duration,
    each program-order lag between CPU tasks and each kernel's duration of its partner in that
    step (NaN: no partner, or not of that kind). `event`, `name`: each task's trace row and name;
    `src_event`, `dst_event`: each edge's ends' rows (what a predicted graph's tasks and gaps are
    found by)."""
    steps: list          # step numbers of the graph's trace; "RECORDING:N" for another recording
    task: np.ndarray        # (steps, n_tasks): host tasks
    lag: np.ndarray         # (steps, n_edges): host gaps
    kernel: np.ndarray      # (steps, n_tasks): kernels (GPU tasks but collectives)
    event: np.ndarray       # (n_tasks,)
    name: np.ndarray        # (n_tasks,)
    src_event: np.ndarray   # (n_edges,)
    dst_event: np.ndarray   # (n_edges,)

    @property
    def n_steps(self) -> int:
        return len(self.steps)

    def medians(self) -> tuple[np.ndarray, np.ndarray]:
        """Median over the steps of each host task and gap (NaN where no step has it), all scaled by one
        factor so that their sum is the median of the steps' own totals (`host_scale`)."""
        c = self.host_scale()
        return _nanmedian(self.task) * c, _nanmedian(self.lag) * c

    def host_scale(self) -> float:
        """The median step's host total over the sum of the per-item medians, over the tasks and gaps every
        step has. A host stall (preemption, a page fault) lands on a different op in each step, so the
        per-item median drops every step's stalls and its sum falls below every step's total (a CPU capture
        under load: 12.3 ms of host work against steps of 21.9-23.6 ms); scaled, the point keeps a step's
        total and sits inside the interval drawn from the steps (1 where there is nothing to scale)."""
        t = np.isfinite(self.task).all(axis=0)
        e = np.isfinite(self.lag).all(axis=0)
        if self.n_steps < 2 or not (t.any() or e.any()):
            return 1.0
        totals = self.task[:, t].sum(axis=1) + self.lag[:, e].sum(axis=1)
        items = np.median(self.task[:, t], axis=0).sum() + np.median(self.lag[:, e], axis=0).sum()
        return float(np.median(totals) / items) if items > 0 else 1.0

    def kernel_medians(self) -> np.ndarray:
        """Median over the steps of each kernel's duration (NaN where no step has it)."""
        return _nanmedian(self.kernel)

    def ratios(self) -> tuple[np.ndarray, np.ndarray]:
        """Each step's host work over the median (NaN where the step has no partner or the median is 0)."""
        mt, ml = self.medians()
        with np.errstate(invalid="ignore", divide="ignore"):
            return (np.where(mt > 0, self.task / mt, np.nan), np.where(ml > 0, self.lag / ml, np.nan))


def _nanmedian(a: np.ndarray) -> np.ndarray:
    out = np.full(a.shape[1], np.nan)
    seen = np.isfinite(a).any(axis=0)
    if seen.any():
        out[seen] = np.nanmedian(a[:, seen], axis=0)
    return out


def _host_edges(g: Graph) -> np.ndarray:
    cpu = g.kind == TaskKind.CPU
    return (g.cls == EdgeClass.INTRA_THREAD) & cpu[g.src] & cpu[g.dst]


def _kernels(g: Graph) -> np.ndarray:
    return (g.kind == TaskKind.GPU) & ~g.comm


def profiled_steps(graph: Graph, table: TraceTable, recordings: Sequence[Sequence[TraceTable]] = (),
                   **build) -> ProfiledSteps:
    """The host work and kernels of `graph` (one step of `table`'s rank) in every profiled step of
    the trace that is the same program (`MIN_HOST_MATCHED` of its CPU tasks paired), then in every
    profiled step of the same rank in each run of `recordings` (other recordings of the
    configuration: a host or a GPU that differs between recordings shows only across them).
    `build`: as `build_graph`."""
    others = [o for run in recordings for o in run if o.rank == table.rank]
    cpu = graph.kind == TaskKind.CPU
    kernels = _kernels(graph)
    host_edge = _host_edges(graph)
    own = graph.summary.get("step")
    rows_t = [np.where(cpu, graph.dur, np.nan)]
    rows_l = [np.where(host_edge, graph.lag, np.nan)]
    rows_k = [np.where(kernels, graph.dur, np.nan)]
    steps = [own]
    lent: set[int] = set()
    mine = TaskKeys.of_graph(graph)
    for label, source, number in _profiled_steps(table, others, own):
        try:
            other = build_graph(source, step=number, **build)
        except EmptyStepError:
            continue
        match = match_tasks(mine, TaskKeys.of_graph(other))
        paired = cpu & (match >= 0)
        if not cpu.any() or paired.sum() < MIN_HOST_MATCHED * cpu.sum():
            continue
        task = np.full(graph.n_tasks, np.nan)
        task[paired] = other.dur[match[paired]]
        kernel = np.full(graph.n_tasks, np.nan)
        same = kernels & (match >= 0)
        same[same] &= _kernels(other)[match[same]]
        kernel[same] = other.dur[match[same]]
        theirs = _host_edges(other)
        edges = {(int(a), int(b)): float(x) for a, b, x in zip(other.src[theirs], other.dst[theirs], other.lag[theirs])}
        lag = np.full(graph.n_edges, np.nan)
        for e in np.flatnonzero(host_edge & (match[graph.src] >= 0) & (match[graph.dst] >= 0)):
            x = edges.get((int(match[graph.src[e]]), int(match[graph.dst[e]])))
            if x is not None:
                lag[e] = x
        rows_t.append(task)
        rows_l.append(lag)
        rows_k.append(kernel)
        steps.append(label)
        lent.add(id(source))
    for t in others:
        if id(t) not in lent:
            raise ValueError(f"{t.path}: none of its profiled steps is the program of the base's step {own} "
                             f"(under {MIN_HOST_MATCHED:.0%} of its CPU ops paired), so it cannot lend host work or "
                             "kernels: give other recordings of the base's own configuration")
    return ProfiledSteps(steps=steps, task=np.array(rows_t), lag=np.array(rows_l), kernel=np.array(rows_k),
                         event=graph.event, name=graph.name,
                         src_event=graph.event[graph.src], dst_event=graph.event[graph.dst])


def _profiled_steps(table: TraceTable, others: Sequence[TraceTable], own):
    """(label, table, step number) of every profiled step but the graph's own: `table`'s labelled
    by number, each of `others`' by its recording's directory (or file) and number."""
    for s in find_steps(table):
        if s.number != own:
            yield s.number, table, s.number
    for t in others:
        where = Path(t.path)
        name = where.parent.name if where.parent.name else where.name
        for s in find_steps(t):
            yield f"{name}:{s.number}", t, s.number


def with_step_medians(graph: Graph, steps: ProfiledSteps, host: bool = True, kernels: bool = True) -> Graph:
    """`graph` with each CPU task's duration and each program-order lag between CPU tasks (`host`),
    and each kernel's duration (`kernels`), set to its median over `steps`; unchanged with one step.
    `summary["profiled_steps"]` says which steps and what they gave."""
    if steps.n_steps < 2 or not (host or kernels):
        return graph
    g = graph.copy()
    if host:
        mt, ml = steps.medians()
        t, e = np.isfinite(mt), np.isfinite(ml)
        g.dur[t] = mt[t]
        g.lag[e] = ml[e]
    if kernels:
        mk = steps.kernel_medians()
        k = np.isfinite(mk)
        g.dur[k] = mk[k]
    g.summary = {**g.summary, "profiled_steps": {"steps": [s if isinstance(s, str) else int(s) for s in steps.steps],
                                                 "host": host, "kernels": kernels}}
    return g


def host_median_step_graph(table: TraceTable, step, host: str, recordings=()) -> tuple[Graph, list]:
    """A CPU run's step graph and the steps its host work came from: with `host` "median", the median over its
    (and `recordings`') profiled steps (no kernels to take medians of), else the selected step's own."""
    graph = build_graph(table, step=step)
    steps = [graph.summary.get("step")]
    if host == "median":
        pairing = profiled_steps(graph, table, recordings)
        graph = with_step_medians(graph, pairing, kernels=False)
        steps = list(pairing.steps)
    return graph, steps
