"""What nccl-tests would print on the emulated cluster: the collective benchmark a user runs on the cluster
they are about to rent, before any training job, here run on the stand-in cluster.

NVIDIA's nccl-tests (`all_reduce_perf -b 1M -e 1G -f 2` and its siblings) time each collective alone, over
a range of sizes, on the GPUs it is given, and print one row per size: the time of one call and the
bandwidth it reached (nccl-tests README and doc/PERFORMANCE.md: algbw = size / time, busbw = algbw x
2(n-1)/n for all-reduce, x (n-1)/n for all-gather and reduce-scatter, x 1 for send/recv). `lumos predict
--nccl-tests` reads that output to time the collectives a one-GPU base lacks (lumos/durations/nccl_tests.py).

The times here are the emulator's own transfer model (`costs.CommCosts.collective`) with the links to
themselves: no other traffic on the NICs, no compute beside it, no random draw. What a training job adds
to them (NIC sharing, peers arriving late, congestion of a larger job) is what a prediction from these
logs has to get right, or miss, as it would from a real cluster's logs. The output keeps nccl-tests'
layout (a `#  Rank` line per GPU naming its host; size, count, type, redop, root, then out-of-place
time, algbw, busbw, #wrong and the same in place), so the reader is the one a real log goes through.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from lumos.trace.atomic import write_text_atomic

from .costs import CommCosts
from .settings import from_config

__all__ = ["TESTS", "LAYOUTS", "SIZES", "sweep_text", "write_sweeps"]

# test binary -> (emulator kind, bus-bandwidth factor of n ranks, reduction printed)
TESTS = {
    "all_reduce_perf": ("allreduce", lambda n: 2.0 * (n - 1) / n, "sum"),
    "all_gather_perf": ("allgather", lambda n: (n - 1) / n, "none"),
    "reduce_scatter_perf": ("reduce_scatter", lambda n: (n - 1) / n, "sum"),
    "sendrecv_perf": ("send", lambda n: 1.0, "sum"),
}
# (hosts, GPUs per host) of each run: one host's 2, 4 and 8 GPUs (`-g 2|4|8`), then 2 and 4 hosts of 8
LAYOUTS = ((1, 2), (1, 4), (1, 8), (2, 8), (4, 8))
SIZES = tuple(1 << p for p in range(20, 31))   # -b 1M -e 1G -f 2
BYTES_PER_ELEMENT = 2                          # -d bfloat16, as the training runs' collectives


def sweep_text(ccost: CommCosts, test: str, hosts: int, per_host: int, gpu: str) -> str:
    """One nccl-tests run's output: `test` over `hosts` x `per_host` GPUs of the emulated cluster."""
    kind, busbw_factor, redop = TESTS[test]
    n = hosts * per_host
    lines = [f"# Collective test starting: {test}",
             (f"# nThread 1 nGpus 1 minBytes {SIZES[0]} maxBytes {SIZES[-1]} step: 2(factor) warmup iters: 5 "
              "iters: 20 agg iters: 1 validation: 0 graph: 0"), "#", "# Using devices"]
    lines += [f"#  Rank {r:2d} Group  0 Pid {1000 + r:6d} on {f'host{r // per_host}':>10} device {r % per_host:2d} "
              f"[0x{r % per_host:02x}] {gpu}" for r in range(n)]
    lines += ["#", f"#{'out-of-place':>62}{'in-place':>31}",
              ("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw"
               "   busbw #wrong"),
              ("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)"
               "  (GB/s)")]
    for size in SIZES:
        t = ccost.collective(kind, float(size), n, hosts, per_host, 0.0)
        algbw = size / t / 1e3
        busbw = algbw * busbw_factor(n)
        cols = f"{t:8.1f} {algbw:7.2f} {busbw:7.2f} {0:6d}"
        lines.append(f"{size:12d}  {size // BYTES_PER_ELEMENT:12d}  {'bfloat16':>8}  {redop:>6}  {-1:6d}  {cols} {cols}")
    return "\n".join(lines) + "\n"


def write_sweeps(cfg: DictConfig, out: str | Path) -> list[Path]:
    """Every test of TESTS at every layout of LAYOUTS that fits the cluster, written into `out` as
    `<test>.<hosts>x<gpus>.txt`; the paths written."""
    s = from_config(cfg)
    gph = int(s.cluster.gpus_per_host)
    gpu = f"{s.cluster.gpu_name} (EMULATED, cluster {s.cluster.name})"
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for hosts, per_host in LAYOUTS:
        if per_host > gph:
            continue
        ccost = CommCosts(s.cluster, s.knobs.comm, hosts)   # congestion as a job of this many hosts sees it
        for test in TESTS:
            path = out / f"{test}.{hosts}x{per_host}.txt"
            write_text_atomic(path, sweep_text(ccost, test, hosts, per_host, gpu))
            written.append(path)
    return written
