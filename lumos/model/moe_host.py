"""What one step of a CPU MoE capture over host collectives (gloo) holds that an EP change moves.

On a CPU run (`lumos capture moe`) every part of an MoE layer is host work on the rank's main thread;
the token exchanges are `c10d::alltoall_base_` ops that hand the work to a gloo worker thread (a
`gloo:all_to_all` range: the copies and the wait for every peer), and the dense gradients' buckets
`c10d::allreduce_` ops run as `gloo:all_reduce` ranges. Read here, per step of one rank:

- the local experts' work in each layer pass: the forward's `moe/expert_{E}` range (E the global
  index), and the backward ops of the same autograd nodes (a backward node carries its forward op's
  sequence number), from the first to the last on the main thread; with the rows the expert took
  (its first GEMM's input rows);
- every host collective: the issuing op, the worker range that ran it (the k-th of its kind), its
  kind (`counts`: the all-to-all of the per-expert counts; `tokens`: the rows; `all_reduce`), its
  pass and its place in the layer pass (dispatch 0, combine 1), and its elements;
- the optimizer's per-parameter stretches of the routed experts' parameters (single-tensor AdamW
  runs one stretch of ops per parameter, starting at the scalar step count's `aten::add_`);
- the forward's dense work: the forward blocks (`layer_L`, `embedding`, `head` ranges) less their
  MoE part ranges: the same ops at any EP, so its time tells how fast the rank ran.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from lumos.trace import TraceTable, schema
from lumos.trace.annotation import is_part, parse
from lumos.trace.collectives import classify_name
from lumos.trace.steps import Step

__all__ = ["HostExchange", "HostExpert", "HostMoEStep", "read_host_moe_step", "dense_forward_us",
           "is_host_moe", "shared_host_us", "waiter"]

EXPERT_RANGE = re.compile(r"^moe/expert_(\d+)$")
OPTIMIZER_PREFIX = "Optimizer.step"
BACKWARD_PREFIX = "autograd::engine::evaluate_function: "
KINDS = ("all_to_all", "all_reduce")


@dataclass(frozen=True)
class HostExchange:
    """One host collective of the step."""
    row: int              # the issuing op (`c10d::...`)
    worker: int           # the worker thread's range that ran it
    kind: str             # counts | tokens | all_reduce
    phase: str            # forward | backward | after (outside every layer range)
    layer: int            # -1 outside a layer range
    order: int            # tokens: 0 the pass's first exchange, 1 its second; else 0
    elements: int         # its input's elements

    @property
    def key(self) -> tuple:
        """What a calibration times it by: the kind, pass and place of a token exchange; the kind and
        message of the rest."""
        return (self.kind, self.phase, self.order) if self.kind == "tokens" else (self.kind, self.elements)


@dataclass(frozen=True)
class HostExpert:
    """One local expert's work in one layer pass, on the main thread."""
    expert: int           # global index
    layer: int
    phase: str            # forward | backward
    lo: float             # trace clock, us
    hi: float
    rows: int


@dataclass
class HostMoEStep:
    step: Step
    main_tid: int
    exchanges: list = field(default_factory=list)
    experts: list = field(default_factory=list)
    optimizer_spans: list = field(default_factory=list)   # (lo, hi) per routed-expert parameter's update
    notes: list = field(default_factory=list)


def is_host_moe(table: TraceTable) -> bool:
    """A CPU-only trace with expert ranges and host token exchanges (`lumos capture moe` at EP > 1)."""
    if (table.stream >= 0).any() or (table.device >= 0).any():
        return False
    names = table.name.astype(str)
    return bool(np.any(np.char.startswith(names, "moe/expert_"))
                and np.any(names == "c10d::alltoall_base_"))


def _window(table: TraceTable, step: Step) -> np.ndarray:
    rows = np.flatnonzero((table.ts >= step.start) & (table.ts < step.end) & (table.tid >= 0))
    return rows[np.lexsort((-table.dur[rows], table.ts[rows]))]


def _elements(dims) -> int:
    """Elements of an op's first input (a tensor, or a list of tensors)."""
    if not dims:
        return 0
    first = dims[0]
    if first and isinstance(first[0], (list, tuple)):
        return int(sum(np.prod(x) for x in first if x))
    return int(np.prod(first)) if first else 0


def _enclosing(table: TraceTable, ranges: list, row: int) -> tuple[str, int]:
    """(phase, layer) of the innermost layer range containing `row`'s start, ('after', -1) if none."""
    ts = table.ts[row]
    best = None
    for r, ann in ranges:
        if table.ts[r] <= ts < table.ts[r] + table.dur[r] and (best is None or table.dur[r] < table.dur[best[0]]):
            best = (r, ann)
    if best is None:
        return "after", -1
    return best[1].phase, best[1].first


def read_host_moe_step(table: TraceTable, step: Step, expert_shapes: tuple = ()) -> HostMoEStep:
    """The MoE pieces of `step` of `table` (module docstring). `expert_shapes`: the routed experts'
    weight shapes ((f, h), (h, f)), to find their optimizer stretches; none: not looked for."""
    rows = _window(table, step)
    names = table.name.astype(str)
    main = int(step.tid)
    on_main = rows[table.tid[rows] == main]
    out = HostMoEStep(step=step, main_tid=main)
    ranges = [(int(r), a) for r in on_main.tolist() if table.cat[r] == schema.ANNOTATION
              for a in (parse(names[r]),) if a is not None and a.kind == "layer"]
    # the token exchanges, counts and all-reduces, matched in order with their worker ranges
    issuing = [int(r) for r in on_main.tolist() if names[r].startswith("c10d::")
               and classify_name(names[r], bare=True) in KINDS]
    workers = [int(r) for r in rows.tolist() if table.tid[r] != main and names[r].startswith("gloo:")
               and classify_name(names[r], bare=True) in KINDS]
    issuing.sort(key=lambda r: table.ts[r])
    workers.sort(key=lambda r: table.ts[r])
    by_kind = {k: [w for w in workers if classify_name(names[w], bare=True) == k] for k in KINDS}
    seen = {k: 0 for k in KINDS}
    order: dict = {}
    for r in issuing:
        kind = classify_name(names[r], bare=True)
        if seen[kind] >= len(by_kind[kind]):
            raise ValueError(f"{table.path}: {names[r]} at {table.ts[r]:.1f} us in step {step.number} has no gloo "
                             f"worker range (gloo:{kind}) left to match: not a gloo capture")
        w = by_kind[kind][seen[kind]]
        seen[kind] += 1
        dims = table.input_dims[r] or []
        phase, layer = _enclosing(table, ranges, r)
        if kind == "all_to_all":
            what = "counts" if dims and dims[0] and len(dims[0]) == 1 else "tokens"
        else:
            what = "all_reduce"
        place = 0
        if what == "tokens":
            place = order.get((phase, layer), 0)
            order[(phase, layer)] = place + 1
        out.exchanges.append(HostExchange(row=r, worker=w, kind=what, phase=phase, layer=layer, order=place,
                                          elements=_elements(dims)))
    # the experts: forward ranges, then the backward of their ops' autograd nodes
    cpu_main = on_main[table.cat[on_main] == schema.CPU_OP]
    for r in on_main.tolist():
        m = EXPERT_RANGE.match(names[r])
        if m is None:
            continue
        lo, hi = float(table.ts[r]), float(table.ts[r] + table.dur[r])
        inside = cpu_main[(table.ts[cpu_main] >= lo) & (table.ts[cpu_main] + table.dur[cpu_main] <= hi)]
        expert_rows = next((int(d[0][0]) for d in (table.input_dims[i] for i in inside.tolist())
                            if d and d[0] and len(d[0]) == 2), None)
        if expert_rows is None:
            raise ValueError(f"{table.path}: {names[r]} in step {step.number} holds no op with a 2-D input: "
                             "its rows are not in the trace")
        phase, layer = _enclosing(table, ranges, r)
        out.experts.append(HostExpert(int(m.group(1)), layer, "forward", lo, hi, expert_rows))
        seqs = {int(s) for s in table.seq[inside].tolist() if s >= 0}
        back = cpu_main[(table.ts[cpu_main] >= hi) & np.isin(table.seq[cpu_main], list(seqs))
                        & np.char.startswith(names[cpu_main], BACKWARD_PREFIX)] if seqs else cpu_main[:0]
        if len(back):
            b_lo, b_hi = float(table.ts[back].min()), float((table.ts[back] + table.dur[back]).max())
            _, b_layer = _enclosing(table, ranges, int(back[0]))
            out.experts.append(HostExpert(int(m.group(1)), b_layer if b_layer >= 0 else layer, "backward",
                                          b_lo, b_hi, expert_rows))
        else:
            out.notes.append(f"{names[r]} of layer {layer}: no backward op of its autograd nodes found")
    if expert_shapes:
        out.optimizer_spans = _optimizer_spans(table, on_main, names, expert_shapes)
    return out


def _scalar(dims) -> bool:
    return bool(dims) and all(isinstance(d, (list, tuple)) and len(d) == 0 for d in dims)


def _optimizer_spans(table: TraceTable, on_main: np.ndarray, names: np.ndarray, shapes: tuple) -> list:
    """(lo, hi) of each routed-expert parameter's stretch of the optimizer step: from its step count's
    `aten::add_` to the next parameter's (or the step's end)."""
    opt = [r for r in on_main.tolist() if names[r].startswith(OPTIMIZER_PREFIX)]
    if not opt:
        return []
    o = opt[0]
    lo, hi = float(table.ts[o]), float(table.ts[o] + table.dur[o])
    ops = on_main[(table.cat[on_main] == schema.CPU_OP) & (table.ts[on_main] >= lo)
                  & (table.ts[on_main] + table.dur[on_main] <= hi)]
    ops = ops[np.argsort(table.ts[ops], kind="stable")]
    # direct children only: an op that starts after the previous top-level one ended
    top, end = [], -np.inf
    for r in ops.tolist():
        if table.ts[r] >= end:
            top.append(r)
            end = table.ts[r] + table.dur[r]
    starts = [i for i, r in enumerate(top) if names[r] == "aten::add_" and _scalar(table.input_dims[r])]
    spans = []
    wanted = {tuple(s) for s in shapes}
    for j, i in enumerate(starts):
        stop = starts[j + 1] if j + 1 < len(starts) else len(top)
        chunk = top[i:stop]
        if any((table.input_dims[r] or [None])[0] is not None and tuple(table.input_dims[r][0]) in wanted
               for r in chunk):
            end_ts = float(table.ts[top[stop]]) if stop < len(top) else hi
            spans.append((float(table.ts[top[i]]), end_ts))
    return spans


def dense_forward_us(table: TraceTable, step: Step) -> float:
    """The forward blocks' time on the main thread less their MoE part ranges: work every EP runs alike."""
    rows = _window(table, step)
    rows = rows[(table.tid[rows] == step.tid) & (table.cat[rows] == schema.ANNOTATION)]
    names = table.name.astype(str)
    total = 0.0
    blocks = []
    for r in rows.tolist():
        a = parse(names[r])
        if a is not None and a.phase == "forward" and a.is_block:
            total += float(table.dur[r])
            blocks.append(r)
    if not blocks:
        raise ValueError(f"{table.path}: no forward block range (layer_L/forward/mbM ...) in step {step.number}: "
                         "its dense work cannot be told apart")
    parts = [r for r in rows.tolist() if is_part(names[r]) and not EXPERT_RANGE.match(names[r])]
    return total - float(sum(table.dur[r] for r in parts))


def waiter(starts: np.ndarray, issued_end: float, worker_end: float) -> int:
    """Index (into `starts`, the main thread's op starts in order) of the op that waited for a collective
    issued until `issued_end` and run until `worker_end`: the first op after the issuing one, where none
    started before the collective ended (a collective waited for as soon as it is issued); -1 where the
    main thread ran on beside it."""
    i = int(np.searchsorted(starts, issued_end - 1.0))
    return i if i < len(starts) and starts[i] >= worker_end - 1.0 else -1


def shared_host_us(table: TraceTable, step: Step, reading: HostMoEStep | None = None) -> float:
    """The step's main-thread time that an EP change does not change but through the host's speed: the step
    less each collective's issuing op and the wait for it (to its waiter's start), the experts' layer passes
    and the routed experts' optimizer updates (`reading`, read here without one, the experts' shapes from
    their forward GEMMs)."""
    if reading is None:
        reading = read_host_moe_step(table, step, _expert_shapes(table, step))
    rows = _window(table, step)
    main = rows[(table.tid[rows] == step.tid) & (table.cat[rows] == schema.CPU_OP)]
    starts = np.sort(table.ts[main])
    busy = (step.end - step.start)
    for x in reading.exchanges:
        issued = float(table.ts[x.row] + table.dur[x.row])
        i = waiter(starts, issued, float(table.ts[x.worker] + table.dur[x.worker]))
        busy -= (float(starts[i]) if i >= 0 else issued) - float(table.ts[x.row])
    busy -= sum(x.hi - x.lo for x in reading.experts)
    busy -= sum(hi - lo for lo, hi in reading.optimizer_spans)
    return float(busy)


def _expert_shapes(table: TraceTable, step: Step) -> tuple:
    """((f, h), (h, f)) of the routed experts' weights: their first forward GEMM's (rows x h by f x h)."""
    rows = _window(table, step)
    names = table.name.astype(str)
    for r in rows.tolist():
        if EXPERT_RANGE.match(names[r]):
            inside = rows[(table.ts[rows] >= table.ts[r]) & (table.ts[rows] + table.dur[rows] <= table.ts[r] + table.dur[r])
                          & (table.cat[rows] == schema.CPU_OP)]
            for i in inside.tolist():
                d = table.input_dims[i]
                if d and len(d) > 1 and d[0] and d[1] and len(d[0]) == 2 and len(d[1]) == 2 and d[1][1] == d[0][1]:
                    f, h = int(d[1][0]), int(d[1][1])     # linear: input rows x h, weight f x h
                    return ((f, h), (h, f))
    return ()
