"""nccl-tests output read as collective samples (lumos/durations/nccl_tests.py), the levels a base lacks fitted on
them (`fit_alpha_beta(reference=...)`), and the emulated cluster's own nccl-tests output
(lumos/emulator/nccl_tests.py) read back as written."""

from __future__ import annotations

import pytest

from lumos.config import compose
from lumos.durations.collectives import CollectiveSpec, fit_alpha_beta, load_profile
from lumos.durations.nccl_tests import read_nccl_tests
from lumos.emulator.costs import CommCosts
from lumos.emulator.nccl_tests import LAYOUTS, SIZES, TESTS, sweep_text, write_sweeps
from lumos.emulator.settings import from_config
from lumos.errors import UserError

# the layout of nccl-tests 2.13 (a root column; the test named), two hosts of two GPUs; times made up
NEW = """# Collective test starting: all_reduce_perf
# nThread 1 nGpus 1 minBytes 524288 maxBytes 4194304 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  11 on     nodeA device  0 [0x1b] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid  12 on     nodeA device  1 [0x43] NVIDIA H100 80GB HBM3
#  Rank  2 Group  0 Pid  13 on     nodeB device  0 [0x1b] NVIDIA H100 80GB HBM3
#  Rank  3 Group  0 Pid  14 on     nodeB device  1 [0x43] NVIDIA H100 80GB HBM3
#
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
      524288        131072     float     sum      -1    40.10   13.07   19.61      0    39.80   13.17   19.76      0
     1048576        262144     float     sum      -1    61.50   17.05   25.58      0    60.90   17.22   25.82      0
     2097152        524288     float     sum      -1    N/A      N/A     N/A      N/A   101.2   20.72   31.08      0
     4194304       1048576     float     sum      -1    180.2   23.28   34.91      0    179.9   23.31   34.97      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 27.6
"""
# an older layout (no root column, no "Collective test starting"): the test comes from the file name
OLD = """# nThread 1 nGpus 8 minBytes 1048576 maxBytes 2097152 step: 2(factor) warmup iters: 5 iters: 20 validation: 1
#
# Using devices
""" + "".join(f"#   Rank  {r} Pid  100 on     gpu01 device  {r} [0x00] NVIDIA A100-SXM4-40GB\n" for r in range(8)) + """#
#                                                     out-of-place                       in-place
#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error
     1048576        262144   float     sum    24410    0.04    0.04  0e+00    24425    0.04    0.04  0e+00
     2097152        524288   float     sum    33.80   62.05   54.29  0e+00    33.50   62.60   54.78  0e+00
"""


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_rows_of_a_new_and_an_old_layout(tmp_path):
    new = _write(tmp_path, "two_nodes.log", NEW)
    old = _write(tmp_path, "reduce_scatter_perf-1node.txt", OLD)
    samples, said = read_nccl_tests([new, old], gpus_per_host=8)
    # 512 KiB is below MIN_BYTES, N/A skipped; two hosts of two GPUs: ranks 0, 1 and 8, 9; the out-of-place time
    assert samples[:2] == [(CollectiveSpec("allreduce", 1048576.0, (0, 1, 8, 9)), 61.5),
                           (CollectiveSpec("allreduce", 4194304.0, (0, 1, 8, 9)), 180.2)]
    # no root column: the fifth column is the time, even where it reads as an integer
    assert samples[2:] == [(CollectiveSpec("reduce_scatter", 1048576.0, tuple(range(8))), 24410.0),
                           (CollectiveSpec("reduce_scatter", 2097152.0, tuple(range(8))), 33.8)]
    assert said == ["two_nodes.log: all_reduce_perf, 4 GPUs on 2 host(s), 2 sizes 1 MiB-4 MiB",
                    "reduce_scatter_perf-1node.txt: reduce_scatter_perf, 8 GPUs on 1 host(s), 2 sizes 1 MiB-2 MiB"]


@pytest.mark.parametrize("text, name, message", [
    (NEW.replace("# Collective test starting: all_reduce_perf\n", ""), "run.log",
     "run.log: which test made it is not said"),
    ("\n".join(line for line in NEW.splitlines() if "Rank" not in line), "all_reduce_perf.txt",
     "no '#  Rank N Group G Pid P on HOST device D' line"),
    (NEW.replace("#  Rank  3 Group  0 Pid  14 on     nodeB device  1 [0x43] NVIDIA H100 80GB HBM3\n", ""), "x.log",
     r"2 hosts with \[1, 2\] GPUs each"),
    ("\n".join(line for line in NEW.splitlines() if not line.startswith("   ") or "524288 " in line), "x.log",
     "no row of 1 MiB or more with a time"),
])
def test_what_cannot_be_read_is_said(tmp_path, text, name, message):
    with pytest.raises(UserError, match=message):
        read_nccl_tests([_write(tmp_path, name, text)], gpus_per_host=8)


def test_more_gpus_on_a_host_than_the_profile_has(tmp_path):
    with pytest.raises(UserError, match="8 GPUs on one host, more than the cluster profile's gpus_per_host 4"):
        read_nccl_tests([_write(tmp_path, "reduce_scatter_perf.txt", OLD)], gpus_per_host=4)


def test_a_level_without_samples_takes_the_reference_fit():
    profile = load_profile()
    # the reference: intra-host all-reduces of 2, 4 and 8 GPUs, t = 10 + 3 us per step + moved / 100 GB/s
    ref_samples = [(CollectiveSpec("allreduce", s, tuple(range(n))),
                    profile["kernel_fixed_us"] + 10.0 + 3.0 * 2 * (n - 1) + 2 * (n - 1) / n * s / 100e3)
                   for n in (2, 4, 8) for s in (1e6, 1e7, 1e8)]
    ref = fit_alpha_beta(ref_samples, profile, sweep=True)
    assert ref.alpha_us["intra_host"] == pytest.approx(3.0)
    assert ref.beta_bytes_per_us["intra_host"] == pytest.approx(100e3)
    assert ref.level_fixed_us["intra_host"] == pytest.approx(10.0)
    none = fit_alpha_beta([], profile, reference=ref)
    assert none.source == {"intra_host": "nccl-tests (fit with fill-up)", "inter_host": "profile"}
    assert ref.fill_us["intra_host"] == pytest.approx(0.0, abs=1e-6)
    spec = CollectiveSpec("allreduce", 25e6, (0, 1))
    assert none.time_us(spec) == pytest.approx(ref.time_us(spec))
    # a level the base has samples of keeps its own fit
    own = fit_alpha_beta([(CollectiveSpec("allreduce", 4e6, (0, 1)), 100.0)], profile, reference=ref)
    assert own.source["intra_host"] == "fit beta, profile alpha"


@pytest.fixture(scope="module")
def cluster():
    s = from_config(compose("emulate", ["out=x"]))
    return s


def test_the_emulated_sweep_prints_the_emulators_times(cluster, tmp_path):
    ccost = CommCosts(cluster.cluster, cluster.knobs.comm, 2)
    text = sweep_text(ccost, "all_gather_perf", 2, 8, "GPU")
    rows = [line.split() for line in text.splitlines() if line and not line.startswith("#")]
    assert [int(r[0]) for r in rows] == list(SIZES)
    t = ccost.collective("allgather", float(1 << 25), 16, 2, 8, 0.0)
    row = rows[SIZES.index(1 << 25)]
    assert float(row[5]) == pytest.approx(t, abs=0.05)
    assert float(row[7]) == pytest.approx((1 << 25) / t / 1e3 * 15 / 16, abs=0.006)   # busbw = algbw x (n-1)/n
    path = _write(tmp_path, "x.log", text)
    samples, _ = read_nccl_tests([path], gpus_per_host=8)
    assert samples[SIZES.index(1 << 25)] == (CollectiveSpec("allgather", float(1 << 25), tuple(range(16))),
                                             round(t, 1))


def test_every_test_and_layout_is_written(tmp_path):
    written = write_sweeps(compose("emulate", ["out=x"]), tmp_path)
    assert sorted(p.name for p in written) == sorted(f"{t}.{h}x{g}.txt" for h, g in LAYOUTS for t in TESTS)
    samples, said = read_nccl_tests(written, gpus_per_host=8)
    assert len(samples) == len(written) * len(SIZES) and len(said) == len(written)


@pytest.mark.parametrize("kind, n, hosts", [("allreduce", 2, 1), ("allreduce", 8, 1), ("allgather", 4, 1),
                                            ("reduce_scatter", 8, 1), ("send", 2, 1), ("send", 16, 2)])
@pytest.mark.parametrize("nbytes", [0.5e6, 25e6, 80e6])
def test_the_fit_on_the_emulated_sweep_gives_the_emulators_times(cluster, tmp_path_factory, kind, n, hosts, nbytes):
    # the emulator's hier_ring model inside a host is exactly constant + steps x latency + moved / bandwidth +
    # factor x fill-up, and its send/recv a line of its own: the sweep's fit returns it, below the sweep's sizes too
    out = tmp_path_factory.getbasetemp() / "sweep"
    if not out.exists():
        write_sweeps(compose("emulate", ["out=x"]), out)
    samples, _ = read_nccl_tests(sorted(out.iterdir()), gpus_per_host=8)
    model = fit_alpha_beta(samples, load_profile(), sweep=True)
    group = (0, 8) if kind == "send" and hosts > 1 else tuple(range(n))
    emulated = CommCosts(cluster.cluster, cluster.knobs.comm, hosts).collective(kind, nbytes, n if kind != "send" else 2,
                                                                               hosts, 1 if hosts > 1 else n, 0.0)
    assert model.time_us(CollectiveSpec(kind, nbytes, group)) == pytest.approx(emulated, rel=0.01)
