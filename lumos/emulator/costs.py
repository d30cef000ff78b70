"""Noise-free durations: a roofline for kernels and an alpha-beta model for hierarchical collectives.

These are the emulator's private physics. Jitter, slowness, SM contention and NIC
sharing are applied on top at run time (see engine.py), so the trace never states them.
"""

from __future__ import annotations

import math

import numpy as np

from . import nccl


class KernelCosts:
    """Roofline durations (us) with shape-dependent GEMM efficiency and wave quantization."""

    def __init__(self, cluster, compute):
        self.peak = cluster.peak_bf16_tflops * 1e6      # flop per us
        self.hbm = cluster.hbm_tb_s * 1e6                 # bytes per us
        self.pcie = cluster.pcie_gb_s * 1e3
        self.sms = cluster.num_sms
        self.c = compute

    def gemm(self, m: int, n: int, k: int) -> float:
        c = self.c
        flops = 2.0 * m * n * k
        tiles = math.ceil(m / c.gemm_tile_m) * math.ceil(n / c.gemm_tile_n)
        waves = tiles / self.sms
        wave_eff = waves / math.ceil(waves)
        eff = c.gemm_eff_max * wave_eff * k / (k + c.gemm_k_half)
        t_math = flops / (self.peak * eff)
        t_mem = 2.0 * (m * k + k * n + m * n) / (self.hbm * c.mem_eff)
        return max(t_math, t_mem) + c.gemm_fixed_us

    def gemm_many(self, m: np.ndarray, n, k) -> np.ndarray:
        """`gemm` over arrays of shapes (broadcast), element by element the same numbers."""
        c = self.c
        m, n, k = (np.asarray(x, dtype=float) for x in (m, n, k))
        tiles = np.ceil(m / c.gemm_tile_m) * np.ceil(n / c.gemm_tile_n)
        waves = tiles / self.sms
        with np.errstate(invalid="ignore", divide="ignore"):
            eff = c.gemm_eff_max * (waves / np.ceil(waves)) * k / (k + c.gemm_k_half)
            t_math = 2.0 * m * n * k / (self.peak * eff)
        t_mem = 2.0 * (m * k + k * n + m * n) / (self.hbm * c.mem_eff)
        return np.fmax(t_math, t_mem) + c.gemm_fixed_us

    def attention(self, b: int, s: int, heads: int, d: int, backward: bool) -> float:
        # causal flash attention: half of the 4*b*s^2*h FLOPs; backward does 2.5x the forward
        flops = 2.0 * b * s * s * heads * d * (2.5 if backward else 1.0)
        eff = self.c.attn_bwd_eff if backward else self.c.attn_fwd_eff
        return flops / (self.peak * eff) + self.c.gemm_fixed_us

    def batched_gemm(self, batch: int, m: int, n: int, k: int, backward: bool) -> float:
        """One batched GEMM of unfused attention (QK^T or PV): the attention efficiency, or HBM if slower."""
        eff = self.c.attn_bwd_eff if backward else self.c.attn_fwd_eff
        t_math = 2.0 * batch * m * n * k / (self.peak * eff)
        t_mem = 2.0 * batch * (m * k + k * n + m * n) / (self.hbm * self.c.mem_eff)
        return max(t_math, t_mem) + self.c.gemm_fixed_us

    def elementwise(self, nbytes: float) -> float:
        return nbytes / (self.hbm * self.c.mem_eff) + self.c.elem_fixed_us

    def memset(self, nbytes: float) -> float:
        return nbytes / (self.hbm * 0.9) + 1.5

    def h2d(self, nbytes: float) -> float:
        return nbytes / self.pcie + 2.0

    def d2h(self, nbytes: float) -> float:
        return nbytes / self.pcie + 1.5


class CommCosts:
    """Transfer time (us) of a collective once every peer has arrived.

    Inside a host: ring over NVLink. Across hosts: hierarchical (reduce-scatter on
    NVLink, ring or tree across hosts on each GPU's own NIC, all-gather on NVLink),
    with the NIC shared by concurrent flows and congestion growing with host count.

    `comm.algorithm` picks the latency model and the algorithm: `hier_ring` (the fixed
    per-step latencies of the cluster file, a tree below `tree_threshold_bytes`) or `nccl`
    (NCCL's tuner: algorithm and protocol chosen per call by predicted time, `nccl.py`).
    `flows` is the load already on the NIC a transfer uses, in NICs' worth of flows: with
    `comm.placement: rail` the other flows of the same GPU, with `shared` the host's pool
    (`shared_flows`).
    """

    def __init__(self, cluster, comm, job_hosts: int):
        self.nvl = cluster.nvlink_busbw_gb_s * 1e3 * comm.nvlink_eff    # bytes per us
        self.nvl_p2p = cluster.nvlink_p2p_gb_s * 1e3 * comm.nvlink_eff
        self.nvl_lat = cluster.nvlink_step_latency_us
        self.net_lat = cluster.net_step_latency_us
        self.nic = cluster.nic_gbps / 8.0 * 1e3             # bytes per us per GPU (one NIC each)
        self.nics_per_host = int(getattr(cluster, "nics_per_host", cluster.gpus_per_host))
        self.c = comm
        self.nvl_half = float(comm.nvlink_half_mb or 0.0) * 1e6
        self.congestion = 1.0 + comm.congestion * math.log2(max(job_hosts, 1))
        self.algorithm = str(comm.algorithm)   # checked by settings.from_config
        # which rings across hosts run pipelined (NCCL's model) rather than serial: all-reduce by
        # `ring_form`, all-gather and reduce-scatter by `gather_ring_form`
        self.pipelined_kinds = frozenset(
            ({"allreduce"} if str(getattr(comm, "ring_form", "serial")) == "pipelined" else set())
            | ({"allgather", "reduce_scatter"} if str(getattr(comm, "gather_ring_form", "serial")) == "pipelined"
               else set()))
        self._choice: dict = {}

    def nvl_bw(self, nbytes: float) -> float:
        """NVLink bus bandwidth a collective of this size reaches: NCCL needs large messages to fill
        the links (half of the peak at `nvlink_half_mb`; 0: every size reaches it)."""
        return self.nvl * nbytes / (nbytes + self.nvl_half) if self.nvl_half else self.nvl

    def nic_bw(self, flows: float) -> float:
        return self.nic * self.c.nic_eff / (1 + flows) / self.congestion

    def shared_flows(self, gpu_flows: float) -> float:
        """`flows` of a transfer when the host's NICs are one pool (`comm.placement: shared`): `gpu_flows`
        GPU-to-network flows (this one included) share `nics_per_host` NICs evenly, and no flow runs
        faster than one NIC (a GPU reaches the network through one PCIe link)."""
        return max(gpu_flows / self.nics_per_host - 1.0, 0.0)

    def nccl_choice(self, kind: str, nbytes: float, n: int, hosts: int, per_host: int) -> tuple[str, int]:
        """(algorithm, protocol index) NCCL's tuner picks for this call: the fastest prediction with the
        NIC to itself (the tuner knows the links, not the traffic of the moment)."""
        key = (kind, nbytes, n, hosts, per_host)
        c = self._choice.get(key)
        if c is None:
            algo, proto, _t = nccl.choose(kind, nbytes, n, hosts, per_host, self.nvl, self.nvl_half, self.nic_bw(0),
                                          kind in self.pipelined_kinds, self.nics_per_host)
            c = self._choice[key] = (algo, proto)
        return c

    def kernel_name(self, kind: str, nbytes: float, n: int, hosts: int, per_host: int) -> str:
        """The NCCL kernel's name in the trace: it states the algorithm and protocol the call ran."""
        if kind in ("send", "recv", "alltoall"):   # NCCL runs an all-to-all as grouped sends and receives
            return "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"
        base = {"allreduce": "AllReduce_Sum_bf16", "allgather": "AllGather",
                "reduce_scatter": "ReduceScatter_Sum_bf16"}[kind]
        inter = hosts > 1
        if self.algorithm == "nccl" and n > 1:
            algo, proto = self.nccl_choice(kind, nbytes, n, hosts, per_host)
            proto_name = nccl.PROTOCOLS[proto]
        else:   # hier_ring: fixed size thresholds
            proto_name = "LL" if nbytes < 65536 else ("LL128" if nbytes < 8 << 20 else "SIMPLE")
            algo = "TREE" if (inter and nbytes < self.c.tree_threshold_bytes and kind == "allreduce") else "RING"
        return f"ncclDevKernel_{base}_{algo}_{proto_name}(ncclDevComm*, unsigned long, ncclWork*)"

    def all_to_all(self, nbytes: float, n: int, hosts: int, per_host: int, flows: float, fixed: bool = True) -> float:
        """An all-to-all whose busiest rank sends or receives `nbytes`: every pair exchanges at once (NCCL's
        grouped send/recv, src/device/all_to_all via ncclGroupStart: one step), the share bound for the
        rank's own host over NVLink and the rest over its NIC, the slower of the two setting the time.
        `fixed=False`: no NCCL kernel start (DeepEP's kernels, launched as ordinary kernels)."""
        c = self.c
        k = max(per_host, 1)
        local = (k - 1) / n * nbytes
        remote = (n - k) / n * nbytes
        t = (c.nccl_fixed_us if fixed else 0.0) + (self.net_lat if hosts > 1 else self.nvl_lat)
        return t + max(local / self.nvl_bw(nbytes), remote / self.nic_bw(flows) if remote else 0.0)

    def collective(self, kind: str, nbytes: float, n: int, hosts: int, per_host: int, flows: float) -> float:
        c = self.c
        if kind in ("send", "recv"):
            if hosts <= 1:
                return c.nccl_fixed_us + self.nvl_lat + nbytes / self.nvl_p2p
            return c.nccl_fixed_us + self.net_lat + nbytes / self.nic_bw(flows)
        if kind == "deepep":
            return self.all_to_all(nbytes, n, hosts, per_host, flows, fixed=False)
        if n <= 1:
            return c.nccl_fixed_us
        if kind == "alltoall":
            return self.all_to_all(nbytes, n, hosts, per_host, flows)
        if self.algorithm == "nccl":   # NCCL's base latency stands for nccl_fixed_us
            algo, proto = self.nccl_choice(kind, nbytes, n, hosts, per_host)
            return nccl.time_us(kind, algo, proto, nbytes, n, hosts, per_host, self.nvl, self.nvl_half,
                                self.nic_bw(flows), pipelined=kind in self.pipelined_kinds,
                                nics=self.nics_per_host)
        both = kind == "allreduce"       # all-reduce = reduce-scatter + all-gather
        if hosts <= 1:
            steps = (n - 1) * (2 if both else 1)
            vol = (n - 1) / n * nbytes * (2 if both else 1)
            return c.nccl_fixed_us + steps * self.nvl_lat + vol / self.nvl_bw(nbytes)
        k = max(per_host, 1)
        tree = both and nbytes < c.tree_threshold_bytes
        steps = 2 * math.ceil(math.log2(hosts)) if tree else (hosts - 1) * (2 if both else 1)
        if kind in self.pipelined_kinds and not tree:
            # NCCL's ring (`comm.ring_form` / `gather_ring_form: pipelined`): every link carries (n-1)/n of the message and the
            # slowest sets the pace, the NVLink bus or the k NICs of the group's GPUs on a host together;
            # the latencies are the serial form's
            moved = (n - 1) / n * nbytes * (2 if both else 1)
            net = min(k, self.nics_per_host) * self.nic_bw(flows)
            return (c.nccl_fixed_us + (k - 1) * self.nvl_lat * (2 if both else 1) + steps * self.net_lat
                    + max(moved / self.nvl_bw(nbytes), moved / net))
        t = c.nccl_fixed_us
        if k > 1:   # intra-host phase(s) on NVLink
            t += ((k - 1) / k * nbytes / self.nvl_bw(nbytes) + (k - 1) * self.nvl_lat) * (2 if both else 1)
        vol = (hosts - 1) / hosts * (nbytes / k) * (2 if both else 1)   # the ring of the 1/k shards across hosts
        return t + steps * self.net_lat + vol / self.nic_bw(flows)
