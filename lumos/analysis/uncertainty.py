"""Monte Carlo replays: an interval around a replay or a prediction, and whether it holds.

`monte_carlo` replays a graph N times, each time with durations and lags drawn
from a fitted duration model (`lumos.analysis.spread`, sampled by
`lumos.sim.sampling`), and keeps each sample's breakdown; `summarize` turns
the samples into the median and the 50/90/95% central intervals of the
iteration time and of each component. The random numbers come from one
`numpy.random.Generator(PCG64(seed))`, drawn sample by sample, so a seed
fixes the result and the compiled path (`engine='compiled'`) and the plain
one (`engine='reference'`: Python sampler, reference replay, `breakdown`)
see the same numbers and give the same samples (the tests hold them equal).

`FastBreakdown` is `breakdown` with the two unions done by a k-way merge of
the streams (each stream's ops are already in start order after a replay) and
the overlap compiled: the same floating-point operations in the same order,
so the same numbers, at a fraction of the cost (the sort dominated).

`coverage_by_level` is the arithmetic the pipeline needs: the share of actual
values inside their intervals at each nominal level. `other_iterations`
replays one step of a real trace with samples and reports the share of the
trace's other profiled steps inside the 90% interval.

Model, default N and the measured coverage: docs/intervals.md.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Sequence

import numpy as np

from lumos import intervals
from lumos.graph import build_graph
from lumos.graph.model import Graph, TaskKind
from lumos.jit import njit
from lumos.sim import prepare
from lumos.sim.sampling import DurationModel, draws, sample_compiled, sample_reference, with_host_steps, with_peers
from lumos.trace import EmptyStepError, TraceTable, find_steps

from .breakdown import METRICS, Breakdown, breakdown
from .replay import _window
from .spread import FitGroup, Spread, fit_spread, lag_keys, launching_ops, task_keys
from .statistics import coverage, prediction_interval

__all__ = ["DEFAULT_SAMPLES", "LEVELS", "METRICS", "FastBreakdown", "monte_carlo", "summarize",
           "fit_tables", "replay_interval", "coverage_by_level", "other_iterations", "format_interval",
           "predict_interval", "host_step_ratios"]

# Samples per interval: at 2,000 (and at 1,000) the 95% bounds of two seeds differ by at most 0.34%
# of the median on the shipped real traces with several steps or ranks (docs/intervals.md,
# `python benchmarks/bench_intervals.py --stability --samples 2000`).
DEFAULT_SAMPLES = 2000
LEVELS = (0.5, 0.9, 0.95)


# -- the breakdown of many timelines of one graph -----------------------------------------------
@njit(cache=True)
def _union_runs(start, end, ops, run_ptr, lo, hi, out_s, out_e):
    """Union of the ops' intervals clipped to [lo, hi], merging runs (streams) whose ops are in
    start order; -1 when a run is not. The same intervals as `intervals.union(*intervals.clip(..))`."""
    k = len(run_ptr) - 1
    for r in range(k):
        for p in range(run_ptr[r] + 1, run_ptr[r + 1]):
            if start[ops[p]] < start[ops[p - 1]]:
                return -1
    pos = run_ptr[:-1].copy()
    n_out = 0
    while True:
        best, bs = -1, np.inf
        for r in range(k):
            p, stop = pos[r], run_ptr[r + 1]
            while p < stop and min(end[ops[p]], hi) <= max(start[ops[p]], lo):
                p += 1
            pos[r] = p
            if p < stop:
                s = max(start[ops[p]], lo)
                if best < 0 or s < bs:
                    best, bs = r, s
        if best < 0:
            return n_out
        e = min(end[ops[pos[best]]], hi)
        pos[best] += 1
        if n_out == 0 or bs > out_e[n_out - 1]:
            out_s[n_out], out_e[n_out] = bs, e
            n_out += 1
        elif e > out_e[n_out - 1]:
            out_e[n_out - 1] = e


_overlap = njit(cache=True)(intervals.intersection_length)


class FastBreakdown:
    """`replayed_breakdown` for many schedules of one graph; equal to it number for number."""

    def __init__(self, graph: Graph, iteration: str = "step"):
        self.graph, self.iteration = graph, iteration
        gpu = graph.kind == TaskKind.GPU
        self.gpu = gpu
        a = prepare(graph)
        self.runs = {}
        for name, mask in (("comp", gpu & ~graph.comm), ("comm", gpu & graph.comm)):
            ops = a.stream_ops[mask[a.stream_ops]]
            counts = np.bincount(a.proc[ops], minlength=a.n_procs)
            self.runs[name] = (ops.astype(np.int64), np.concatenate([[0], np.cumsum(counts)]).astype(np.int64))
        self.buf = np.empty((4, max(1, int(gpu.sum()))))

    def _union(self, which, start, end, lo, hi, out_s, out_e):
        ops, ptr = self.runs[which]
        k = _union_runs(start, end, ops, ptr, lo, hi, out_s, out_e)
        if k < 0:
            m = self.gpu & (self.graph.comm if which == "comm" else ~self.graph.comm)
            return intervals.union(*intervals.clip(start[m], end[m], lo, hi))
        return out_s[:k], out_e[:k]

    def __call__(self, start: np.ndarray, end: np.ndarray) -> Breakdown:
        g = self.graph
        b = self.buf

        def unions(lo, hi):
            return (self._union("comp", start, end, lo, hi, b[0], b[1]),
                    self._union("comm", start, end, lo, hi, b[2], b[3]))

        return breakdown(start, end, self.gpu, g.comm, g.in_step, window=_window(g, start, end, self.iteration),
                         unions=unions, overlap=_overlap)


# -- Monte Carlo --------------------------------------------------------------------------------
def monte_carlo(graph: Graph, model: DurationModel, samples: int, seed: int = 0, engine: str = "compiled",
                measure: Callable[[np.ndarray, np.ndarray], Breakdown] | None = None,
                iteration: str = "step", arrivals: tuple | None = None) -> np.ndarray:
    """(samples, 5) array: iteration time and the four components of each sampled replay.

    `measure(start, end)` turns a schedule into a breakdown (default: the rank's replayed
    breakdown over `iteration`). engine 'compiled': numba sampler and replay core;
    'reference': the plain-Python sampler and reference replay (small graphs). `arrivals`
    (tasks, anchors, offsets; `lumos.predict.peer_waits`): each of those tasks ends no earlier
    than its anchor's end in the same sample + offset + its sampled duration, settled by
    replaying the sample again (at most `ARRIVAL_ROUNDS` more times); the graph's own floors of
    those tasks, the point replay's, are not used."""
    from lumos.sim import SimulationError
    from lumos.sim.compiled import simulate_compiled
    from lumos.sim.reference import simulate_reference

    arrays = prepare(graph)
    order = np.argsort(graph.src, kind="stable")
    compiled = engine != "reference"
    if measure is None:
        measure = FastBreakdown(graph, iteration) if compiled else (
            lambda s, e: breakdown(s, e, graph.kind == TaskKind.GPU, graph.comm, graph.in_step,
                                   window=_window(graph, s, e, iteration)))
    run = simulate_compiled if compiled else simulate_reference
    if model.has_peers and model.peer_at is None:
        start, end = run(arrays)[:2]
        model = with_peers(model, start, end, (graph.kind == TaskKind.GPU) & ~graph.comm)
    rng = np.random.Generator(np.random.PCG64(seed))
    out = np.empty((samples, len(METRICS)))
    buf = (np.empty(graph.n_tasks), np.empty(graph.n_edges), np.empty(graph.n_tasks)) if compiled else None
    graph_floor = arrays.floor
    if arrivals is not None and graph_floor is not None:
        graph_floor = graph_floor.copy()
        graph_floor[arrivals[0]] = -np.inf
    for k in range(samples):
        u, f = draws(rng, model)
        dur, lag, floor = sample_compiled(model, u, f, buf) if compiled else sample_reference(model, u, f)
        if floor is not None and graph_floor is not None:
            floor = np.maximum(floor, graph_floor)
        sample = replace(arrays, dur=dur, out_lag=lag[order], floor=graph_floor if floor is None else floor)
        start, end, done, _ = run(sample)
        if arrivals is not None:
            start, end, done = _settle_arrivals(run, sample, arrivals, end, (start, end, done))
        if not done.all():
            stuck = np.flatnonzero(~done)
            raise SimulationError([f"#{i} {graph.name[i]}" for i in stuck[:8]], len(stuck), graph.n_tasks)
        bd = measure(start, end)
        out[k] = [getattr(bd, m) for m in METRICS]
    return out


ARRIVAL_ROUNDS = 10


def _settle_arrivals(run, sample, arrivals, end, result):
    """Replay one sample with its anchored tasks' end floors at their anchors' ends in this sample
    (`monte_carlo`'s `arrivals`), until no floor moves by more than 0.5 us."""
    tasks, anchors, offsets = arrivals
    base = np.full(len(sample.dur), -np.inf) if sample.floor is None else sample.floor
    floor = base.copy()
    for _ in range(ARRIVAL_ROUNDS):
        new = np.maximum(base[tasks], end[anchors] + offsets + sample.dur[tasks])
        if np.all(np.abs(new - floor[tasks]) <= 0.5):
            break
        floor = floor.copy()
        floor[tasks] = new
        result = run(replace(sample, floor=floor))[:3]
        end = result[1]
    return result


def summarize(samples: np.ndarray, seed: int) -> dict:
    """The `interval` JSON: per metric its median and the central intervals at `LEVELS`."""
    doc = {}
    for j, m in enumerate(METRICS):
        x = samples[:, j]
        row = {"median": round(float(np.median(x)), 3)}
        for level in LEVELS:
            lo, hi = prediction_interval(x, level)
            row[f"{round(100 * level)}"] = [round(lo, 3), round(hi, 3)]
        doc[m] = row
    doc["samples"] = int(len(samples))
    doc["seed"] = int(seed)
    return doc


def format_interval(doc: dict, indent: str = "  ") -> str:
    """Table lines for an `interval` document: per metric, median and the 90% interval, in ms."""
    lines = [f"{indent}interval ({doc['samples']} sampled replays, seed {doc['seed']}): median [90% interval] ms"]
    for m in METRICS:
        r = doc[m]
        lo, hi = r["90"]
        lines.append(f"{indent}  {m[:-3].replace('_', ' '):<18}{r['median'] / 1e3:>12.3f}  "
                     f"[{lo / 1e3:.3f}, {hi / 1e3:.3f}]")
    return "\n".join(lines)


# -- fitting on a trace and replaying with an interval ------------------------------------------
def step_graphs(table: TraceTable, **build) -> list[Graph]:
    """The graph of every profiled step of a trace that has one (stubs skipped)."""
    graphs = []
    for s in find_steps(table):
        try:
            graphs.append(build_graph(table, step=s.number, **build))
        except EmptyStepError:
            continue
    return graphs


def fit_tables(tables: Sequence[TraceTable], **build) -> Spread:
    """Fit the duration model on every profiled step of every rank."""
    return fit_spread([group for t in tables for group in _fit_groups(t, step_graphs(t, **build))])


def _fit_groups(table: TraceTable, graphs: Sequence[Graph]) -> list[FitGroup]:
    launching = launching_ops(table)  # once per table, not once per step
    return [FitGroup(g, task_keys(g, table, launching), lag_keys(g), table.rank) for g in graphs]


def replay_interval(graph: Graph, table: TraceTable | None, spread: Spread, samples: int, seed: int = 0,
                    iteration: str = "step", engine: str = "compiled") -> dict:
    """The `interval` document of one rank's replay."""
    model = spread.model(graph, task_keys(graph, table), lag_keys(graph), own=True)
    return summarize(monte_carlo(graph, model, samples, seed, engine=engine, iteration=iteration), seed)


# -- does it hold --------------------------------------------------------------------------------
def coverage_by_level(actuals: Sequence[float], interval_docs: Sequence[dict],
                      metric: str = "iteration_us") -> dict[str, float]:
    """Share of actual values inside their `interval` documents' bounds, per nominal level
    ('50', '90', '95'). Bounds are inclusive."""
    out = {}
    for level in LEVELS:
        key = f"{round(100 * level)}"
        bounds = [d[metric][key] for d in interval_docs]
        out[key] = coverage(actuals, [b[0] for b in bounds], [b[1] for b in bounds])
    return out


def other_iterations(table: TraceTable, step: int | None = None, samples: int = DEFAULT_SAMPLES,
                     seed: int = 0, iteration: str = "step") -> dict:
    """Replay one step with samples; the share of the trace's OTHER profiled steps (their step
    periods, or GPU spans with iteration='gpu') inside the 90% interval, and its width."""
    from .replay import measured_breakdown

    graphs = step_graphs(table)
    spread = fit_spread(_fit_groups(table, graphs))
    graph = build_graph(table, step=step)
    doc = replay_interval(graph, table, spread, samples, seed, iteration=iteration)
    chosen = graph.summary["step"]
    others = [measured_breakdown(g, iteration).iteration_us for g in graphs if g.summary["step"] != chosen]
    lo, hi = doc["iteration_us"]["90"]
    med = doc["iteration_us"]["median"]
    return {"trace": table.path, "step": chosen, "steps": [g.summary["step"] for g in graphs],
            "interval": doc, "width_pct_90": round(100 * (hi - lo) / med, 3) if med else None,
            "others_us": [round(x, 3) for x in others],
            "inside_90": round(coverage(others, [lo] * len(others), [hi] * len(others)), 4) if others else None,
            "spread": spread.summary()}


# -- what the CLI calls ---------------------------------------------------------------------------
def attach_intervals(doc: dict, ranks, tables: Sequence[TraceTable], samples: int, seed: int,
                     iteration: str = "step", engine: str = "compiled") -> list[str]:
    """Give a `lumos replay` JSON document its `interval` (the critical rank's at the top, each
    rank's under `ranks`), the model fitted on every profiled step of every rank; returns the
    table lines."""
    spread = fit_tables(tables)
    by_rank = {t.rank: t for t in tables}
    docs = {r.rank: replay_interval(r.graph, by_rank.get(r.rank), spread, samples, seed, iteration=iteration,
                                    engine=engine) for r in ranks}
    lines = []
    for r in ranks:
        lines.append(f"rank {r.rank}:" if len(ranks) > 1 else "")
        lines.append(format_interval(docs[r.rank]))
    if "ranks" in doc:
        for entry in doc["ranks"]:
            entry["interval"] = docs[entry["rank"]]
        doc["interval"] = docs[doc["critical_rank"]]
    else:
        doc["interval"] = docs[ranks[0].rank]
    doc["interval_model"] = spread.summary()
    return [x for x in lines if x]


def predict_interval(base_tables: Sequence[TraceTable], graph: Graph, instances, samples: int, seed: int,
                     measure: Callable[[np.ndarray, np.ndarray], Breakdown], engine: str = "compiled",
                     host_steps: dict | None = None,
                     clock_steps: tuple[np.ndarray, Sequence[float]] | None = None,
                     arrivals: tuple | None = None) -> dict:
    """The `interval` document of a prediction: the predicted graph's durations drawn with the
    spread fitted on the base run, each task centred on its predicted duration and mapped to a
    base class by name (unknown names: its category's pooled spread); the members of one
    collective instance (`instances`) share their transfer draw. `host_steps` (base rank ->
    `ProfiledSteps`, the base plan's): each sample's host work that of one profiled step of the base,
    drawn at random (`host_step_ratios`). `clock_steps` (compute kernel mask, per profiled step of
    the target its clock over the mean the point uses): each sample's compute kernels at the clock
    of one profiled step, drawn with the host step (every pair equally likely). `arrivals`: the
    peers' arrivals of `--peer-waits anchored`, settled in each sample (`monte_carlo`)."""
    model = fit_tables(base_tables).model(graph, own=False, instances=instances)
    host = host_step_ratios(host_steps, graph) if host_steps else None
    levels = [] if clock_steps is None else list(clock_steps[1])
    if host is None and len(levels) < 2:
        return summarize(monte_carlo(graph, model, samples, seed, engine=engine, measure=measure,
                                     arrivals=arrivals), seed)
    task, lag = host if host is not None else (np.full((1, graph.n_tasks), np.nan), np.full((1, graph.n_edges), np.nan))
    drop = np.isfinite(task).any(axis=0)
    if len(levels) >= 2:   # every (host step, clock step) pair a row
        task, lag = np.repeat(task, len(levels), axis=0), np.repeat(lag, len(levels), axis=0)
        task[:, clock_steps[0]] = np.tile(np.asarray(levels, np.float64), len(task) // len(levels))[:, None]
    model = with_host_steps(model, task, lag, drop_factor=drop)
    return summarize(monte_carlo(graph, model, samples, seed, engine=engine, measure=measure, arrivals=arrivals),
                     seed)


def host_step_ratios(host_steps: dict, graph: Graph) -> tuple[np.ndarray, np.ndarray] | None:
    """(steps, tasks) and (steps, edges) of `graph` (predicted from a base whose ranks' pairings
    are `host_steps`, rank -> `ProfiledSteps`): each profiled step's host work over the median, for the
    tasks and program-order gaps that come from a base rank's step: by their base rank and trace
    row (a rebuilt pipeline's `base_rank` / `base_event`, else their own) and the same name; a gap by
    its two ends'. None: no base rank was profiled for two steps of one program. A rank with fewer
    steps than another reads 1 in the rows it lacks."""
    n = graph.n_tasks
    origin_rank, origin_event = graph.rank.astype(np.int64), graph.event.astype(np.int64)
    if "base_event" in graph.summary:   # a rebuild: its tasks' rows in the base, then tasks added since
        ev, rk = graph.summary["base_event"], graph.summary["base_rank"]
        origin_event = np.r_[ev, np.full(n - len(ev), -1)][:n]
        origin_rank = np.r_[rk, np.full(n - len(rk), -1)][:n]
    found = {r: h for r, h in host_steps.items() if h.n_steps >= 2 and r in set(origin_rank.tolist())}
    if not found:
        return None
    n_steps = max(h.n_steps for h in found.values())
    task = np.full((n_steps, n), np.nan)
    lag = np.full((n_steps, graph.n_edges), np.nan)
    for rank, h in found.items():
        tr, lr = h.ratios()
        col = {int(e): i for i, e in enumerate(h.event) if e >= 0}
        mine = np.flatnonzero((origin_rank == rank) & (origin_event >= 0))
        src = np.array([col.get(int(e), -1) for e in origin_event[mine]], dtype=np.int64)
        ok = src >= 0
        ok[ok] = graph.name[mine[ok]] == h.name[src[ok]]   # a row of this rank's trace, the same op
        task[:len(tr), mine[ok]] = tr[:, src[ok]]
        where = {(int(a), int(b)): j for j, (a, b) in enumerate(zip(h.src_event, h.dst_event))
                 if np.isfinite(lr[:, j]).any()}
        ends = np.flatnonzero((origin_rank[graph.src] == rank) & (origin_rank[graph.dst] == rank))
        for j in ends:
            k = where.get((int(origin_event[graph.src[j]]), int(origin_event[graph.dst[j]])))
            if k is not None:
                lag[:len(lr), j] = lr[:, k]
    return task, lag
