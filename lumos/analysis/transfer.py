"""Transfer: replay one iteration's graph with the durations measured in another.

An unchanged replay reproduces its trace by construction (each measured gap
sits on the edge that explains it), so it says nothing about whether the
graph is right. Replaying the graph of step k with the task durations of step
k' and comparing with step k' as measured does: the durations change, the
structure and the gaps (edge lags, release times) stay step k's, and only a
graph whose dependencies are the real ones moves the timeline the way the
hardware did.

Matching (`lumos.graph.match.match_tasks`): tasks are paired per processor by aligning the two
name sequences in time order, as a diff aligns lines, carried-in GPU ops only with carried-in
ones, so a backlog of different length shifts nothing on its stream. A task
without a match keeps its own duration. What is transferred is the graph's
replay duration: for a call that waited for the GPU, the part after the wait
(`lumos.graph.timing`), so neither side's waiting is carried over.

Baselines the transfer is judged against (`transfer_pair`):
- same as step k: step k' takes step k's measured iteration;
- kernel-time ratio: step k's iteration x (GPU time of k' / GPU time of k),
  GPU time = the summed durations of the device ops (kernels, memcpy, memset)
  launched in each step;
- dPRO-style: the baseline's graph of step k (`lumos.baselines.dpro`) with
  the same per-stream matching applied to its GPU ops, its gaps kept.

`diff_attribution` splits T(B) - T(A) into what B's GPU durations, B's CPU
durations, their interaction and neither of them (dependencies, launch order)
explain, by replaying A's graph with B's durations.

Example
-------
>>> from lumos.trace import read_trace                         # doctest: +SKIP
>>> t = read_trace("trace.json.gz")                            # doctest: +SKIP
>>> r = transfer_pair(t, 3, t, 4)                              # doctest: +SKIP
>>> r.predicted_us, r.actual_us, r.matched_share               # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from lumos.baselines.dpro import DproGraph, build_dpro, replay_dpro
from lumos.graph import DEFAULT_GAP_THRESHOLD_US, Graph, build_graph
from lumos.graph.match import TaskKeys, match_tasks
from lumos.graph.model import EdgeClass, TaskKind
from lumos.trace import EmptyStepError, TraceTable
from lumos.trace.steps import Step

from .breakdown import relative_error_pct
from .replay import measured_breakdown, replay_graph, replayed_breakdown

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["DURATION_KINDS", "MIN_MATCHED_SHARE", "TaskKeys", "Transfer", "match_tasks", "transfer_durations",
           "transfer_pair", "transfer_steps", "StepModels", "diff_attribution", "gpu_op_changes", "NotSameJobError"]

DURATION_KINDS = ("all", "gpu", "cpu")
# Below this share of step k's device ops finding a partner, the two traces are not one
# job's iterations and a transfer would compare unrelated programs (measured: 0.94-1.0 between
# steps of one shipped trace, 0.03-0.25 between unrelated shipped traces).
MIN_MATCHED_SHARE = 0.5


class NotSameJobError(ValueError):
    """The two iterations share too few tasks (by processor, name and occurrence) to be one job's."""


def dpro_keys(d: DproGraph, table: TraceTable) -> TaskKeys:
    """dPRO nodes keyed by the stream they ran on in the trace (not by the baseline's queue)."""
    key = table.device[d.event].astype(np.int64) * (1 << 32) + (table.stream[d.event].astype(np.int64) & 0xFFFFFFFF)
    return TaskKeys(kind=np.full(len(d), TaskKind.GPU, np.int8), proc_key=key, carry=d.carry_in.astype(bool),
                    name=d.name, ts=d.ts, event=d.event)


def _kind_mask(kind: np.ndarray, durations: str) -> np.ndarray:
    if durations not in DURATION_KINDS:
        raise ValueError(f"durations must be one of {', '.join(DURATION_KINDS)}, not {durations!r}")
    if durations == "gpu":
        return kind == TaskKind.GPU
    if durations == "cpu":
        return kind == TaskKind.CPU
    return np.ones(len(kind), dtype=bool)


def transfer_durations(graph: Graph, source: Graph, durations: str = "all",
                       match: np.ndarray | None = None) -> Graph:
    """`graph` with the replay durations of its matched tasks taken from `source`; edges, lags
    and release times stay `graph`'s. `durations`: which tasks change (all, gpu, cpu)."""
    match = match_tasks(TaskKeys.of_graph(graph), TaskKeys.of_graph(source)) if match is None else match
    g = graph.copy()
    take = (match >= 0) & _kind_mask(graph.kind, durations)
    g.dur[take] = source.dur[match[take]]
    _peer_floors(g, graph, source, match, take)
    if durations != "cpu":
        _backlog(g, graph, source, match)
    if durations != "gpu":
        _host_gaps(g, source, match)
    return g


def _backlog(g: Graph, graph: Graph, source: Graph, match: np.ndarray) -> None:
    """The GPU work carried in from the step before is the source step's: a carried-in op
    without a partner there (the source's backlog was shorter) takes no time, and a pinned
    one starts at its partner's offset from the step start."""
    carry = (graph.kind == TaskKind.GPU) & ~graph.in_step
    shift = _window_shift(graph, source)
    if not np.any(carry) or shift is None:
        return
    g.dur[carry & (match < 0)] = 0.0
    pinned = carry & (match >= 0) & np.isfinite(graph.release)
    g.release[pinned] = source.ts[match[pinned]] + shift


def _window_shift(graph: Graph, source: Graph) -> float | None:
    """Step k's start minus the source step's: moves a source time to the same offset in step k."""
    mine, theirs = graph.summary.get("window_us"), source.summary.get("window_us")
    return None if mine is None or theirs is None else mine[0] - theirs[0]


def _thread_chains(graph: Graph) -> tuple[np.ndarray, np.ndarray]:
    """Per task: its program-order successor on its thread and the edge to it (-1: none)."""
    intra = np.flatnonzero(graph.cls == EdgeClass.INTRA_THREAD)
    nxt = np.full(graph.n_tasks, -1, dtype=np.int64)
    edge = np.full(graph.n_tasks, -1, dtype=np.int64)
    nxt[graph.src[intra]] = graph.dst[intra]
    edge[graph.src[intra]] = intra
    return nxt, edge


def _host_gaps(g: Graph, source: Graph, match: np.ndarray) -> None:
    """The untraced host time of the source step: the gaps (lags of the program-order edges;
    Python between ops, a data loader, a garbage-collector pause) between two CPU tasks that
    follow each other among the tasks with partners, on both sides, and the step thread's time
    before its first task and after its last (`step_thread` head and tail). Tasks of one step
    only (an op the other step did not run) are bridged: the source's gaps between the two
    partners replace step k's between the two tasks, spread over step k's edges in proportion
    (kept, a pause beside such an op stayed in step k's graph while the source's pause was
    added elsewhere); so are tasks of step k only at the end of its thread, where the source's
    thread ends after the same partner, and at its head (`_bridge_head`). Where the source ran tasks
    of its own before the first partner or after the last, their time (durations and gaps) joins
    the head or the tail (`_leading_time`, `_trailing_time`). The edges stay step k's; only their
    measured gaps move, as durations do."""
    nxt_g, edge_g = _thread_chains(g)
    nxt_s, edge_s = _thread_chains(source)
    has_partner = np.zeros(source.n_tasks, dtype=bool)
    has_partner[match[match >= 0]] = True
    cpu = g.kind == TaskKind.CPU
    for a in np.flatnonzero(cpu & (match >= 0) & (nxt_g >= 0)):
        edges, b = [], int(a)
        while True:  # step k: the edges up to the next task with a partner
            edges.append(int(edge_g[b]))
            b = int(nxt_g[b])
            if b < 0 or match[b] >= 0:
                break
        gaps, y = _source_gaps(source, int(match[a]), nxt_s, edge_s, has_partner)
        # b < 0: step k's thread ends in tasks the source did not run; where the source's ends after a's
        # partner too, its own tail replaces them (the last step of a profile may end in a device sync
        # after a pause the others never had: 1.76 s in resnet_1gpu's step 29)
        if y == (int(match[b]) if b >= 0 else -1):
            _spread(g, edges, gaps)
    mine_step, theirs = g.summary.get("step_thread"), source.summary.get("step_thread")
    if mine_step and theirs:
        first, first_s = int(mine_step["first_task"]), int(theirs["first_task"])
        _bridge_head(g, source, match, first, first_s, nxt_g, edge_g, nxt_s, edge_s, has_partner)
        lead = _leading_time(source, match, first, first_s, nxt_s, edge_s, has_partner)
        trail = _trailing_time(source, match, first, nxt_g, nxt_s, edge_s, has_partner)
        g.release[first] = mine_step["start_us"] + theirs["head_us"] + lead
        g.summary = {**g.summary, "step_thread": {**mine_step, "head_us": theirs["head_us"] + lead,
                                                  "tail_us": theirs["tail_us"] + trail}}


def _bridge_head(g: Graph, source: Graph, match: np.ndarray, first: int, first_s: int, nxt_g: np.ndarray,
                 edge_g: np.ndarray, nxt_s: np.ndarray, edge_s: np.ndarray, has_partner: np.ndarray) -> None:
    """Step k's tasks before its first task with a partner on the step thread (resnet_1gpu's step 23
    opens with a data loader's ops and a 262 ms stall; step 24 with the copy of its batch), bridged
    like those between two partners: the source's gaps from its own first task to the same partner
    replace step k's."""
    edges, b = [], first
    while match[b] < 0 and nxt_g[b] >= 0:
        edges.append(int(edge_g[b]))
        b = int(nxt_g[b])
    if not edges or match[b] < 0:
        return
    gaps, y = (0.0, first_s) if has_partner[first_s] else _source_gaps(source, first_s, nxt_s, edge_s, has_partner)
    if y == int(match[b]):
        _spread(g, edges, gaps)


def _leading_time(source: Graph, match: np.ndarray, first: int, first_s: int, nxt_s: np.ndarray,
                  edge_s: np.ndarray, has_partner: np.ndarray) -> float:
    """The source's time on tasks of its own before the partner of step k's first task (the loader,
    seen from step 24), to be added before that task; 0 where step k's first task has no partner."""
    if match[first] < 0:
        return 0.0
    t, y = _own_time(source, first_s, nxt_s, edge_s, has_partner)
    return t if y == int(match[first]) else 0.0


def _trailing_time(source: Graph, match: np.ndarray, first: int, nxt_g: np.ndarray, nxt_s: np.ndarray,
                   edge_s: np.ndarray, has_partner: np.ndarray) -> float:
    """The source's time on its step thread after the partner of step k's last task, where the source
    ran only tasks step k did not (resnet_1gpu's step 29 ends in a device sync after a 1.76 s pause);
    0 where step k's last task has no partner or the source runs on into tasks step k has."""
    b = first
    while nxt_g[b] >= 0:
        b = int(nxt_g[b])
    y = int(match[b])
    if y < 0 or nxt_s[y] < 0:
        return 0.0
    t, stop = _own_time(source, int(nxt_s[y]), nxt_s, edge_s, has_partner)
    return float(source.lag[edge_s[y]]) + t if stop < 0 else 0.0


def _own_time(source: Graph, y: int, nxt_s: np.ndarray, edge_s: np.ndarray,
              has_partner: np.ndarray) -> tuple[float, int]:
    """The source's time on its tasks without a partner from task `y` along its thread (their
    durations and the gaps after each), and the task it stopped at: the next with a partner, or -1
    at the thread's end."""
    t = 0.0
    while not has_partner[y]:
        t += float(source.dur[y])
        if nxt_s[y] < 0:
            return t, -1
        t += float(source.lag[edge_s[y]])
        y = int(nxt_s[y])
    return t, y


def _source_gaps(source: Graph, y: int, nxt_s: np.ndarray, edge_s: np.ndarray,
                 has_partner: np.ndarray) -> tuple[float, int]:
    """The source's host time from task `y` along its thread to the next task with a partner, and
    that task (-1: the thread ends first, its gaps to the end summed)."""
    gaps = 0.0
    while nxt_s[y] >= 0:
        gaps += float(source.lag[edge_s[y]])
        y = int(nxt_s[y])
        if has_partner[y]:
            return gaps, y
    return gaps, -1


def _spread(g: Graph, edges: list, gaps: float) -> None:
    """The source's `gaps` (us) over step k's `edges`, in proportion to their own lags (all on the
    first where they have none)."""
    mine = g.lag[edges]
    total = float(mine.sum())
    g.lag[edges] = mine * (gaps / total) if total > 0 else np.r_[gaps, np.zeros(len(edges) - 1)]


def _peer_floors(g: Graph, graph: Graph, source: Graph, match: np.ndarray, take: np.ndarray) -> None:
    """Collectives of a rank replayed without its peers: what the source step says about them.

    A collective kernel's measured duration holds its wait for the slowest peer, so it is
    short when this rank arrived late and long when it arrived early, while its end tracks
    the peers (in hta trace_diff, a SendRecv started 1.1 ms apart in two steps and ended
    22 us apart). The kernel therefore takes the shorter of its two measured durations (the
    closer to the transfer alone) and may not end before the source step's peers let it: the
    source kernel's end, at the same offset from the step start. The peers' timing is
    an input of the source step, like its durations.
    """
    comm = take & graph.comm & (graph.kind == TaskKind.GPU)
    shift = _window_shift(graph, source)
    if not np.any(comm) or shift is None:
        return
    m = match[comm]
    g.dur[comm] = np.minimum(graph.dur[comm], source.dur[m])
    floor = np.full(g.n_tasks, -np.inf) if g.finish_floor is None else g.finish_floor.copy()
    floor[comm] = source.end[m] + shift
    g.finish_floor = floor


def _gpu_time(g: Graph) -> float:
    ops = (g.kind == TaskKind.GPU) & g.in_step
    return float(np.sum(g.dur[ops]))


def _check_same_job(g: Graph, match: np.ndarray, what: str) -> None:
    """Refuse unrelated programs. Judged on the device ops when there are any: runtime calls
    and common CPU ops (`cudaLaunchKernel`, `aten::empty`) pair up between any two PyTorch
    jobs (a third of the tasks of unrelated shipped traces do), kernel names do not."""
    gpu = g.kind == TaskKind.GPU
    on, kind = (gpu, "device ops") if np.any(gpu) else (np.ones(len(match), bool), "tasks")
    share = float(np.mean(match[on] >= 0)) if np.any(on) else 0.0
    if share < MIN_MATCHED_SHARE:
        raise NotSameJobError(f"{what} do not look like iterations of one job: only {100 * share:.1f}% of the "
                              f"{kind} find a partner by thread/stream, name and occurrence "
                              f"(at least {100 * MIN_MATCHED_SHARE:.0f}% needed)")


@dataclass
class Transfer:
    """Step k's graph replayed with another step's durations, and the baselines beside it."""
    step: int | None
    source_step: int | None
    durations: str
    measured_us: float        # step k as measured
    replayed_us: float        # step k's graph replayed unchanged (equals measured_us on an exact graph)
    predicted_us: float       # step k's graph with the other step's durations
    actual_us: float          # the other step as measured
    matched_share: float      # share of step k's tasks that found a partner
    matched: dict = field(default_factory=dict)  # per kind: matched / total
    baselines: dict = field(default_factory=dict)  # name -> predicted iteration (us)
    graph: Graph | None = None

    @property
    def error_pct(self) -> float | None:
        return relative_error_pct(self.predicted_us, self.actual_us)

    def baseline_errors(self) -> dict[str, float | None]:
        return {k: relative_error_pct(v, self.actual_us) for k, v in self.baselines.items()}

    def as_dict(self) -> dict:
        r3 = lambda x: None if x is None else round(float(x), 3)  # noqa: E731
        r4 = lambda x: None if x is None else round(float(x), 4)  # noqa: E731
        return {"step": self.step, "durations_from_step": self.source_step, "durations": self.durations,
                "measured": {"iteration_us": r3(self.measured_us)},
                "replayed_unchanged": {"iteration_us": r3(self.replayed_us)},
                "predicted": {"iteration_us": r3(self.predicted_us)},
                "actual": {"iteration_us": r3(self.actual_us)},
                "error_pct": r4(self.error_pct), "matched_share": r4(self.matched_share),
                "matched": self.matched,
                "baselines": {k: {"iteration_us": r3(v), "error_pct": r4(relative_error_pct(v, self.actual_us))}
                              for k, v in self.baselines.items()}}


def _step_number(step) -> int | None:
    return step.number if isinstance(step, Step) else step


class StepModels:
    """Each step's Lumos graph and dPRO-style graph, built once (a series of pairs reuses them)."""

    def __init__(self, table: TraceTable, gap_threshold_us: float = DEFAULT_GAP_THRESHOLD_US):
        self.table = table
        self.gap_threshold_us = gap_threshold_us
        self._graphs: dict = {}
        self._dpro: dict = {}

    def graph(self, step) -> Graph:
        key = _step_number(step)
        if key not in self._graphs:
            self._graphs[key] = build_graph(self.table, step=step, gap_threshold_us=self.gap_threshold_us)
        return self._graphs[key]

    def dpro(self, step) -> DproGraph:
        key = _step_number(step)
        if key not in self._dpro:
            self._dpro[key] = build_dpro(self.table, step=step)
        return self._dpro[key]


def transfer_pair(table: TraceTable, step, source_table: TraceTable, source_step, durations: str = "all",
                  engine: str = "auto", gap_threshold_us: float = DEFAULT_GAP_THRESHOLD_US,
                  baselines: bool = True, require_same_job: bool = True,
                  models: tuple[StepModels, StepModels] | None = None, iteration: str = "step") -> Transfer:
    """Replay `step` of `table` with the durations of `source_step` of `source_table`.

    Baselines (when asked): `same_as_k`, `kernel_ratio`, `dpro` (dPRO-style graph of
    step k with the same transfer; it has no CPU side, so with `iteration='step'` step k's
    measured time outside its GPU span is added to its predicted span). Raises NotSameJobError when fewer than
    MIN_MATCHED_SHARE of step k's tasks match (unless `require_same_job` is False).
    `models` (target, source) reuses graphs already built for other pairs.
    """
    mk, mo = models or (StepModels(table, gap_threshold_us), StepModels(source_table, gap_threshold_us))
    g, src = mk.graph(step), mo.graph(source_step)
    match = match_tasks(TaskKeys.of_graph(g), TaskKeys.of_graph(src))
    share = float(np.mean(match >= 0)) if len(match) else 0.0
    if require_same_job:
        _check_same_job(g, match, f"{table.path} step {g.summary['step']} and {source_table.path} "
                               f"step {src.summary['step']}")
    matched = {}
    for kind in (TaskKind.CPU, TaskKind.GPU):
        on = g.kind == kind
        matched[kind.name.lower()] = f"{int(np.sum(match[on] >= 0))}/{int(np.sum(on))}"
    moved = transfer_durations(g, src, durations, match=match)
    pred = replay_graph(moved, engine=engine, iteration=iteration)
    unchanged = replay_graph(g, engine=engine, iteration=iteration)
    m_k = measured_breakdown(g, iteration)
    measured = m_k.iteration_us
    out = Transfer(step=g.summary["step"], source_step=src.summary["step"], durations=durations,
                   measured_us=measured, replayed_us=unchanged.replayed.iteration_us,
                   predicted_us=pred.replayed.iteration_us, actual_us=measured_breakdown(src, iteration).iteration_us,
                   matched_share=share, matched=matched, graph=moved)
    if baselines:
        gpu_k, gpu_o = _gpu_time(g), _gpu_time(src)
        outside = measured - m_k.gpu_span_us if m_k.gpu_span_us is not None else 0.0
        out.baselines = {"same_as_k": measured,
                         "kernel_ratio": measured * gpu_o / gpu_k if gpu_k else float("nan"),
                         "dpro": dpro_transfer(mk.dpro(step), table, mo.dpro(source_step), source_table,
                                               durations) + outside}
    return out


def dpro_with_durations(d: DproGraph, table: TraceTable, s: DproGraph, source_table: TraceTable,
                        durations: str = "all") -> DproGraph:
    """The dPRO-style graph `d` with graph `s`'s GPU op durations (the baseline has no CPU
    tasks, so `durations='cpu'` leaves it unchanged)."""
    if durations == "cpu":
        return d
    m = match_tasks(dpro_keys(d, table), dpro_keys(s, source_table))
    dur = d.dur.copy()
    dur[m >= 0] = s.dur[m[m >= 0]]
    return dataclasses.replace(d, dur=dur)


def dpro_transfer(d: DproGraph, table: TraceTable, s: DproGraph, source_table: TraceTable,
                  durations: str = "all") -> float:
    """The dPRO-style baseline's iteration (its GPU span) with the other step's durations."""
    d = dpro_with_durations(d, table, s, source_table, durations)
    return replayed_breakdown(d.to_graph(), replay_dpro(d), "gpu").iteration_us


TRANSFER_COLUMNS = ("step_from", "step_to", "measured_ms", "actual_ms", "lumos_ms", "lumos_err_pct", "dpro_err_pct",
                    "same_as_k_err_pct", "kernel_ratio_err_pct", "matched_share")


def transfer_steps(table: TraceTable, steps: list[int] | None = None, engine: str = "auto",
                   iteration: str = "step") -> pd.DataFrame:
    """Every consecutive pair of `steps` (default: the trace's steps, the first left out as
    warm-up when there are 3 or more), both directions: one row per prediction. Steps with
    nothing to replay (a stub the profiler cut) are left out."""
    import pandas as pd   # here, not at import: `lumos replay` needs none of it
    from lumos.trace.steps import find_steps
    if steps is None:
        steps = [s.number for s in find_steps(table)]
        if len(steps) >= 3:
            steps = steps[1:]
    models = StepModels(table)
    usable = []
    for s in steps:
        try:
            models.graph(s)
            usable.append(s)
        except EmptyStepError:
            continue  # a stub step (the profiler stopped): nothing to transfer to or from
    steps = usable
    rows = []
    for a, b in zip(steps[:-1], steps[1:]):
        for k, o in ((a, b), (b, a)):
            r = transfer_pair(table, k, table, o, engine=engine, models=(models, models), iteration=iteration)
            e = r.baseline_errors()
            rows.append({"step_from": k, "step_to": o, "measured_ms": r.measured_us / 1e3,
                         "actual_ms": r.actual_us / 1e3, "lumos_ms": r.predicted_us / 1e3,
                         "lumos_err_pct": r.error_pct, "dpro_err_pct": e["dpro"],
                         "same_as_k_err_pct": e["same_as_k"], "kernel_ratio_err_pct": e["kernel_ratio"],
                         "matched_share": r.matched_share})
    return pd.DataFrame(rows, columns=TRANSFER_COLUMNS)


# -- lumos diff ----------------------------------------------------------------------
PARTS = ("gpu", "cpu", "interaction", "unexplained")


def diff_attribution(a: TraceTable, step_a, b: TraceTable, step_b, engine: str = "auto",
                     gap_threshold_us: float = DEFAULT_GAP_THRESHOLD_US, top: int = 5,
                     iteration: str = "step") -> dict:
    """T(B) - T(A) split into parts that add up to it exactly.

    gpu = T(A's graph, B's GPU durations) - T(A); cpu = the same with B's CPU
    durations; unexplained = T(B) - T(A's graph, all of B's durations) (what
    the durations do not explain: dependencies, launch order); interaction =
    the rest. T(A), T(B) are the measured iterations.
    """
    ga = build_graph(a, step=step_a, gap_threshold_us=gap_threshold_us)
    gb = build_graph(b, step=step_b, gap_threshold_us=gap_threshold_us)
    match = match_tasks(TaskKeys.of_graph(ga), TaskKeys.of_graph(gb))
    share = float(np.mean(match >= 0)) if len(match) else 0.0
    _check_same_job(ga, match, f"{a.path} step {ga.summary['step']} and {b.path} step {gb.summary['step']}")
    t_a = measured_breakdown(ga, iteration).iteration_us
    t_b = measured_breakdown(gb, iteration).iteration_us
    t = {k: replay_graph(transfer_durations(ga, gb, k, match=match), engine=engine,
                         iteration=iteration).replayed.iteration_us
         for k in DURATION_KINDS}
    t_a_replayed = replay_graph(ga, engine=engine, iteration=iteration).replayed.iteration_us
    gpu = t["gpu"] - t_a
    cpu = t["cpu"] - t_a
    unexplained = t_b - t["all"]
    interaction = t["all"] - t["gpu"] - t["cpu"] + t_a
    parts = {"gpu": gpu, "cpu": cpu, "interaction": interaction, "unexplained": unexplained}
    return {
        "a": {"trace": a.path, "step": ga.summary["step"], "iteration_us": round(t_a, 3),
              "replayed_us": round(t_a_replayed, 3)},
        "b": {"trace": b.path, "step": gb.summary["step"], "iteration_us": round(t_b, 3)},
        "difference_us": round(t_b - t_a, 3),
        "parts_us": {k: round(v, 3) for k, v in parts.items()},
        "parts_pct_of_a": {k: (round(100 * v / t_a, 3) if t_a else None) for k, v in parts.items()},
        "replayed_us": {f"a_graph_b_{k}": round(v, 3) for k, v in t.items()},
        "matched_share": round(share, 4),
        "top_gpu_ops": gpu_op_changes(ga, gb, top),
        "_exact": {"t_a": t_a, "t_b": t_b, **{k: v for k, v in parts.items()}},
    }


def gpu_op_changes(ga: Graph, gb: Graph, top: int = 5) -> list[dict]:
    """Device ops (kernels, memcpy, memset) by name whose summed duration in the step changed most."""
    import pandas as pd   # here, not at import: `lumos replay` needs none of it
    def totals(g: Graph) -> pd.DataFrame:
        ops = (g.kind == TaskKind.GPU) & g.in_step
        return (pd.DataFrame({"name": g.name[ops], "dur": g.dur[ops]})
                .groupby("name").agg(total=("dur", "sum"), count=("dur", "size")))
    ta, tb = totals(ga), totals(gb)
    j = ta.add_suffix("_a").join(tb.add_suffix("_b"), how="outer").fillna(0.0)
    j["change"] = j["total_b"] - j["total_a"]
    j = j.reindex(j["change"].abs().sort_values(ascending=False, kind="stable").index).head(top)
    return [{"name": str(n), "a_us": round(float(r.total_a), 3), "b_us": round(float(r.total_b), 3),
             "change_us": round(float(r.change), 3), "count_a": int(r.count_a), "count_b": int(r.count_b)}
            for n, r in j.iterrows()]
