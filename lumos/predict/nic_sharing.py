"""Transfers that newly cross hosts share their GPU's NIC with the others in flight.

A collective that ran inside one host in the base ran over NVLink, alone: its measured time has no
NIC in it. Scaled out (a DP degree that spans hosts), it goes over the NIC of its GPU, and so does
every other inter-host transfer of that GPU. Where two run at once they split the NIC's bandwidth.
FSDP shows it: the backward's reduce-scatter of one layer runs beside the prefetched all-gather of
the next, on two streams (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py). The alpha-beta
model times each transfer with the NIC to itself, so without sharing, every backward collective of
an FSDP base predicted at DP 8-32 came out about half as long as the emulated cluster ran it
(docs/notes/2026-12-06-nic-sharing.md).

The model, a fluid share per GPU (each transfer in flight gets 1/n of the NIC):
- a transfer's time is the collective model's bandwidth term (`AlphaBeta.transfer_us`); what the
  task takes beyond it (latency, the base's peer waiting) runs first, at full rate;
- the transfers that share are those of one rank whose process group spans hosts in the target;
  only those whose (role, kind) stayed inside a host in the base are slowed: a transfer that
  crossed hosts in the base has its own sharing in its measured time, so it only takes a share, unless
  the rebuild moved it and took that sharing out (`Plan.reshared`: the overlapped pipeline exchange,
  `lumos.transform.p2p_overlap.unshared`), where it is slowed as a new one;
- a moved pipeline transfer (`Plan.reshared`) is one transfer at both ends: the send and its receive
  take the longer of the two ends' shared times (each end is shared on its own rank's NIC);
- the starts come from a replay, the shared durations change the replay, so it is replayed again
  until no duration moves by more than half a microsecond, together with the compute slowed under
  communication (`fixed_point.py`), which moves the starts this reads.
"""

from __future__ import annotations

import heapq

import numpy as np

from lumos.durations import CollectiveSpec
from lumos.durations.collectives import level_of
from lumos.transform.plan import Plan

from .fixed_point import Effect

__all__ = ["crossing", "shared_durations", "nic_effect"]


def crossing(plan: Plan) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(tasks, transfer_us, slowed) of the plan's inter-host transfers: each one's bandwidth term, and
    whether it crosses hosts only in this plan (not in the base it was derived from) or had its base
    sharing taken out (`Plan.reshared`)."""
    g, st = plan.graph, plan.st
    gph = plan.collectives.gpus_per_host
    tasks, transfer, slowed = [], [], []
    for t in np.flatnonzero(g.comm & (st.coll != None)).tolist():  # noqa: E711 (element-wise)
        group = st.group[t]
        if not group or len(group) < 2 or level_of(group, gph) != "inter_host":
            continue
        tasks.append(t)
        transfer.append(plan.collectives.transfer_us(CollectiveSpec(st.coll[t], st.nbytes[t], group)))
        key = (plan.role[t], st.coll[t])
        slowed.append(key not in plan.base_crossing or key in plan.reshared)
    return (np.asarray(tasks, dtype=np.int64), np.asarray(transfer, dtype=np.float64),
            np.asarray(slowed, dtype=bool))


def shared_durations(start: np.ndarray, dur: np.ndarray, transfer: np.ndarray, slowed: np.ndarray,
                     stream: np.ndarray) -> np.ndarray:
    """Durations of one NIC's transfers under a fair share: each slowed one's transfer (its last
    `transfer` us) runs at 1/n of the NIC while n transfers are in it; the others keep their time
    and take a share over their last `transfer` us. A stream runs one at a time: a transfer held up
    by sharing delays the next one on its stream (which the replay's start does not know yet)."""
    transfer = np.minimum(transfer, dur)
    pre = dur - transfer                        # the part before the transfer, which nothing slows
    out = dur.astype(np.float64).copy()
    queues: dict = {}                           # stream -> its tasks, latest first
    for i in sorted(range(len(start)), key=lambda i: (start[i], i), reverse=True):
        queues.setdefault(stream[i], []).append(i)
    begins = []                                 # heap of (transfer begins, task)

    def release(q: list, free_at: float) -> None:
        if q:
            i = q.pop()
            heapq.heappush(begins, (max(start[i], free_at) + pre[i], i))

    for q in queues.values():
        release(q, -np.inf)
    arrived = np.zeros(len(start))              # when each one's stream let it start
    left: dict = {}                             # slowed transfer in flight -> work left (us at full rate)
    fixed: dict = {}                            # unslowed transfer in flight -> its end
    now = -np.inf
    while begins or left or fixed:
        n = len(left) + len(fixed)
        first = min(left, key=left.get) if left else -1
        t_done = now + left[first] * n if left else np.inf
        t_fixed = min(fixed.values()) if fixed else np.inf
        t = min(begins[0][0] if begins else np.inf, t_fixed, t_done)
        if left:
            step = (t - now) / n
            for i in left:
                left[i] -= step
        now = t
        if t == t_done:             # the one that finishes first, exactly (not by rounding)
            left[first] = 0.0
        ended = [i for i, w in left.items() if w <= 1e-9] + [i for i, e in fixed.items() if e <= now]
        for i in ended:
            left.pop(i, None)
            fixed.pop(i, None)
            out[i] = now - arrived[i]
            release(queues[stream[i]], now)
        while begins and begins[0][0] <= now:
            b, i = heapq.heappop(begins)
            arrived[i] = b - pre[i]
            if transfer[i] <= 0:
                out[i] = dur[i]
                release(queues[stream[i]], b)
            elif slowed[i]:
                left[i] = transfer[i]
            else:
                fixed[i] = b + transfer[i]
    return out


def _pair_ends(plan: Plan, tasks: np.ndarray) -> np.ndarray:
    """(n, 2) positions in `tasks` of the two ends of each moved point-to-point transfer (`Plan.pairs` whose
    ends are both of `Plan.reshared`): the emulator and NCCL move its bytes once, at the pace of the busier
    of the two NICs, where the fluid share above times each end on its own rank's NIC alone."""
    if not plan.reshared:
        return np.zeros((0, 2), dtype=np.int64)
    role, coll = plan.role, plan.st.coll
    pos = {int(t): i for i, t in enumerate(tasks.tolist()) if (role[t], coll[t]) in plan.reshared}
    out = [(pos[a], pos[b]) for g in plan.pairs if len(g) == 2 and (a := int(g[0])) in pos and (b := int(g[1])) in pos]
    return np.asarray(out, dtype=np.int64).reshape(-1, 2)


def nic_effect(plan: Plan, graph):
    """The newly crossing transfers as a schedule-dependent effect (`fixed_point.Effect`), or None
    where no transfer of the plan crosses hosts only in the target."""
    if "nic_crossing" not in plan.memo:
        plan.memo["nic_crossing"] = crossing(plan)
    tasks, transfer, slowed = plan.memo["nic_crossing"]
    if not slowed.any():
        return None
    base = graph.dur[tasks]
    ranks = graph.rank[tasks]
    procs = graph.proc[tasks]
    ends = _pair_ends(plan, tasks)

    def durations(sched) -> np.ndarray:
        new = base.copy()
        for r in np.unique(ranks):
            m = ranks == r
            new[m] = shared_durations(sched.start[tasks[m]], base[m], transfer[m], slowed[m], procs[m])
        if len(ends):   # a send and its receive are one transfer: it lasts as long as the busier NIC lets it
            both = np.maximum(new[ends[:, 0]], new[ends[:, 1]])
            new[ends[:, 0]] = new[ends[:, 1]] = both
        return new

    def summary(shared: np.ndarray) -> dict:
        out = {"slowed": int(np.count_nonzero(shared > base + 1e-9)), "of": int(slowed.sum()),
               "added_ms": round(float(np.sum(shared - base)) / 1e3, 3)}
        if plan.reshared:   # of them, the moved ones whose base sharing the rebuild took out
            out["reshared"] = int(sum((plan.role[t], plan.st.coll[t]) in plan.reshared for t in tasks.tolist()))
        return out

    return Effect("nic_sharing", tasks, base, durations, summary)

