"""Which data parallelism a run trains with, read from one rank's iteration.

A DP change means different things for different programs: Megatron and DDP
all-reduce whole gradients in buckets; a sharded optimizer (ZeRO-1/2, Megatron's
distributed optimizer) reduce-scatters the gradients and all-gathers the
updated parameters once per step; FSDP / ZeRO-3 all-gathers every unit's
parameters before its forward (and, when it reshards after forward, again
before its backward) and reduce-scatters its gradients after the backward; HSDP
adds an all-reduce across replicas after each reduce-scatter. The predictor must
know which one it holds before it changes DP, so this module says it, with the
evidence:

- FSDP2 names its work by module (torch `distributed/fsdp/_fully_shard/
  _fsdp_param_group.py`): `FSDP::pre_forward (FQN)`, `FSDP::all_gather (FQN)`,
  `FSDP::pre_backward (FQN)`, `FSDP::backward_prefetch for FQN`,
  `FSDP::post_backward_reduce (FQN)`; the root has no FQN (here: `root`).
  Every collective is tied to the unit whose range encloses it.
- FSDP1 writes `FullyShardedDataParallel._pre_forward` and friends, without the
  module: recognised as FSDP, units unnamed.
- torch's DistributedDataParallel names its forward (`DistributedDataParallel.forward`,
  torch `nn/parallel/distributed.py`) and its reducer's per-parameter work
  (`torch::distributed::reducer::mul_out` when a gradient is copied into its bucket,
  `torch.distributed.ddp.reducer::copy_bucket_to_grad` when the averaged bucket is copied
  back; torch `csrc/distributed/c10d/reducer.cpp`); its all-reduces are the gradient
  buckets, issued during the backward by the reducer's autograd hooks. All-reduce DP,
  said to be DDP's (`DPFlavour.ddp`).
- Without either, the collectives alone: all-gathers inside forward layer ranges
  and reduce-scatters in the backward make ZeRO-3; all-gathers only after the
  backward a sharded optimizer; all-reduces alone buckets.

Collectives are the issuing CPU ops (`c10d::_allgather_base_`, ...: one per
collective, NCCL or gloo alike); a trace without them falls back to the
communication kernels. The full (unsharded) message and the group size come
from the op's Input Dims (an all-gather's output over its input); at a group of
one FSDP2 issues no collective, and the unit's size comes from the
`fsdp::chunk_cat` that packs its gradients.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

import numpy as np

from lumos.trace import TraceTable, schema
from lumos.trace.annotation import ANN, parse
from lumos.trace.collectives import classify_name
from lumos.trace.steps import select_step

from .nesting import innermost

FSDP2_RANGE = re.compile(r"^FSDP::(\w+?)(?: \((.*)\)| for (.+))?$")
FSDP1_PREFIX = "FullyShardedDataParallel."
DDP_FORWARD = "DistributedDataParallel.forward"      # torch nn/parallel/distributed.py
DDP_REDUCER = ("torch.distributed.ddp.reducer::", "torch::distributed::reducer::")   # csrc/.../reducer.cpp
ROOT = "root"
KINDS = ("all_gather", "reduce_scatter", "all_reduce")

LABELS = {
    "fsdp_full": "FSDP, resharding after forward (FULL_SHARD, ZeRO-3)",
    "fsdp_grad_op": "FSDP, parameters kept from forward to backward (SHARD_GRAD_OP, ZeRO-2)",
    "fsdp": "FSDP (a group of one: no collective to tell whether it reshards after forward)",
    "hsdp": "HSDP (FSDP within a shard group, all-reduce across replicas)",
    "zero3": "sharded parameters (ZeRO-3 pattern)",
    "zero12": "sharded optimizer state (ZeRO-1/2, Megatron's distributed optimizer)",
    "allreduce": "all-reduce buckets (DDP, Megatron)",
    "none": "no data-parallel collective",
    "unrecognised": "collectives in no data-parallel pattern Lumos knows",
}
SHARDED = ("fsdp_full", "fsdp_grad_op", "fsdp", "hsdp", "zero3", "zero12")


def collective_kind(name: str) -> str | None:
    """all_gather / reduce_scatter / all_reduce for a collective's op, range or kernel name, else None.

    `c10d::_allgather_base_`, `nccl:_all_gather_base`, `gloo:all_gather`,
    `ncclDevKernel_AllGather_RING_LL`, `c10d::reduce_scatter_tensor_coalesced_` ... The names are
    read by `lumos.trace.collectives`; only the three kinds DP works with are answered here.
    """
    kind = classify_name(name, bare=True)
    return kind if kind in KINDS else None


@dataclass(frozen=True)
class Collective:
    """One DP-relevant collective of the iteration, in issue order."""
    kind: str              # all_gather | reduce_scatter | all_reduce
    unit: str              # FSDP unit (module FQN, `root`), or `layer_L`, or '' when none encloses it
    phase: str             # forward | backward | after_backward
    prefetch: bool         # issued by a prefetch for `unit` (FSDP::backward_prefetch for ...)
    elements: int          # the full message: the unsharded unit (all-gather output, reduce-scatter input)
    group: int             # ranks in the group (full / shard), 0 when unknown
    ts: float
    row: int


@dataclass
class DPFlavour:
    kind: str                                   # a key of LABELS
    reason: str
    units: list[str] = field(default_factory=list)          # sharded units in forward order
    unit_elements: dict[str, int] = field(default_factory=dict)
    collectives: list[Collective] = field(default_factory=list)
    unit_layers: dict[str, str] = field(default_factory=dict)   # FSDP unit -> the layer it holds
    ddp: bool = False                           # torch's DistributedDataParallel's ranges in the step

    @property
    def label(self) -> str:
        return LABELS[self.kind]

    @property
    def sharded(self) -> bool:
        return self.kind in SHARDED

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for c in self.collectives:
            out[c.kind] = out.get(c.kind, 0) + 1
        return out

    def as_dict(self) -> dict:
        """JSON-ready; the collectives one by one only for a sharded flavour (a Megatron rank has
        thousands of all-reduces, a sharded one a few per unit)."""
        out = {"kind": self.kind, "label": self.label, "reason": self.reason, "ddp": self.ddp, "units": self.units,
               "unit_elements": self.unit_elements, "unit_layers": self.unit_layers, "counts": self.counts()}
        if self.sharded:
            out["collectives"] = [asdict(c) for c in self.collectives]
        return out

    def line(self) -> str:
        return f"data parallel: {self.label}: {self.reason}"


def input_elements(dims, lists: bool = False) -> list[int]:
    """Element counts of the tensor inputs in an op's Input Dims (non-tensors skipped); `lists`: a
    tensor list counts as its tensors' elements together (`c10d::allreduce_` takes one, as
    `[[32960]]`: DDP's bucket)."""
    out = []
    for d in dims or ():
        if isinstance(d, list) and d and all(isinstance(x, int) for x in d):
            out.append(int(np.prod(d)))
        elif lists and isinstance(d, list) and d and all(
                isinstance(x, list) and x and all(isinstance(y, int) for y in x) for x in d):
            out.append(int(sum(np.prod(x) for x in d)))
    return out


def _message(table: TraceTable, r: int, kind: str, rpc: np.ndarray, rpc_ts: np.ndarray) -> tuple[int, int]:
    """(full message elements, group size; 0 when unknown) of collective row `r`: from the
    `record_param_comms` inside its op (In / Out msg nelems, Group size), else from the op's two
    tensors (an all-gather's output over its input is the group)."""
    if table.cat[r] == schema.CPU_OP:
        k = int(np.searchsorted(rpc_ts, table.ts[r], side="left"))
        while k < len(rpc) and rpc_ts[k] <= table.ts[r] + table.dur[r]:
            c = rpc[k]
            if table.tid[c] == table.tid[r] and max(int(table.in_nelems[c]), int(table.out_nelems[c])) > 0:
                return max(int(table.in_nelems[c]), int(table.out_nelems[c])), max(int(table.group_size[c]), 0)
            k += 1
        sizes = input_elements(table.input_dims[r], lists=kind == "all_reduce")
    else:
        sizes = [max(int(table.in_nelems[r]), int(table.out_nelems[r]), 0)]
    full, part = max(sizes[:2], default=0), min(sizes[:2], default=0)
    if kind != "all_reduce" and part > 0 and len(sizes) >= 2:
        return full, full // part
    return full, max(int(table.group_size[r]), 0)


def _part(name: str) -> str:
    """`layer_L`, `embedding` or `head` of a layer range's name (one ANN matches)."""
    return parse(name).block


def _in_phase(name: str, phase: str) -> bool:
    """A range of `phase`: the `forward` / `backward` range around a pass, or a layer range of it."""
    a = parse(name)
    return name == phase if a is None else a.phase == phase


FORWARD_WORK = ("pre_forward", "post_forward", "root_pre_forward", "forward_prefetch")


def _phase(table: TraceTable, fsdp_outer: int, layer: int, phase_row: int, ts: float,
           last_backward_end: float, on_backward_thread: bool = False) -> str:
    """forward / backward / after_backward of a collective issued at `ts`: from the outermost FSDP2
    range around it (pre_forward vs pre_backward, backward_prefetch, post_backward_*), else the layer
    range or `forward` / `backward` range around it, else after the last backward or not; before it,
    a collective issued on a thread that runs backward layers and no forward one (autograd's, where
    gradient hooks launch a bucket's reduction) is the backward's."""
    if fsdp_outer >= 0:
        what = fsdp_range_unit(str(table.name[fsdp_outer]))[0]
        if what in FORWARD_WORK:
            return "forward"
        if what not in ("all_gather", "all_gather_copy_out"):
            return "backward"
    for r in (layer, phase_row):
        if r >= 0:
            name = str(table.name[r])
            return "backward" if _in_phase(name, "backward") else "forward"
    if ts >= last_backward_end:
        return "after_backward"
    return "backward" if on_backward_thread else "forward"


def fsdp_range_unit(name: str) -> tuple[str, str, bool] | None:
    """(what, unit, prefetch) of an FSDP2 range name, or None."""
    m = FSDP2_RANGE.match(name)
    if not m:
        return None
    what, fqn, target = m.group(1), m.group(2), m.group(3)
    if target is not None:
        return what, target, True
    return what, fqn or ROOT, False


def find_dp_flavour(table: TraceTable, step: int | None = None) -> DPFlavour:
    """The DP flavour of one rank's iteration (`step`: ProfilerStep number, default a steady one)."""
    s = select_step(table, step)
    inside = np.flatnonzero((table.ts >= s.start) & (table.ts < s.end))
    # host events only: their names are short (a unicode copy of the kernels' would cost 0.4 s on
    # an emulated 117B rank, and this runs on every prediction)
    host = inside[(table.cat[inside] == schema.ANNOTATION) | (table.cat[inside] == schema.CPU_OP)]
    names = np.array([str(n) for n in table.name[host]], dtype=object)
    starts = lambda prefix: np.array([n.startswith(prefix) for n in names], dtype=bool)  # noqa: E731
    ann = host[table.cat[host] == schema.ANNOTATION]
    ann_names = names[table.cat[host] == schema.ANNOTATION]
    fsdp2 = host[starts("FSDP::")]
    fsdp1 = bool(np.any(starts(FSDP1_PREFIX)))
    ddp = bool(np.any(starts(DDP_FORWARD) | starts(DDP_REDUCER)))
    parsed = {int(r): fsdp_range_unit(str(table.name[r])) for r in fsdp2}
    prefetches = np.array([r for r in fsdp2 if parsed[int(r)][2]], dtype=np.int64)
    layer_rows = np.array([r for r, n in zip(ann, ann_names) if ANN.match(n)], dtype=np.int64)
    phase_rows = ann[(ann_names == "forward") | (ann_names == "backward")]

    # the collectives: issuing c10d ops, else communication kernels
    ops = host[(table.cat[host] == schema.CPU_OP) & starts("c10d::")]
    if len(ops):
        kinds = {int(r): collective_kind(str(table.name[r])) for r in ops}
    else:   # older traces: the backend's own ranges (nccl:*, gloo:*), else the kernels
        own = host[starts("nccl:") | starts("gloo:") | starts("rccl:")]
        ops = own if len(own) else inside[table.cat[inside] == schema.KERNEL]
        kinds = {int(r): collective_kind(str(table.coll_name[r] or table.name[r])) for r in ops}
    rows = np.array(sorted((r for r, k in kinds.items() if k is not None), key=lambda r: table.ts[r]),
                    dtype=np.int64)
    moe_units = _exchange_units(table, [r for r, k in kinds.items() if k is None], layer_rows)

    order = {}              # FSDP unit -> first pre_forward start: the forward order
    for r, u in parsed.items():
        if u and u[0] == "pre_forward":
            order[u[1]] = min(order.get(u[1], np.inf), float(table.ts[r]))
    units = sorted(order, key=order.get)
    backward = [r for r in np.concatenate([phase_rows, layer_rows])
                if _in_phase(str(table.name[r]), "backward")]
    backward_end = max((float(table.ts[r] + table.dur[r]) for r in backward), default=np.inf)
    forward_tids = {int(table.tid[r]) for r in layer_rows if _in_phase(str(table.name[r]), "forward")}
    backward_tids = {int(table.tid[r]) for r in backward} - forward_tids

    rpc = host[names == "record_param_comms"]      # the message and group, where torch records them
    rpc = rpc[np.argsort(table.ts[rpc], kind="stable")]
    rpc_ts = table.ts[rpc]
    # what encloses each collective on its thread, one sweep per kind of range
    where = (table.pid[rows], table.tid[rows], table.ts[rows])
    fsdp_in, fsdp_out = innermost(table, fsdp2, *where), innermost(table, fsdp2, *where, outermost=True)
    in_prefetch, layer = innermost(table, prefetches, *where), innermost(table, layer_rows, *where)
    phase_row = innermost(table, phase_rows, *where)
    out: list[Collective] = []
    for i, r in enumerate(rows.tolist()):
        ts = float(table.ts[r])
        full, group = _message(table, r, kinds[r], rpc, rpc_ts)
        if fsdp_in[i] >= 0:
            unit = parsed[int(fsdp_in[i])][1]
        else:
            unit = _part(str(table.name[layer[i]])) if layer[i] >= 0 else ""
        phase = _phase(table, int(fsdp_out[i]), int(layer[i]), int(phase_row[i]), ts, backward_end,
                       int(table.tid[r]) in backward_tids)
        if unit in moe_units and kinds[r] != "all_reduce":   # an MoE layer's token counts, not parameters
            continue
        out.append(Collective(kinds[r], unit, phase, bool(in_prefetch[i] >= 0), int(full), int(group), ts, r))

    sizes = {}
    for c in out:
        if c.unit and c.kind in ("all_gather", "reduce_scatter"):
            sizes.setdefault(c.unit, c.elements)
    if len(fsdp2) and not sizes:   # a group of one: the gradient packing names the unit's size
        packs = host[names == "fsdp::chunk_cat"]
        for r, f in zip(packs, innermost(table, fsdp2, table.pid[packs], table.tid[packs], table.ts[packs])):
            dims = table.input_dims[r] or []
            if f >= 0 and dims and isinstance(dims[-1], list) and dims[-1]:
                sizes.setdefault(parsed[int(f)][1], int(np.prod(dims[-1])))
    unit_elements = {u: sizes[u] for u in units if u in sizes}
    flavour = _classify(table, out, units, unit_elements, len(fsdp2) > 0, fsdp1)
    if ddp and flavour.kind == "allreduce":
        flavour.ddp = True
        flavour.reason = _ddp_reason(table, out, host, names)
    flavour.unit_layers = _unit_layers(table, layer_rows, units, order)
    return flavour


def _ddp_reason(table: TraceTable, colls: list[Collective], host: np.ndarray, names: np.ndarray) -> str:
    """What says a step's all-reduces are DDP's gradient buckets: its ranges, when the buckets are
    issued, and on a CPU run the backend's worker threads that run them."""
    sizes = [c.elements for c in colls]
    backward = sum(c.phase == "backward" for c in colls)
    issuing = {int(table.tid[c.row]) for c in colls}
    workers = {int(table.tid[r]) for r, n in zip(host, names) if n.startswith("gloo:")} - issuing
    ran = f", run on {len(workers)} gloo worker thread{'s' if len(workers) > 1 else ''}" if workers else ""
    return (f"torch's DistributedDataParallel ranges ({DDP_FORWARD}, its reducer's copy_bucket_to_grad); "
            f"{len(colls)} all-reduces of gradient buckets ({min(sizes)}-{max(sizes)} elements), {backward} "
            f"issued during the backward by the reducer's autograd hooks{ran}")


def _exchange_units(table: TraceTable, others: list, layer_rows: np.ndarray) -> set:
    """The layer ranges (`layer_3`) holding an all-to-all: an MoE layer's token exchange, beside which its
    all-gathers (the tokens per expert, or the all-gather dispatcher's tokens) carry no parameters."""
    a2a = np.array([r for r in others if classify_name(str(table.name[r]), bare=True) == "all_to_all"], dtype=np.int64)
    if not len(a2a) or not len(layer_rows):
        return set()
    inner = innermost(table, layer_rows, table.pid[a2a], table.tid[a2a], table.ts[a2a])
    return {_part(str(table.name[i])) for i in inner.tolist() if i >= 0}


def _unit_layers(table: TraceTable, layer_rows: np.ndarray, units: list[str], order: dict) -> dict[str, str]:
    """FSDP unit -> the layer range (`layer_L`, `embedding`) that opens first after the unit's
    first pre_forward on its thread: the layer whose parameters the unit's collectives carry."""
    out = {}
    if not len(layer_rows):
        return out
    fwd = [r for r in layer_rows if _in_phase(str(table.name[r]), "forward")]
    fwd.sort(key=lambda r: table.ts[r])
    starts = np.array([table.ts[r] for r in fwd])
    parts = {_part(str(table.name[r])) for r in fwd}
    for u in units:
        if u == ROOT and parts:       # the model itself: its embedding, or on a last pipeline stage its head
            out[u] = "embedding" if "embedding" in parts else "head"
            continue
        k = int(np.searchsorted(starts, order[u], side="left"))
        if k < len(fwd):
            out[u] = _part(str(table.name[fwd[k]]))
    return out


def _classify(table: TraceTable, colls: list[Collective], units: list[str], unit_elements: dict,
              fsdp2: bool, fsdp1: bool) -> DPFlavour:
    n = {k: sum(1 for c in colls if c.kind == k) for k in KINDS}
    groups = sorted({c.group for c in colls if c.group > 0 and c.kind != "all_reduce"})
    group_txt = f", group of {'/'.join(map(str, groups))}" if groups else ""
    counts = ", ".join(f"{n[k]} {k.replace('_', '-')}s" for k in KINDS if n[k])
    mk = lambda kind, reason: DPFlavour(kind, reason, units, unit_elements, colls)  # noqa: E731
    if fsdp2 or fsdp1:
        who = (f"FSDP2 ranges name {len(units)} sharded units ({', '.join(units[:4])}"
               f"{', ...' if len(units) > 4 else ''})" if fsdp2 else "FSDP1 ranges (FullyShardedDataParallel.*)")
        regather = [c for c in colls if c.kind == "all_gather" and c.phase == "backward"]
        rs_units = {c.unit for c in colls if c.kind == "reduce_scatter"}
        hsdp = [c for c in colls if c.kind == "all_reduce" and c.phase != "forward" and
                (c.unit in rs_units or not fsdp2)]
        if n["reduce_scatter"] and hsdp:
            return mk("hsdp", f"{who}; {counts}{group_txt}: an all-reduce follows the reduce-scatters")
        if regather:
            return mk("fsdp_full", f"{who}; {counts} per iteration{group_txt}: {len(regather)} all-gathers "
                                   "again in the backward")
        if n["all_gather"]:
            return mk("fsdp_grad_op", f"{who}; {counts} per iteration{group_txt}: all-gathers in the "
                                      "forward only")
        note = ""
        cap = table.metadata.get("lumosCapture") or {}
        if cap.get("fsdp") in ("full", "grad_op"):
            note = f" (the capture's metadata says fsdp={cap['fsdp']})"
        return mk("fsdp", f"{who}; no collective in the iteration: the group has one rank{note}")
    fwd_ag = [c for c in colls if c.kind == "all_gather" and c.phase == "forward" and c.unit.startswith("layer_")]
    late_ag = [c for c in colls if c.kind == "all_gather" and c.phase == "after_backward"]
    bwd_rs = [c for c in colls if c.kind == "reduce_scatter" and c.phase != "forward"]
    fwd_rs = [c for c in colls if c.kind == "reduce_scatter" and c.phase == "forward"]
    if fwd_ag and bwd_rs and not fwd_rs:
        return mk("zero3", f"no FSDP range; {len(fwd_ag)} all-gathers inside forward layer ranges and "
                           f"{len(bwd_rs)} reduce-scatters in the backward{group_txt}")
    if late_ag and (bwd_rs or n["all_reduce"]) and not fwd_rs:
        return mk("zero12", f"no FSDP range; gradients {'reduce-scattered' if bwd_rs else 'all-reduced'} "
                            f"and {len(late_ag)} all-gathers after the backward (the updated shards)")
    if n["all_reduce"] and not n["all_gather"] and not n["reduce_scatter"]:
        return mk("allreduce", f"{n['all_reduce']} all-reduces (model-parallel ones included) and no "
                               "all-gather or reduce-scatter")
    if not any(n.values()):
        return mk("none", "no all-gather, reduce-scatter or all-reduce in the iteration")
    return mk("unrecognised", f"{counts}: neither buckets nor a sharded pattern (reduce-scatters in the "
                              "forward, or all-gathers with no gradient reduction, are model parallelism's)")


def host_dp_degree(tables, step: int | None = None, flavours: dict | None = None) -> int:
    """The DP degree a run's host-side collectives show, for a run whose device shows none (gloo on
    CPU): for HSDP the world size (shard group x replicas), else the group of its all-gathers /
    reduce-scatters (output over input), else, for all-reduces
    on a run with one process group (`distributedInfo.pg_config`), that group's size; 1 otherwise.
    `flavours`: rank -> `find_dp_flavour` of that rank's table, where the caller has them."""
    best = 1
    for t in tables:
        f = flavours[t.rank] if flavours else find_dp_flavour(t, step)
        if f.kind == "hsdp":   # shard group x replicas: every rank of the run holds a DP share
            best = max(best, int((t.metadata.get("distributedInfo") or {}).get("world_size") or 1))
            continue
        groups = [c.group for c in f.collectives if c.kind != "all_reduce" and c.group > 0]
        if groups:
            best = max(best, max(groups))
            continue
        pgs = (t.metadata.get("distributedInfo") or {}).get("pg_config") or []
        if f.kind == "allreduce" and len(pgs) == 1 and isinstance(pgs[0], dict):
            best = max(best, int(pgs[0].get("pg_size") or 1))
    return best
