"""The rebuild of a base with Megatron's overlapped pipeline exchange (`--overlap-p2p-communication`): which
kernels each rebuilt step waits for, and the lane a moved exchange kernel follows (`rebuild.py` calls these;
the exchange blocks are read by `lumos.model.p2p_exchange`). `b` is the rebuild's builder (its `lanes`: (kind,
direction) -> the stream role of that direction's kernels), `state` a stage's emission state (`last_on`: the
last task on each processor; `before_last`: the kernel posted before the last on each p2p lane).

A moved exchange kernel also leaves its NIC sharing behind: overlapped, a stage's send and receive run beside
each other on its GPU's NIC whenever the schedule posts them together (after every steady step, with their
waits deferred), and which ones meet is the schedule's. Shorter steps (V 4 from V 2: one layer a chunk, not
two) put more of them together, each then at half the NIC, so a kernel keeps the base's time only up to its
time alone (`unshared`) and the target's replay shares the NIC again (`lumos.predict.nic_sharing`,
`Plan.reshared`)."""

from __future__ import annotations

from lumos.durations import CollectiveSpec
from lumos.durations.collectives import level_of
from lumos.graph.model import TaskKind

_GPU = int(TaskKind.GPU)
# (role, kind) of the moved exchange kernels, shared again in the target's replay (`Plan.reshared`)
RESHARED = frozenset({("pp", "send"), ("pp", "recv")})


def unshared(collectives, dur: float, spec: CollectiveSpec) -> float:
    """A moved inter-host send / receive's time without the base's NIC sharing: the base's time, at most the
    collective model's for the transfer alone (what it took beyond that was the NIC shared with the transfers
    the base's schedule ran beside it, which the target's replay puts back with its own: `nic_sharing`); an
    intra-host one keeps its time (NVLink is not shared there)."""
    if level_of(spec.group, collectives.gpus_per_host) != "inter_host":
        return dur
    return min(dur, collectives.time_us(spec))


def own_lanes(g, st, b, T, coll, p2p_ops) -> dict:
    """An exchange block's kernels by local index: (base stream role, the lane its op runs on here), paired with
    the ops as `rebuild._emit` pairs them; a kernel of the other direction in the base follows its new lane's order."""
    ks = sorted([k for k in range(len(T)) if coll[k] in ("send", "recv")], key=lambda k: g.ts[T[k]])
    avail = {"send": [k for k in ks if coll[k] == "send"], "recv": [k for k in ks if coll[k] == "recv"]}
    out = {}
    for op in p2p_ops:
        if avail[op[0]] and op in b.lanes:
            k = avail[op[0]].pop(0)
            out[k] = (int(st.proc_role[g.proc[T[k]]]), b.lanes[op])
    return out


def overlap_waits(b, state, phase: str, leading: bool, cooldown: bool) -> list[int]:
    """The overlapped exchange's waits before a step (Megatron's `pp_pre_forward` / `pp_pre_backward`): the
    compute stream waits for the receive of the step's input, the last posted on its direction's lane (none
    for the `leading` step, the model's first forward chunk or last backward one), and for the last forward send
    (freed once sent: `deallocate_pipeline_outputs`); a cool-down backward also for the last backward send (its
    exchange waited at once). A base step that was not the first of its chunk has no such edge of its own, and
    a copied step's own would name the wrong send (a backward send is waited one exchange later), so the rebuild
    makes every step's (`rebuild._emit` drops the copies'); a forward also waits for the backward send before
    the last (`pp_post_backward` waits for the previous one after posting the next)."""
    keys = [("recv", "fwd"), ("send", "fwd")] if phase == "forward" else \
        [("recv", "bwd"), ("send", "fwd")] + ([("send", "bwd")] if cooldown else [])
    if leading:
        keys = keys[1:]
    got = [state["last_on"].get((_GPU, b.lanes[k])) for k in keys if k in b.lanes]
    if phase == "forward" and ("send", "bwd") in b.lanes:
        got.append(state.get("before_last", {}).get((_GPU, b.lanes[("send", "bwd")])))
    return [t for t in got if t is not None]
