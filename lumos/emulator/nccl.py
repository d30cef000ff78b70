"""NCCL's own choice of algorithm and protocol for a collective, and the time that choice takes.

NCCL does not run one fixed algorithm: at communicator set-up its tuner predicts, for every
collective, algorithm (ring, tree, ...) and protocol (LL, LL128, Simple),

    time = latency(algorithm, protocol, hops) + bytes / bandwidth(algorithm, protocol)

and each call runs the fastest prediction for its size (`ncclTopoTuneModel` and
`ncclTopoGetAlgoTime` in src/graph/tuning.cc). This module is a small model of that rule,
written from the source (NVIDIA/nccl master at 5067397, 2026-06; read, not copied), used by
`CommCosts` when `emulator.comm.algorithm: nccl`:

- latency: a base latency per algorithm and protocol, plus a per-hop latency on NVLink
  (inside a host) or the network (across hosts). A ring of n ranks over h hosts takes
  2(n-1) hops for an all-reduce (n-1 for all-gather / reduce-scatter), 2(h-1) of them
  across hosts, so it grows with the ring length; a tree climbs a chain of k GPUs inside
  each host and a binary tree of depth floor(log2 h) across hosts, up and down again.
- bandwidth: the emulator's own NVLink and NIC bandwidths (its fitted knobs keep their
  meaning; `nvlink_half_mb`'s fill-up term is the same for every protocol), with each
  protocol carrying only part of the peak as data: LL sends 8-byte lines of
  4 data bytes and 4 flag bytes (half), LL128 128-byte lines of 120 data bytes (NCCL uses
  0.92), Simple all of it. The tree reaches 0.92 of the ring's bus bandwidth (less with
  LL: 1/3.8) and moves the whole message up and down each level (the ring 2(n-1)/n of it);
  NCCL corrects the tree further for medium sizes by a measured factor (0.4-1.0).
- hierarchy, as in the rest of the emulator: the ring's bandwidth term is its intra-host
  phases on NVLink plus its inter-host phase on each GPU's NIC (an n-th of the message).

Left out: NVLS / CollNet / PAT (NVLink SHARP, in-network reduction, one GPU per node),
the per-channel bandwidth caps and LL's absolute ceiling (LL only wins on messages too
small for either to matter), and the pipelining of several operations into one launch.
"""

from __future__ import annotations

import math

__all__ = ["ALGORITHMS", "PROTOCOLS", "choose", "latency_us", "time_us", "transfer_us"]

ALGORITHMS = ("TREE", "RING")
PROTOCOLS = ("LL", "LL128", "SIMPLE")
LL, LL128, SIMPLE = 0, 1, 2

# tuning.cc, ncclTunerConstantsDefaults.baseLatencies (us), per protocol (LL, LL128, Simple)
BASE_LAT_US = {"TREE": (6.8, 14.0, 8.4), "RING": (6.6, 14.0, 8.4)}
# tuning.cc hwLatencies (us per hop): NVLink inside a host, NET across hosts
NVLINK_HOP_US = {"TREE": (0.6, 1.25, 4.0), "RING": (0.6, 1.9, 3.4)}
NET_HOP_US = {"TREE": (5.0, 8.5, 14.0), "RING": (2.7, 4.0, 14.0)}
# getNetOverhead: each step of a ring that leaves the host posts a network send (x86 Intel: 1 us,
# Simple 3x), so its intra-host hops cost at least that
NET_OVERHEAD_US = 1.0
NET_OVERHEAD_SIMPLE = 3.0
# ncclTopoGetAlgoTime: the multi-node ring Simple all-reduce latency plateau (compute capability >= 8.0)
RING_SIMPLE_PLATEAU = 1.4
# share of the link bandwidth each protocol carries as data (ring); tree: 0.92 of the ring, then per protocol
RING_PROTO_EFF = (0.5, 0.92, 1.0)
TREE_EFF = 0.92
TREE_PROTO_EFF = (1.0 / 3.8, 120.0 / 128.0, 1.0)    # LL128 inside one host: 7/9
TREE_LL128_ONE_HOST = 7.0 / 9.0
# tuning.cc treeCorrectionFactor: the tree's bandwidth at sizes 64 B x 2^i (i = 0..22), per protocol
TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
)


def _algorithms(kind: str) -> tuple:
    """All-reduce may take the tree; all-gather and reduce-scatter run as rings."""
    return ALGORITHMS if kind == "allreduce" else ("RING",)


def latency_us(kind: str, algo: str, proto: int, n: int, hosts: int, per_host: int) -> float:
    """Predicted latency of one collective over `n` ranks on `hosts` hosts, `per_host` on each."""
    k = max(per_host, 1)
    base = BASE_LAT_US[algo][proto]
    if algo == "TREE":
        depth = int(math.log2(hosts)) if hosts > 1 else 0      # floor, as NCCL's log2i
        return base + 2 * ((k - 1) * NVLINK_HOP_US["TREE"][proto] + depth * NET_HOP_US["TREE"][proto])
    both = kind == "allreduce"
    steps = (n - 1) * (2 if both else 1)
    if hosts <= 1:
        return base + steps * NVLINK_HOP_US["RING"][proto]
    inter = (hosts - 1) * (2 if both else 1)
    overhead = NET_OVERHEAD_US * (NET_OVERHEAD_SIMPLE if proto == SIMPLE else 1.0)
    intra_hop = max(NVLINK_HOP_US["RING"][proto], overhead)
    # one GPU per host: every hop is a network hop, and NCCL charges the tree's (higher) network latency
    net_hop = NET_HOP_US["TREE" if k == 1 else "RING"][proto]
    lat = base + (steps - inter) * intra_hop + inter * net_hop
    if proto == SIMPLE and both:
        lat *= RING_SIMPLE_PLATEAU
    return lat


def _on_nvlink(volume: float, nbytes: float, eff: float, nvl_bw: float, nvl_half: float) -> float:
    """`volume` bytes per GPU over NVLink for a message of `nbytes`: the protocol's share of the peak, plus
    the emulator's fill-up term (a message of `nvl_half` bytes reaches half the peak, whatever the protocol)."""
    return volume / (nvl_bw * eff) + (volume * nvl_half / (nbytes * nvl_bw) if nvl_half and nbytes else 0.0)


def transfer_us(kind: str, algo: str, proto: int, nbytes: float, n: int, hosts: int, per_host: int,
                nvl_bw: float, nvl_half: float, net_bw: float, pipelined: bool = False, nics: int = 8) -> float:
    """Bandwidth term (us). `nvl_bw` is the NVLink bus bandwidth (bytes/us) large messages reach, `nvl_half` the
    message size reaching half of it (0: every size reaches it), `net_bw` what each GPU's NIC gives this call.
    `nbytes` is the message (all-gather / reduce-scatter: the whole gathered buffer). `pipelined`: a ring
    across hosts as tuning.cc models it, (n-1)/n of the message per link at the slowest link's pace (the
    NVLink bus, or the NICs of the `per_host` GPUs, at most `nics`, together), not its two phases added."""
    k = max(per_host, 1)
    if algo == "TREE":   # up the tree and back down: the whole message on every level
        eff = TREE_EFF * (TREE_LL128_ONE_HOST if (proto == LL128 and hosts <= 1) else TREE_PROTO_EFF[proto])
        size_class = int(math.log2(nbytes / 64)) if nbytes >= 64 else -1
        if 0 <= size_class < len(TREE_CORRECTION[proto]):
            eff *= TREE_CORRECTION[proto][size_class]
        t = _on_nvlink(2.0 * nbytes, nbytes, eff, nvl_bw, nvl_half) if k > 1 else 0.0
        if hosts > 1:
            t += 2.0 * (nbytes / k) / (net_bw * eff)
        return t
    eff = RING_PROTO_EFF[proto]
    phases = 2 if kind == "allreduce" else 1
    if hosts <= 1:
        return _on_nvlink(phases * (n - 1) / n * nbytes, nbytes, eff, nvl_bw, nvl_half)
    if pipelined:
        moved = phases * (n - 1) / n * nbytes
        return max(_on_nvlink(moved, nbytes, eff, nvl_bw, nvl_half), moved / (min(k, nics) * net_bw * eff))
    t = _on_nvlink(phases * (k - 1) / k * nbytes, nbytes, eff, nvl_bw, nvl_half) if k > 1 else 0.0
    return t + phases * (hosts - 1) / hosts * (nbytes / k) / (net_bw * eff)   # ring of the shards across hosts


def time_us(kind: str, algo: str, proto: int, nbytes: float, n: int, hosts: int, per_host: int,
            nvl_bw: float, nvl_half: float, net_bw: float, pipelined: bool = False, nics: int = 8) -> float:
    return latency_us(kind, algo, proto, n, hosts, per_host) + \
        transfer_us(kind, algo, proto, nbytes, n, hosts, per_host, nvl_bw, nvl_half, net_bw, pipelined, nics)


def choose(kind: str, nbytes: float, n: int, hosts: int, per_host: int, nvl_bw: float, nvl_half: float,
           net_bw: float, pipelined: bool = False, nics: int = 8) -> tuple[str, int, float]:
    """NCCL's pick: (algorithm, protocol index, predicted us), the fastest prediction; ties keep the
    first in NCCL's order (tree before ring, LL before LL128 before Simple).

    >>> choose("allreduce", 4, 64, 8, 8, 240e3, 0.0, 47e3)[:2]    # a scalar over 8 hosts: the tree, LL
    ('TREE', 0)
    >>> choose("allreduce", 1 << 30, 64, 8, 8, 240e3, 0.0, 47e3)[:2]   # 1 GiB: the ring, Simple
    ('RING', 2)
    """
    best = None
    for algo in _algorithms(kind):
        for proto in (LL, LL128, SIMPLE):
            t = time_us(kind, algo, proto, nbytes, n, hosts, per_host, nvl_bw, nvl_half, net_bw, pipelined, nics)
            if best is None or t < best[2]:
                best = (algo, proto, t)
    return best
