"""Context parallelism's ring form at another degree: each layer's ring re-stepped, then re-timed.

A ring base (`lumos emulate training.cp_form=ring`: Transformer Engine's AttnFuncWithCPAndKVP2P, whose steps
`lumos/emulator/ring_attention.py` describes) runs each layer's attention as CP steps. Forward, step i waits for
the key/value chunk of step i - 1 (`aten::wait`), posts the exchange of the next (not at the last step) and runs
one flash kernel, after it the statistics merge of step i - 1; the outputs' corrections follow the last step.
Backward, each step posts an exchange (the chunk, the chunk with the gradients gathered so far, or the gradients
alone), runs the flash backward and the query gradient's update, waits for the exchange and adds the key/value
gradients. At CP' ranks:

- more steps (CP' > CP): copies of a middle step (host calls, kernels and the host gaps before each) go in before
  the last step: forward the last step's wait, flash and merge with the first step's exchange, backward the last
  step with its exchange at twice the bytes (the chunk and the gradients); the forward's last output correction
  is copied CP' - CP times;
- fewer (CP' < CP): the steps from CP' - 1 to the one before the last run at no time (their host calls and the
  gaps before them too), as do the forward's extra output corrections; at CP' = 1 one flash kernel is left.

The ring's dependencies are then made again in the new order, as TE (and the emulator) make them: each exchange
waits for the compute stream's last kernel launched before it (ProcessGroupNCCL's event), the first compute
kernel after an `aten::wait` waits for the exchange posted last before it, each stream keeps its launch order.
Re-timing: every step is half of a (s / CP') x (s / CP') tile, so each ring kernel's sequence dims scale by
CP / CP' (attention work by its square, element-wise by the ratio) and each exchange's bytes by CP / CP' on a
group of CP' ranks (the alpha-beta model); the rest of each layer as the all-gather form's (`cp.change_cp`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from lumos.durations import CollectiveSpec
from lumos.graph.model import EdgeClass, TaskKind
from lumos.model.ops import op_class

from .grow import Growth, NewTask
from .plan import Plan

_CPU, _GPU = int(TaskKind.CPU), int(TaskKind.GPU)
_INTRA, _LAUNCH, _ISTREAM, _XSTREAM = (int(EdgeClass.INTRA_THREAD), int(EdgeClass.LAUNCH),
                                       int(EdgeClass.INTRA_STREAM), int(EdgeClass.INTER_STREAM))
MERGE, OUT = "flash_attn_fwd_softmax_lse_correction", "flash_attn_fwd_out_correction"
RING_OPS = (MERGE, OUT, "aten::add_")     # the ring's element-wise ops after a step's flash kernel


@dataclass
class _Step:
    wait: list
    xchg: list
    flash: int
    rest: list

    @property
    def calls(self) -> list:
        return self.wait + self.xchg + [self.flash] + self.rest


@dataclass
class _Ring:
    block: int
    backward: bool
    steps: list
    after: int                                      # the host call after the ring (-1: none)


class _Layout:
    """Who launches what and what follows what, read once from the plan's edges."""

    def __init__(self, plan: Plan):
        g = plan.graph
        self.launches = defaultdict(list)           # host call -> kernels it launches
        self.launch_lag = {}                        # kernel -> the lag of its launch edge
        self.intra_in, self.intra_out = {}, {}      # host call -> (edge, the call before / after it)
        self.stream_in, self.stream_out = {}, {}    # kernel -> (edge, the kernel before / after it on its stream)
        self.cross = defaultdict(list)              # kernel -> its cross-stream edges (either end)
        cls, src, dst, lag = g.cls.tolist(), g.src.tolist(), g.dst.tolist(), g.lag.tolist()
        for i, (c, s, d) in enumerate(zip(cls, src, dst)):
            if c == _LAUNCH:
                self.launches[s].append(d)
                self.launch_lag[d] = lag[i]
            elif c == _INTRA:
                self.intra_in[d], self.intra_out[s] = (i, s), (i, d)
            elif c == _ISTREAM:
                self.stream_in[d], self.stream_out[s] = (i, s), (i, d)
            elif c == _XSTREAM:
                self.cross[s].append(i)
                self.cross[d].append(i)


def find_rings(plan: Plan, lay: _Layout) -> list[_Ring]:
    """Every ring of the plan's layer blocks (a recomputed backward block holds a forward ring and a backward
    one), its steps as host calls in the thread's order."""
    g, st = plan.graph, plan.st
    cp_kernel = plan.role == "cp"
    out = []
    for bi, b in enumerate(st.blocks):
        if b.kind != "layer" or not np.any(cp_kernel[b.tasks]):
            continue
        cpu = b.tasks[g.kind[b.tasks] == _CPU]
        cpu = cpu[np.argsort(g.ts[cpu], kind="stable")].tolist()
        ops = [str(st.op_name[t]) for t in cpu]
        xchg = set()
        for j, t in enumerate(cpu):
            if any(cp_kernel[k] for k in lay.launches.get(t, ())):
                xchg.update(i for i in range(max(j - 2, 0), min(j + 2, len(cpu))) if ops[i] == "record_param_comms")
        flash = [j for j, t in enumerate(cpu) if any(op_class(str(st.op_name[k])) == "attention" and not cp_kernel[k]
                                                      for k in lay.launches.get(t, ()))]
        runs = []
        for j in flash:     # a ring: a run of flash launches of one op (forward or backward)
            if runs and ops[runs[-1][-1]] == ops[j]:
                runs[-1].append(j)
            else:
                runs.append([j])
        for run in runs:
            out.append(_ring(plan, lay, bi, cpu, ops, xchg, run))
    return out


def _ring(plan, lay, bi, cpu, ops, xchg, run) -> _Ring:
    starts = []
    for i, f in enumerate(run):
        j = f - 1
        while j >= 0 and j in xchg:
            j -= 1
        while i > 0 and j >= 0 and ops[j] == "aten::wait":
            j -= 1
        starts.append(j + 1)
    end = run[-1] + 1
    while end < len(cpu) and (ops[end] == "aten::wait" or (ops[end] in RING_OPS and end not in xchg)):
        end += 1
    steps = []
    for i, f in enumerate(run):
        lo, hi = starts[i], (starts[i + 1] if i + 1 < len(run) else end)
        calls = list(range(lo, f))
        nw = next((k for k, j in enumerate(calls) if ops[j] != "aten::wait"), len(calls))
        steps.append(_Step(wait=[cpu[j] for j in calls[:nw]], xchg=[cpu[j] for j in calls[nw:]], flash=cpu[f],
                           rest=[cpu[j] for j in range(f + 1, hi)]))
    last = steps[-1].calls[-1]
    after = lay.intra_out.get(last, (None, -1))[1]
    return _Ring(block=bi, backward="backward" in ops[run[0]], steps=steps, after=after)


def directions(plan, rings: list[_Ring], lay: _Layout) -> dict:
    """Exchange kernel -> +1 where it runs to or from the next rank of the ring, -1 the previous: TE sends the
    forward's chunks to the next rank (and receives from the previous), the backward's the other way."""
    out = {}
    for ring in rings:
        for s in ring.steps:
            for c in s.xchg:
                for k in lay.launches.get(c, ()):
                    if plan.role[k] == "cp":
                        out[k] = (1 if plan.st.coll[k] == "send" else -1) * (-1 if ring.backward else 1)
    return out


def ring_pair(rank: int, sign: int, cp: int, tp: int) -> tuple:
    """The ranks one exchange of `rank`, its stage's first rank (the one a plan holds: first in its CP group, in
    Megatron's order TP, CP, DP), runs between at CP `cp`: it and its next (`sign` +1) or previous (-1) ring
    neighbour, `tp` or (cp - 1) x `tp` ranks on."""
    return (rank, rank + (tp if sign > 0 or cp == 2 else (cp - 1) * tp))


def pair_groups(plan) -> None:
    """Each ring exchange's group, in place, as the pair of neighbours it runs between (ProcessGroupNCCL's
    point-to-point communicator; the trace names the CP group): a ring whose group spans hosts crosses them on one
    of its pairs only, and a rank's send and receive then cross, or share a NIC, each on its own."""
    lay = _Layout(plan)
    g, st = plan.graph, plan.st
    for k, sign in directions(plan, find_rings(plan, lay), lay).items():
        ring, rank = tuple(sorted(st.group[k])), int(g.rank[k])
        peer = ring[(ring.index(rank) + sign) % len(ring)]
        st.group[k] = tuple(sorted((rank, peer)))


def change_cp_ring(plan: Plan, cp: int) -> tuple[Plan, set, dict]:
    """`plan` (a ring base) with each ring at `cp` steps, before re-timing: the plan, the ring's compute kernels
    and its exchanges (kept and copied, task ids of the new plan); the steps dropped run at no time."""
    lay = _Layout(plan)
    rings = find_rings(plan, lay)
    grow = Growth(plan)
    zero: set = set()
    copies: dict = {}                                # new task -> its template in the base
    doubled: set = set()                             # new exchanges at twice their template's bytes
    order_of: dict = {}                              # stream -> [(base positions it replaces, new order)]
    for ring in rings:
        order = _new_order(plan, ring, cp, grow, copies, doubled, zero, lay)
        _relink(plan, ring, order, grow, copies, lay, order_of, zero)
    out = grow.apply()
    g2, st2 = out.graph, out.st
    for new, tmpl in copies.items():
        st2.op_dims[new] = plan.st.op_dims[tmpl]
        if plan.role[tmpl] == "cp":   # a copied exchange transfers without the wait its template had for its peer
            g2.dur[new] = out.collectives.time_us(CollectiveSpec(st2.coll[new], st2.nbytes[new], st2.group[new]))
    _restream(g2, order_of)
    z = np.fromiter(zero, np.int64, len(zero))
    g2.dur[z] = 0.0
    compute = set()
    exchanges = directions(plan, rings, lay)
    for ring in rings:
        for s in ring.steps:
            for c in s.calls:
                compute.update(k for k in lay.launches.get(c, ()) if plan.role[k] != "cp")
    for new, tmpl in copies.items():
        if g2.kind[new] == _GPU:
            if plan.role[tmpl] == "cp":
                exchanges[new] = exchanges[tmpl]
            else:
                compute.add(new)
    for t in doubled:
        old = CollectiveSpec(st2.coll[t], st2.nbytes[t], st2.group[t])
        st2.nbytes[t] *= 2
        g2.dur[t] = out.collectives.retime(g2.dur[t], old, CollectiveSpec(st2.coll[t], st2.nbytes[t], st2.group[t]))
    return out, compute - zero, {k: v for k, v in exchanges.items() if k not in zero}


def _new_order(plan, ring: _Ring, cp: int, grow: Growth, copies: dict, doubled: set, zero: set, lay) -> list:
    """The ring's host calls at `cp` steps (base ids, and ids of copies made in `grow`); `zero`: base tasks (calls and
    kernels) that run at no time."""
    st = plan.st
    steps, base = ring.steps, len(ring.steps)
    if cp == 1:      # one flash kernel left: the diagonal (the forward's first step, the backward's last)
        keep = steps[-1 if ring.backward else 0].flash
        _drop([c for s in steps for c in s.calls if c != keep], zero, lay)
        return [c for s in steps for c in s.calls]
    if cp < base:    # drop the steps cp - 1 .. base - 2
        for s in steps[cp - 1:base - 1]:
            _drop(s.calls, zero, lay)
        last = steps[-1]
        if not ring.backward:
            outs = [c for c in last.rest if str(st.op_name[c]) == OUT]
            _drop(outs[cp:], zero, lay)
        return [c for s in steps for c in s.calls]
    order = [c for s in steps[:-1] for c in s.calls]
    last = steps[-1]
    if ring.backward:
        template, double = last.calls, set(last.xchg)
    else:
        merges = [c for c in last.rest if str(st.op_name[c]) == MERGE]
        first = last.rest[:1] if len(merges) >= 2 else []     # the merge of the step before (none: folded)
        template, double = last.wait + steps[0].xchg + [last.flash] + first, set()
    for _ in range(cp - base):
        order += [_copy(plan, c, grow, copies, doubled if c in double else None, lay) for c in template]
    order += last.calls
    if not ring.backward and cp > base:
        outs = [c for c in last.rest if str(st.op_name[c]) == OUT]
        if outs:
            order += [_copy(plan, outs[-1], grow, copies, None, lay) for _ in range(cp - base)]
    return order


def _drop(calls, zero: set, lay) -> None:
    for c in calls:
        zero.add(c)
        zero.update(lay.launches.get(c, ()))


def _copy(plan, call: int, grow: Growth, copies: dict, doubled, lay) -> int:
    """A copy of host call `call` and of the kernels it launches (each kernel's copy launched by it)."""
    g, st = plan.graph, plan.st

    def task(t: int) -> int:
        new = grow.task(NewTask(name=str(g.name[t]), kind=int(g.kind[t]), proc=int(g.proc[t]), dur=float(g.dur[t]),
                                ts=float(g.ts[t]), rank=int(g.rank[t]), block=int(st.task_block[t]),
                                comm=bool(g.comm[t]), layer=int(g.layer[t]), phase=int(g.phase[t]),
                                wait_kind=int(g.wait_kind[t]), wait_target=int(g.wait_target[t]),
                                coll=st.coll[t], group=st.group[t], nbytes=float(st.nbytes[t]),
                                op_name=str(st.op_name[t]), role=plan.role[t]))
        copies[new] = t
        return new

    new = task(call)
    for k in lay.launches.get(call, ()):
        nk = task(k)
        lay.launches[new].append(nk)
        if doubled is not None and plan.role[k] == "cp":
            doubled.add(nk)
    return new


def _relink(plan, ring: _Ring, order: list, grow: Growth, copies: dict, lay, order_of: dict, zero: set) -> None:
    """The ring's program order, launches, stream order and cross-stream waits made again for `order`."""
    g, st = plan.graph, plan.st
    base_calls = [c for s in ring.steps for c in s.calls]
    kernels = [k for c in base_calls for k in lay.launches.get(c, ())]
    # program order: the call before -> order... -> the call after, each call behind the gap its template had
    pred = lay.intra_in.get(base_calls[0])
    out_e = lay.intra_out.get(base_calls[-1])
    grow.drop.update(lay.intra_in[c][0] for c in base_calls if c in lay.intra_in)
    if out_e is not None:
        grow.drop.add(out_e[0])
    prev = pred[1] if pred is not None else None
    for c in order:
        tmpl = copies.get(c, c)
        if prev is not None:
            lag = 0.0 if c in zero or tmpl not in lay.intra_in else float(g.lag[lay.intra_in[tmpl][0]])
            grow.edge(prev, c, _INTRA, lag)
        if c in copies:
            grow.after[c] = prev
            for k in lay.launches.get(c, ()):
                grow.edge(c, k, _LAUNCH, lay.launch_lag.get(copies[k], 0.0))
        prev = c
    if out_e is not None:
        grow.edge(prev, out_e[1], _INTRA, float(g.lag[out_e[0]]))
    # stream order: each stream's ring kernels in launch order, the last one before what followed the base's last
    by_stream = defaultdict(list)
    for c in order:
        for k in lay.launches.get(c, ()):
            by_stream[_proc(g, grow, k)].append(k)
    ring_k = set(kernels)
    for k in kernels:
        if k in lay.stream_out:
            grow.drop.add(lay.stream_out[k][0])
    for p, ks in by_stream.items():
        base_ks = [k for k in ks if k not in copies]
        for a, b in zip(ks, ks[1:]):
            grow.edge(a, b, _ISTREAM, 0.0)
            if b in copies:
                grow.after[b] = a
        nxt = next((lay.stream_out[k][1] for k in reversed(base_ks)
                    if k in lay.stream_out and lay.stream_out[k][1] not in ring_k), None)
        if nxt is not None:
            grow.edge(ks[-1], nxt, _ISTREAM, 0.0)
        order_of.setdefault(p, []).append((sorted(g.stream_pos[base_ks].tolist()), ks))
    # cross-stream waits: an exchange after the compute stream's last kernel launched before it; the first compute
    # kernel after an `aten::wait` after the exchange posted last before the wait
    for k in kernels:
        if plan.role[k] == "cp":
            grow.drop.update(lay.cross.get(k, ()))
    compute = int(g.proc[lay.launches[ring.steps[0].flash][0]])
    first = min((k for k in kernels if int(g.proc[k]) == compute), key=lambda k: g.stream_pos[k])
    last_compute = lay.stream_in[first][1] if first in lay.stream_in else -1
    posted, waited, open_, waiting = [], [], False, False
    for c in order:
        if str(st.op_name[copies.get(c, c)]) == "aten::wait":
            waited, waiting, open_ = posted, True, False
            continue
        ks = lay.launches.get(c, ())
        xs = [k for k in ks if plan.role[copies.get(k, k)] == "cp"]
        if xs:
            if last_compute >= 0:
                for k in xs:
                    grow.edge(last_compute, k, _XSTREAM, 0.0)
            posted = posted + xs if open_ else list(xs)
            open_ = True
            continue
        comp = [k for k in ks if _proc(g, grow, k) == compute]
        if comp:
            if waiting:
                for k in waited:
                    grow.edge(k, comp[0], _XSTREAM, 0.0)
            waiting, open_ = False, False
            last_compute = comp[-1]


def _proc(g, grow: Growth, k: int) -> int:
    return int(g.proc[k]) if k < g.n_tasks else int(grow.tasks[k - g.n_tasks].proc)


def _restream(g, order_of: dict) -> None:
    """Stream positions after the copies: each ring's kernels take its base kernels' places, in the new order."""
    for p, parts in order_of.items():
        on = np.flatnonzero(g.proc == p)
        key = g.stream_pos[on].astype(np.float64)
        where = {int(t): i for i, t in enumerate(on.tolist())}
        for base_pos, ks in parts:
            lo, span = float(base_pos[0]), len(base_pos)
            for j, k in enumerate(ks):
                key[where[k]] = lo + j * span / len(ks)
        order = on[np.argsort(key, kind="stable")]
        g.stream_pos[order] = np.arange(len(order), dtype=g.stream_pos.dtype)


def ring_scale(plan: Plan, compute: set, exchanges: dict, ratio: float, cp: int, dp: int) -> None:
    """Re-time the ring's kernels in place: sequence dims x `ratio` (CP / CP'), exchanges (kernel -> its direction)
    x `ratio` bytes between the stage's first rank at the target's `dp` (DP x CP) ranks per stage and its neighbour
    on a ring of `cp` (a transform in place keeps the base's rank numbers; the hosts a pair spans are the
    target's)."""
    from .shapes import reshape_tasks

    def rewrite(op, dims):
        out = []
        for d in dims:
            x = list(d) if isinstance(d, (list, tuple)) else d
            if isinstance(x, list) and len(x) == 4:
                x[1] = max(int(round(x[1] * ratio)), 1)
            elif isinstance(x, list) and len(x) == 3 and op == MERGE:
                x[2] = max(int(round(x[2] * ratio)), 1)
            out.append(tuple(x) if isinstance(x, list) else x)
        return tuple(out)

    reshape_tasks(plan, sorted(compute), rewrite)
    g, st = plan.graph, plan.st
    for t, sign in sorted(exchanges.items()):
        old = CollectiveSpec(st.coll[t], st.nbytes[t], st.group[t])
        st.nbytes[t] *= ratio
        first = int(g.rank[t]) // (plan.tp * plan.dp) * plan.tp * dp     # the stage's first rank in the target
        st.group[t] = ring_pair(first, sign, cp, plan.tp)
        g.dur[t] = plan.collectives.retime(g.dur[t], old, CollectiveSpec(st.coll[t], st.nbytes[t], st.group[t]))


__all__ = ["change_cp_ring", "ring_scale", "find_rings", "pair_groups", "ring_pair"]
