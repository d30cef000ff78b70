"""An EP change of a CPU MoE run over host collectives (gloo), on one rank's step graph.

The run's ranks are its EP (= DP) ranks, each training its own micro-batch; each holds E / EP of the
E experts. A CPU capture's step graph (`lumos.graph.build_graph`) replays one rank's own timeline: its
collectives are its gloo worker thread's ranges, which the main thread waits for (the graph's gap rule
joins them), so each stands for the exchange and for the wait for every peer. From EP a to EP b
(`change_ep_host`), with what `lumos.model.moe_host` reads of the step:

- experts: the rank then holds n_b = E / b experts instead of n_a = E / a, and each of them gets its
  share of b ranks' tokens x top-k (the rows per expert grow with b at a fixed micro-batch per rank). Each
  base expert's work (its forward range and the backward of its ops) stands for the target experts
  that take its place: the first n_b of them where n_b <= n_a (the rest of no length), else each for
  n_b / n_a of them. Each of its ops, and each gap inside one (`lumos.model.host_gaps`: a GEMM's own
  work lies between its children), is re-timed from the expert's rows to each target expert's by the
  compute model fitted on the base's own ops (`lumos.durations.compute`: GEMMs by their FLOPs, the rest
  by elements with the fitted fixed part); an op or gap whose shapes do not hold the rows (a weight's
  transpose, the Python between ops) runs once per target expert, as measured.
- the optimizer: each routed expert parameter's update (single-tensor AdamW) x n_b / n_a;
- the rest of the rank's host work: the same ops at any EP, but run beside more (or fewer) processes
  on the host's cores: every CPU op and every gap x the calibration's slowdown
  (`lumos.durations.moe_host`);
- the collectives: each gloo worker range the calibration's mean for its kind at EP b (the token
  exchanges by pass and place, the counts' all-to-all, each all-reduce by its message). The regroup of
  the received rows (E / b experts x b ranks = E chunks at any EP) and the counts' size (E) do not change.

A task taken out keeps its place with no length, so every other task, edge and row is unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lumos.durations.compute import ComputeModel
from lumos.durations.moe_host import HostMoECosts
from lumos.graph.model import EdgeClass, Graph, TaskKind
from lumos.model.host_gaps import HostGaps
from lumos.model.moe_host import HostMoEStep, waiter
from lumos.model.ops import op_class
from lumos.trace import TraceTable

__all__ = ["EPChange", "change_ep_host", "stands_for"]

SLOWDOWN_WORDS = {"dense_forward": "the forward's dense work",
                  "shared_host": "the main thread's work but the collectives, the experts and their optimizer updates"}


@dataclass(frozen=True)
class EPChange:
    """The change asked: EP a -> b over E experts, and the rows each target expert takes."""
    base_ep: int
    target_ep: int
    experts: int
    rows: dict            # (layer, global expert index) -> rows at the target's EP

    @property
    def base_local(self) -> int:
        return self.experts // self.base_ep

    @property
    def target_local(self) -> int:
        return self.experts // self.target_ep


def stands_for(local: int, n_base: int, n_target: int) -> list[int]:
    """The target's local experts that base local expert `local` stands for (`change_ep_host`)."""
    if n_target <= n_base:
        return [local] if local < n_target else []
    return list(range(local, n_target, n_base))


def _holds(dims, value: int) -> bool:
    """Whether any tensor of an op's Input Dims has a dimension `value`."""
    for d in dims or ():
        if isinstance(d, (list, tuple)):
            if any(isinstance(x, (list, tuple)) for x in d):
                if _holds(d, value):
                    return True
            elif value in d:
                return True
    return False


def _retime(comp: ComputeModel, dur: float, name, dims, rows: int, new_rows: float) -> float:
    if name is None or rows <= 0 or not _holds(dims, rows):
        return dur
    return comp.scale(dur, op_class(str(name)), new_rows / rows)


def _wait_edges(out: Graph, table: TraceTable, reading: HostMoEStep, main: np.ndarray, main_ts: np.ndarray,
                task_of: dict) -> tuple[int, int]:
    """Join each gloo worker range to the main-thread op that waited for it, in place: the first op after the
    issuing one where none started before the range ended (`lumos.model.moe_host.waiter`: a collective waited
    for as soon as it is issued, as `all_to_all_single` and the capture's gradient buckets do; one the main
    thread ran on beside keeps the graph's own edges). The graph's gap rule joins only waits above its
    threshold, and a collective the target lengthens must hold the main thread whatever it took in the base.
    The edge's lag is the measured wake-up. The program-order gap into that op is the wait itself (a median
    over the profiled steps holds other steps' waits there), not host work: it goes; the issuing op keeps
    no more than its enqueue (its start to the worker's, in the step read), a collective that ended inside
    it having been waited for there. How many edges were added, and how many gaps taken out."""
    order = np.argsort(main_ts, kind="stable")
    tasks, starts = main[order], main_ts[order]
    have = set(zip(out.src.tolist(), out.dst.tolist()))
    new, waiting = [], []
    for x in reading.exchanges:
        w = task_of.get(int(x.worker))
        if w is None:
            continue
        issued = float(table.ts[x.row] + table.dur[x.row])
        w_end = float(table.ts[x.worker] + table.dur[x.worker])
        i = waiter(starts, issued, w_end)
        if i < 0:
            continue
        waiting.append(int(tasks[i]))
        c = task_of.get(int(x.row))
        if c is not None:   # the issuing op's own work is the enqueue; a median may hold a wait inside it
            out.dur[c] = min(float(out.dur[c]), max(float(table.ts[x.worker] - table.ts[x.row]), 0.0))
        if (w, int(tasks[i])) not in have:
            new.append((w, int(tasks[i]), max(float(starts[i]) - max(w_end, issued), 0.0)))
    if new:
        out.src = np.concatenate([out.src, np.array([e[0] for e in new], np.int64)])
        out.dst = np.concatenate([out.dst, np.array([e[1] for e in new], np.int64)])
        out.cls = np.concatenate([out.cls, np.full(len(new), EdgeClass.INTER_THREAD, dtype=out.cls.dtype)])
        out.lag = np.concatenate([out.lag, np.array([e[2] for e in new])])
        out.inferred = np.concatenate([out.inferred, np.ones(len(new), dtype=bool)])
    into = np.zeros(out.n_tasks, dtype=bool)
    into[waiting] = True
    gaps = np.flatnonzero((out.cls == EdgeClass.INTRA_THREAD) & into[out.dst])
    out.lag[gaps] = 0.0
    return len(new), len(gaps)


def change_ep_host(graph: Graph, table: TraceTable, reading: HostMoEStep, change: EPChange, comp: ComputeModel,
                   gaps: HostGaps, costs: HostMoECosts) -> tuple[Graph, dict, list[str]]:
    """`graph` (one step of `table`, one rank of a CPU MoE run at `change.base_ep`) at `change.target_ep`
    (module docstring); also what was changed, and the notes."""
    if costs.base_ep != change.base_ep or costs.target_ep != change.target_ep:
        raise ValueError(f"{table.path}: EP {change.base_ep} -> {change.target_ep} asked, but the calibration "
                         f"recordings run at EP {costs.base_ep} and {costs.target_ep}")
    out = graph.copy()
    out.dur, out.lag = out.dur.copy(), out.lag.copy()
    ev = graph.event
    cpu = np.flatnonzero((graph.kind == TaskKind.CPU) & (ev >= 0) & (graph.rank == table.rank))
    main = cpu[table.tid[ev[cpu]] == reading.main_tid]
    main_ts = table.ts[ev[main]]
    in_thread = graph.cls == EdgeClass.INTRA_THREAD
    gap_op = {int(e): (n, d) for e, n, d in zip(gaps.edge.tolist(), gaps.op_name, gaps.op_dims)}
    task_of = {int(ev[t]): int(t) for t in cpu.tolist()}
    rank = int(table.rank)

    def region(lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
        tasks = main[(main_ts >= lo) & (main_ts < hi)]
        mask = np.zeros(graph.n_tasks, dtype=bool)
        mask[tasks] = True
        return tasks, np.flatnonzero(in_thread & mask[graph.src] & mask[graph.dst])

    n_a, n_b = change.base_local, change.target_local
    before = after = 0.0
    for x in reading.experts:
        local = x.expert - rank * n_a
        targets = [rank * n_b + m for m in stands_for(local, n_a, n_b)]
        new_rows = [change.rows[(x.layer, g)] for g in targets]
        tasks, edges = region(x.lo, x.hi)
        before += float(graph.dur[tasks].sum() + graph.lag[edges].sum())
        for t in tasks.tolist():
            name, dims = table.name[ev[t]], table.input_dims[ev[t]]
            out.dur[t] = sum(_retime(comp, float(graph.dur[t]), name, dims, x.rows, r) for r in new_rows)
        for e in edges.tolist():
            name, dims = gap_op.get(e, (None, None))
            out.lag[e] = sum(_retime(comp, float(graph.lag[e]), name, dims, x.rows, r) for r in new_rows)
        after += float(out.dur[tasks].sum() + out.lag[edges].sum())
    opt_before = opt_after = 0.0
    for lo, hi in reading.optimizer_spans:
        tasks, edges = region(lo, hi)
        opt_before += float(graph.dur[tasks].sum() + graph.lag[edges].sum())
        out.dur[tasks] *= n_b / n_a
        out.lag[edges] *= n_b / n_a
        opt_after += float(out.dur[tasks].sum() + out.lag[edges].sum())
    added, waits = _wait_edges(out, table, reading, main, main_ts, task_of)
    # every host task and gap x the slowdown; then the collectives at the target's group
    s = costs.slowdown
    out.dur[cpu] *= s
    out.lag *= s
    ex_before = ex_after = 0.0
    for x in reading.exchanges:
        t = task_of.get(int(x.worker))
        if t is None:
            raise ValueError(f"{table.path}: gloo worker range at {table.ts[x.worker]:.1f} us is no task of the "
                             f"step graph")
        ex_before += float(graph.dur[t])
        out.dur[t] = costs.exchange_us(x.key, str(table.path))
        ex_after += float(out.dur[t])
    done = {"slowdown": round(s, 4),
            "experts_us": [round(before, 1), round(after, 1)],
            "expert_optimizer_us": [round(opt_before, 1), round(opt_after, 1)],
            "collectives_us": [round(ex_before, 1), round(ex_after, 1)],
            "expert_passes": len(reading.experts), "collectives": len(reading.exchanges), "wait_edges": added,
            "waits_out_of_gaps": waits}
    E, a, b = change.experts, change.base_ep, change.target_ep
    notes = [f"EP {a} -> {b} on host collectives (gloo), {E} experts: {n_a} -> {n_b} per rank; their "
             f"{len(reading.experts)} layer passes re-timed for the target's rows by the compute model fitted on the "
             f"base's own ops ({before / 1e3:.3f} -> {after / 1e3:.3f} ms before the slowdown), the routed experts' "
             f"optimizer updates x{n_b / n_a:g} ({opt_before / 1e3:.3f} -> {opt_after / 1e3:.3f} ms)",
             f"every host op and gap x{s:.3f}: {SLOWDOWN_WORDS[costs.slowdown_from]} at EP {b} over EP {a} in the "
             f"calibration recordings ({', '.join(costs.recordings)}; processes sharing the host's cores)",
             f"{len(reading.exchanges)} gloo collectives at EP {b} from the calibration recordings' mean per kind "
             f"({ex_before / 1e3:.3f} -> {ex_after / 1e3:.3f} ms of worker time, the waits for the peers included)"]
    if not reading.optimizer_spans:
        notes.append("the optimizer's updates of the routed experts were not found (no single-tensor stretch per "
                     "parameter): kept as measured")
    return out, done, notes + reading.notes
