"""The GPU side: streams as FIFO simpy processes, and the fabric where collective peers meet.

A kernel's duration is decided when it starts: roofline base x rank slowness x
lognormal jitter x SM contention (an NCCL kernel active on the same device). A
collective kernel starts when its stream reaches it and ends when the transfer,
which begins only once the slowest peer has arrived, is done.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

COMPUTE, COMM, WAIT = 0, 1, 2
MP_STREAM = 36   # the model-parallel group's NCCL stream, only with schedule.grad_norm_group: model_parallel
AG_STREAM = 40   # FSDP's all-gather stream, only with training.dp_sharding: fsdp
CP_STREAM = 44   # the context-parallel group's NCCL stream, only with parallel.cp > 1 (the ring form: its sends)
CP_RECV_STREAM = 46   # the ring form's receives (training.cp_form: ring)
P2P_KINDS = ("pp", "cpp")   # groups of two whose calls are sends and receives (a pipeline's, a CP ring's pairs)
EP_STREAM = 48   # the expert-parallel dispatch and combine (NCCL or DeepEP kernels), only with an MoE model


class Rand:
    """Buffered draws from one numpy Generator (scalar draws are slow in Python)."""

    def __init__(self, rng: np.random.Generator, size: int = 8192):
        self.rng, self.size = rng, size
        self._n = self._u = None
        self._ni = self._ui = size

    def normal(self) -> float:
        if self._ni >= self.size:
            self._n = self.rng.standard_normal(self.size).tolist()
            self._ni = 0
        self._ni += 1
        return self._n[self._ni - 1]

    def uniform(self) -> float:
        if self._ui >= self.size:
            self._u = self.rng.random(self.size).tolist()
            self._ui = 0
        self._ui += 1
        return self._u[self._ui - 1]

    def lognormal(self, sigma: float) -> float:
        # the hottest call of a big emulation: normal() inlined (same draws, same order)
        if not sigma:
            return 1.0
        i = self._ni
        if i >= self.size:
            self._n = self.rng.standard_normal(self.size).tolist()
            i = 0
        self._ni = i + 1
        return math.exp(sigma * self._n[i])


class Thread:
    """A CPU thread of a rank: its own clock and its open ops (`rank.RankProgram` advances it)."""
    __slots__ = ("t", "tid", "pre", "gap", "stack")

    def __init__(self, tid, pre, gap):
        self.t, self.tid, self.pre, self.gap = 0.0, tid, pre, gap
        self.stack = []


class Item:
    __slots__ = ("kind", "ready", "spec", "corr", "ext", "done", "wait_on", "comm", "stream")

    def __init__(self, kind, ready, spec=None, corr=0, ext=0, wait_on=None, comm=None):
        self.kind, self.ready, self.spec, self.corr, self.ext = kind, ready, spec, corr, ext
        self.wait_on, self.comm = wait_on, comm
        self.done = None


class Comm:
    """One collective or point-to-point call as seen by one rank (`repeat` back-to-back calls
    of the same size when granularity=stage folds a stage's layers into one block)."""
    __slots__ = ("group", "kind", "nbytes", "key", "args", "src", "dst", "repeat", "lead")

    def __init__(self, group, kind, nbytes, key, args, src=-1, dst=-1, repeat=1):
        self.group, self.kind, self.nbytes, self.key, self.args = group, kind, nbytes, key, args
        self.src, self.dst, self.repeat = src, dst, repeat
        # how much later than this rank the busiest stand-in peer has its data ready, beyond the drift
        # (an expert-parallel exchange after the experts: the rank whose experts got the most tokens)
        self.lead = 0.0


class Stream:
    def __init__(self, device, sid: int):
        self.dev, self.sid, self.env = device, sid, device.env
        self.items: deque = deque()
        self.wake = None
        self.last_done = None
        self.data_ready = 0.0     # when the data the next collective sends was produced
        self.env.process(self._run())

    def submit(self, item: Item) -> None:
        item.done = self.env.event()
        self.items.append(item)
        self.last_done = item.done
        if self.wake is not None:
            w, self.wake = self.wake, None
            w.succeed()

    def _run(self):
        env, dev, items = self.env, self.dev, self.items
        rec, sid = dev.recorder, self.sid
        while True:
            if not items:
                self.wake = env.event()
                yield self.wake
                continue
            it = items.popleft()
            if it.ready > env.now:
                yield env.timeout(it.ready - env.now)
            if it.kind == WAIT:
                w = it.wait_on
                if w is not None and w.callbacks is not None:
                    yield w
                self.data_ready = max(it.ready, w.value) if w is not None else it.ready
                it.done.succeed(env.now)
                continue
            start = env.now
            spec = it.spec
            if it.kind == COMM:
                dev.active_comm += 1
                yield dev.fabric.arrive(dev, it.comm, start, max(self.data_ready, it.ready))
                dev.active_comm -= 1
                extra = it.comm.args
            else:
                dur = spec.base_us * dev.slowness * dev.rand.lognormal(dev.jitter * spec.jitter_scale)
                if dev.active_comm:
                    dur *= 1.0 + dev.comm_slowdown * spec.contended
                dev.busy += dur
                yield env.timeout(dur)
                extra = {"bytes": spec.nbytes} if spec.nbytes else None
            rec.gpu.append((start, env.now, spec.cat, spec.name, sid, it.corr, it.ext, extra))
            it.done.succeed(env.now)


class Device:
    """One emulated GPU: its streams, its speed, and whether NCCL currently holds SMs."""

    STREAMS = (7, 20, 24, 28, 32)

    def __init__(self, env, rank, slowness, knobs, rand, recorder, fabric, sharded: bool = False,
                 ring: bool = False, cp: bool = False, moe: bool = False, cp_ring: bool = False):
        self.env, self.rank, self.slowness = env, rank, slowness
        self.jitter = knobs.compute.jitter_sigma
        self.comm_slowdown = knobs.compute.comm_slowdown   # SM share an active NCCL kernel takes
        self.rand, self.recorder, self.fabric = rand, recorder, fabric
        self.active_comm = 0
        self.busy = 0.0           # compute time so far: peers drift apart only while computing
        sids = self.STREAMS + ((MP_STREAM,) if knobs.schedule.grad_norm_group == "model_parallel" else ()) \
            + ((AG_STREAM,) if sharded else ()) + ((29, 33) if ring else ()) + ((CP_STREAM,) if cp else ()) \
            + ((EP_STREAM,) if moe else ()) + ((CP_RECV_STREAM,) if cp_ring else ())
        # (29, 33: rank.SEND_BWD_S, RECV_BWD_S)
        self.streams = {sid: Stream(self, sid) for sid in sids}


class _Meeting:
    __slots__ = ("arrivals", "event", "expected")

    def __init__(self, env, expected):
        self.arrivals = []
        self.event = env.event()
        self.expected = expected


class Fabric:
    """Rendezvous of collective peers, with statistical stand-ins for ranks not emulated in full.

    A peer that is not emulated has the same data ready at ref_ready + lag, where the lag
    grows with the compute time since the group last synchronized: (its slowness / ours
    - 1) * compute plus a random walk of its own kernel jitter. DP peers live in other
    pipelines (whose pace is set by their slowest rank), so their drift accumulates over
    the whole iteration. A model-parallel group (TP x PP) holds one emulated rank per stage;
    the virtual TP peers of each stage lag that stage's rank, since their last TP collective.

    NIC sharing (`comm.placement`): `rail` keeps the end times of the inter-host flows of each
    GPU's own NIC; `shared` keeps those of each host's pool of NICs, each flow weighted by the
    GPUs it stands for (a stage's emulated rank stands for every rank of its stage on its host,
    which run the same call on their own groups at the same time).
    """

    def __init__(self, env, topo, slowness, knobs, comm_costs, rng):
        self.env, self.topo, self.slow = env, topo, slowness
        # pace of each rank's pipeline replica: its slowest member
        dp_idx = np.array([topo.coords(r)[1] for r in range(topo.world)])
        rep = np.array([slowness[dp_idx == d].max() for d in range(topo.dp)])
        self.replica_slow = rep[dp_idx]
        self.costs, self.rand = comm_costs, Rand(rng)
        self.comm_sigma = knobs.comm.jitter_sigma
        self.peer_sigma = knobs.peers.noise_sigma
        self.peer_tau = knobs.peers.noise_tau_us
        self.pending: dict = {}
        self.last_busy: dict = {}
        self.nic: dict[int, list] = {}          # rail: rank -> end times of its NIC's flows
        self.shared = knobs.comm.placement == "shared"
        self.host_nic: dict[int, list] = {}     # shared: host -> [(end time, GPUs it stands for)]
        self._weights: dict = {}                # (group, rank) -> GPUs of the host one flow stands for
        self.emulated = set(topo.emulated)
        self.rng = rng
        self._ratios: dict = {}   # (group, rank) -> relative slowness of its virtual peers
        self._cost: dict = {}     # collective shape -> transfer time (a pure function of the shape)

    def _ratio(self, g, ref: int, virtual: np.ndarray) -> np.ndarray:
        """How much slower each virtual peer is than `ref` (DP peers: their whole replica's pace)."""
        if g.kind in P2P_KINDS:   # the virtual end of a send/recv pair depends on the call
            key = (g.key, ref, tuple(virtual.tolist()))
        else:
            key = (g.key, ref)
        r = self._ratios.get(key)
        if r is None:
            slow = self.replica_slow if g.kind in ("dp", "edp") else self.slow
            r = self._ratios[key] = slow[virtual] / slow[ref] - 1.0
        return r

    def arrive(self, dev, comm: Comm, t: float, ready: float):
        rank = dev.rank
        m = self.pending.get(comm.key)
        if m is None:
            g = comm.group
            if g.kind in P2P_KINDS:
                expected = sum(1 for r in (comm.src, comm.dst) if r in self.emulated)
            else:
                expected = len(g.real)
            m = _Meeting(self.env, expected)
            self.pending[comm.key] = m
        m.arrivals.append((t, rank, ready, dev.busy))
        if len(m.arrivals) >= m.expected:
            del self.pending[comm.key]
            self._resolve(m, comm)
        return m.event

    def _resolve(self, m: _Meeting, comm: Comm) -> None:
        g = comm.group
        t_real, ref, ready, busy = max(m.arrivals)
        t_sync = t_real
        if g.kind in P2P_KINDS:
            virtual = [r for r in (comm.src, comm.dst) if r not in self.emulated]
            virtual = np.array(virtual, dtype=np.int64)
        else:
            virtual = g.virtual
        if g.kind == "mp" and len(virtual):
            t_sync = self._mp_sync(m, g, virtual, t_sync)
        elif len(virtual):
            if g.kind in ("dp", "edp"):   # peers in other pipelines: drift over the whole iteration
                work = busy
            else:
                work = max(busy - self.last_busy.get((g.key, ref), 0.0), 0.0)
            ratio = self._ratio(g, ref, virtual)
            z = self.rng.standard_normal(len(virtual))
            lag = work * ratio + z * self.peer_sigma * math.sqrt(work * self.peer_tau)
            t_sync = max(t_sync, ready + float(lag.max()) + comm.lead)
        for a in m.arrivals:
            self.last_busy[(g.key, a[1])] = a[3]
        inter = g.hosts > 1
        flows = 0
        if inter and self.shared:
            flows, own = self._pool_flows(m, g, t_sync)
        elif inter:
            for a in m.arrivals:
                lst = self.nic.get(a[1])
                if lst:
                    lst[:] = [e for e in lst if e > t_sync]
                    flows = max(flows, len(lst))
        shape = (comm.kind, comm.nbytes, len(g.ranks), g.hosts, g.per_host, flows)
        dur = self._cost.get(shape)
        if dur is None:
            dur = self._cost[shape] = self.costs.collective(*shape)
        dur *= comm.repeat
        t_end = t_sync + dur * self.rand.lognormal(self.comm_sigma / math.sqrt(comm.repeat))
        if inter and self.shared:
            for h, w in own.items():
                self.host_nic.setdefault(h, []).append((t_end, w))
        elif inter:
            for a in m.arrivals:
                self.nic.setdefault(a[1], []).append(t_end)
        ev = m.event
        tmo = self.env.timeout(t_end - self.env.now)
        tmo.callbacks.append(lambda _e, ev=ev: ev.succeed())

    def _mp_sync(self, m: _Meeting, g, virtual: np.ndarray, t_sync: float) -> float:
        """Arrival of a model-parallel group's virtual ranks: each stage's TP peers lag that stage's
        emulated rank by the drift since their last TP collective (the stages themselves are real)."""
        topo = self.topo
        stage_of = {topo.coords(a[1])[0]: a for a in m.arrivals}
        v_stage = np.array([topo.coords(int(v))[0] for v in virtual])
        for s in sorted(set(v_stage.tolist())):
            a = stage_of.get(s) or max(m.arrivals)
            _t, ref, ready, busy = a
            peers = virtual[v_stage == s]
            work = max(busy - self.last_busy.get((topo.tp_group(ref).key, ref), 0.0), 0.0)
            z = self.rng.standard_normal(len(peers))
            ratio = self.slow[peers] / self.slow[ref] - 1.0   # once per iteration: not cached
            lag = work * ratio + z * self.peer_sigma * math.sqrt(work * self.peer_tau)
            t_sync = max(t_sync, ready + float(lag.max()))
        return t_sync

    def _pool_flows(self, m: _Meeting, g, t_sync: float) -> tuple[float, dict]:
        """`flows` of a transfer over pooled NICs: the busiest host among the emulated peers' hosts, with
        the GPU-flows already running there and those of this call (every copy of it on that host)."""
        own: dict[int, float] = {}
        for a in m.arrivals:
            key = (g.key, a[1])
            w = self._weights.get(key)
            if w is None:
                n, n_em = self.topo.copies_on_host(g, a[1])
                w = self._weights[key] = n / max(n_em, 1)
            h = self.topo.host(a[1])
            own[h] = own.get(h, 0.0) + w
        flows = 0.0
        for h, w in own.items():
            lst = self.host_nic.get(h)
            active = 0.0
            if lst:
                lst[:] = [e for e in lst if e[0] > t_sync]
                active = sum(x[1] for x in lst)
            flows = max(flows, self.costs.shared_flows(active + w))
        return flows, own
