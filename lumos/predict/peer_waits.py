"""Peer waits of the base's data-parallel collectives, replayed as when the peers arrive.

A DP collective's peers are not in the predicted graph (one rank per stage is), so what the
base's kernel waited for them is in its measured duration. The transform keeps that wait as
kernel time (`AlphaBeta.retime`: measured + the model's change). That is right while the
kernel starts where it started in the base; it is not when the target's longer transfers queue
the buckets behind each other, since a queued bucket starts after its peers are ready and waits
for nobody. Seen on the pipeline's emulated 15B base: one seed whose buckets waited up to 5.8 ms
predicts DP 8 at +2.9%, one whose buckets never waited at -2.5% (docs/notes/2026-12-05-peer-waits.md).
With `peer_waits="anchored"` each wait becomes an arrival instead:

- split: an occurrence's transfer is at most its class's median (class: rank, kind, message,
  group size; 5 occurrences or more) times the model's time. Waiting only lengthens a
  collective, so the lower half of a class shows how its transfer varies, and what an
  occurrence takes beyond the median is waiting. The transfer part scales with the model
  (transfer noise is a share of the transfer), the wait does not.
- arrival: the peers were ready `offset` after the end of the collective's latest predecessor
  on another GPU stream (the kernel whose event released it: its gradient bucket), measured in
  the base's replay. A peer is the same program as this rank, so in the target it is ready that
  long after the same anchor ends; the collective ends no earlier than that arrival plus its
  transfer (a floor on its end, `Graph.finish_floor`).
- replay: the floors are absolute times, so they are set from one replay, the graph replayed
  again, until no floor moves by more than half a microsecond. A floor only delays, so the
  rounds rise to the fixed point the relative floor defines. An interval's samples settle their
  own floors the same way (`uncertainty.monte_carlo`'s `arrivals`), so the peers arrive after
  each sample's own anchors.

Only where the target's graph holds the base's tasks re-timed (a DP or speed change: no
rebuild); a rebuilt graph has no task of the base to anchor to.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lumos.durations import CollectiveSpec
from lumos.graph.model import TaskKind
from lumos.transform.plan import Plan

__all__ = ["PEER_WAIT_MODES", "TRANSFER_CAPS", "PeerWaits", "resolve_mode", "holds_base_tasks", "dp_collectives",
           "read_peer_waits", "apply_peer_waits", "settle"]

PEER_WAIT_MODES = ("auto", "additive", "anchored")
MIN_CLASS = 5          # occurrences a class needs before its median tells transfer from waiting
TOLERANCE_US = 0.5     # the replays stop when no floor moves by more
MAX_ROUNDS = 50


@dataclass(frozen=True)
class PeerWaits:
    tasks: np.ndarray      # int64: DP collectives of the base split into transfer and wait
    transfer: np.ndarray   # float64: each one's transfer / the model's time (<= its class median)
    wait_us: np.ndarray    # float64: measured minus transfer
    anchors: np.ndarray    # int64: latest predecessor on another GPU stream (-1: none; the wait stays kernel time)
    offsets: np.ndarray    # float64: peers ready this long after the anchor's end (base replay)

    def arrivals(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(tasks, anchors, offsets) of the anchored ones."""
        a = self.anchors >= 0
        return self.tasks[a], self.anchors[a], self.offsets[a]

    def as_dict(self) -> dict:
        a = self.anchors >= 0
        return {"collectives": int(len(self.tasks)), "anchored": int(a.sum()),
                "wait_ms": round(float(self.wait_us.sum()) / 1e3, 3),
                "anchored_wait_ms": round(float(self.wait_us[a].sum()) / 1e3, 3)}


def _spec(plan: Plan, t: int) -> CollectiveSpec:
    return CollectiveSpec(plan.st.coll[t], plan.st.nbytes[t], plan.st.group[t])


TRANSFER_CAPS = ("class", "shape")


def dp_collectives(plan: Plan) -> tuple[np.ndarray, np.ndarray, list[tuple]]:
    """The base's DP collectives over more than one rank (no send/recv), the model's time of each (us)
    and each one's class (rank, kind, message bytes, group size)."""
    g = plan.graph
    dp = np.flatnonzero((plan.role == "dp") & g.comm).astype(np.int64)
    dp = dp[[len(plan.st.group[t]) > 1 and plan.st.coll[t] not in ("send", "recv") for t in dp]]
    model = np.array([plan.collectives.time_us(_spec(plan, t)) for t in dp.tolist()])
    keys = [(int(g.rank[t]), plan.st.coll[t], float(plan.st.nbytes[t]), len(plan.st.group[t])) for t in dp.tolist()]
    return dp, model, keys


def read_peer_waits(plan: Plan, start: np.ndarray, end: np.ndarray, cap: str = "shape") -> PeerWaits:
    """Split the base's DP collectives and find their anchors; `start`/`end`: the base's replay.

    `cap="shape"` caps each class's median at the lowest class median of its shape on the rank
    (message and group size: the same bytes over the same links), for a class whose every occurrence
    waits: an FSDP base's last reduce-scatters, where a peer replica was slower, sit at 2-3.6x the
    model while the all-gathers of the same shape sit at 1.0-1.1. `cap="class"` (each class's own
    median) carried that wait as transfer into the target's re-timing (`studies/peer_waits/wait_split.py`
    and `studies/emulator/peer_standins.py` compare the two)."""
    if cap not in TRANSFER_CAPS:
        raise ValueError(f"cap must be one of {', '.join(TRANSFER_CAPS)}, got {cap!r}")
    g = plan.graph
    dp, model, keys = dp_collectives(plan)
    ratio = np.where(model > 0, g.dur[dp] / np.where(model > 0, model, 1.0), 1.0)
    limit = np.full(len(dp), np.inf)
    members: dict = {}
    for i, k in enumerate(keys):
        members.setdefault(k, []).append(i)
    for idx in members.values():
        if len(idx) >= MIN_CLASS:
            limit[idx] = np.median(ratio[idx])
    if cap == "shape":
        shape = [(k[0], k[2], k[3]) for k in keys]
        lowest: dict = {}
        for sh, m in zip(shape, limit.tolist()):
            lowest[sh] = min(lowest.get(sh, np.inf), m)
        limit = np.where(np.isfinite(limit), np.minimum(limit, [lowest[sh] for sh in shape]), limit)
    split = np.isfinite(limit) & (model > 0)
    dp, ratio, limit, model = dp[split], ratio[split], limit[split], model[split]
    transfer = np.minimum(ratio, limit)
    wait = np.maximum(g.dur[dp] - model * transfer, 0.0)
    anchors = np.full(len(dp), -1, dtype=np.int64)
    offsets = np.zeros(len(dp))
    src, dst = np.asarray(g.src), np.asarray(g.dst)
    order = np.argsort(dst, kind="stable")
    lo, hi = np.searchsorted(dst[order], dp, "left"), np.searchsorted(dst[order], dp, "right")
    for i, (t, a, b) in enumerate(zip(dp.tolist(), lo.tolist(), hi.tolist())):
        preds = src[order[a:b]]
        preds = preds[(g.kind[preds] == TaskKind.GPU) & (g.proc[preds] != g.proc[t])]
        if len(preds) and wait[i] > 0:
            u = int(preds[np.argmax(end[preds])])
            anchors[i], offsets[i] = u, float(start[t] + wait[i] - end[u])
    return PeerWaits(dp, transfer, wait, anchors, offsets)


def resolve_mode(base: Plan, mode: str) -> str:
    """`auto`: anchored for a sharded base, additive for an all-reduce one. A sharded base's DP
    collectives are many (FSDP: every unit's gather in every micro-batch), each waiting for its peers,
    so kept as kernel time those waits stand for most of what a gather takes beyond its transfer;
    on the pipeline's FSDP base, anchored reads DP x2 / x4 / x8 at -2.7 / -1.4 / -4.2% over 10 seeds
    against -5.3 / -4.6 / -7.6% additive (docs/notes/2026-12-06-nic-sharing.md, its 10-seed columns;
    docs/notes/2026-12-06-fsdp-seed-spread.md). On the all-reduce base additive reads closer to the
    seeds' mean (docs/notes/2026-12-05-peer-waits.md)."""
    if mode not in PEER_WAIT_MODES:
        raise ValueError(f"peer_waits must be one of {', '.join(PEER_WAIT_MODES)}, got {mode!r}")
    if mode == "auto":
        return "anchored" if base.sharding else "additive"
    return mode


def holds_base_tasks(base: Plan, out: Plan) -> bool:
    """Whether `out`'s graph is the base's tasks re-timed (a change of DP or speed alone)."""
    return out.graph.n_tasks == base.graph.n_tasks and np.array_equal(out.graph.event, base.graph.event)


def apply_peer_waits(base: Plan, out: Plan, waits: PeerWaits) -> None:
    """Re-time `out`'s copies of the split collectives: the model's time x the transfer part, plus
    the wait where there is no anchor. `out` must hold the base's tasks (no rebuild)."""
    if not holds_base_tasks(base, out):
        raise ValueError("--peer-waits anchored needs a target whose graph is the base's tasks re-timed "
                         "(a change of DP or speed alone); this target rebuilds the graph")
    model = np.array([out.collectives.time_us(_spec(out, t)) for t in waits.tasks.tolist()])
    out.graph.dur[waits.tasks] = model * waits.transfer + np.where(waits.anchors < 0, waits.wait_us, 0.0)


def settle(out: Plan, waits: PeerWaits, replay):
    """Replay `out` (`replay(plan) -> (graph, schedule, result)`) with each anchored collective's end
    floored at its anchor's end + offset + its duration, round after round until no floor moves by
    more than `TOLERANCE_US`. Returns (graph, schedule, result, rounds); `out.graph.finish_floor`
    holds the last floors."""
    g = out.graph
    tasks, anchors, offsets = waits.arrivals()
    base = np.full(g.n_tasks, -np.inf) if g.finish_floor is None else g.finish_floor.copy()
    g.finish_floor = base.copy()
    graph, sched, result = replay(out)
    rounds = 0
    while len(tasks) and rounds < MAX_ROUNDS:
        floor = base.copy()
        floor[tasks] = np.maximum(base[tasks], sched.end[anchors] + offsets + g.dur[tasks])
        if np.max(np.abs(floor[tasks] - g.finish_floor[tasks])) <= TOLERANCE_US:
            break
        g.finish_floor = floor
        graph, sched, result = replay(out)
        rounds += 1
    return graph, sched, result, rounds
