"""Every duration supplier implements the one protocol (`lumos.durations.base.DurationSupplier`), and its
`retime` agrees with the methods the prediction calls."""

from __future__ import annotations

import numpy as np
import pytest

from lumos.durations import AlphaBeta, CollectiveSpec, ComputeModel, ComputeSpec, DurationSupplier
from lumos.durations.clocks import ClockWindow, SustainedClock
from lumos.durations.contention import NO_CONTENTION, Contention
from lumos.durations.dp_host import HookCost, HookSpec, HostCollectiveCosts

COMPUTE = ComputeModel(fixed_us={"gemm": 0.0, "attention": 0.0, "elementwise": 2.0}, sms=0)
COLLECTIVES = AlphaBeta(alpha_us={"intra_host": 5.0, "inter_host": 10.0},
                        beta_bytes_per_us={"intra_host": 100.0, "inter_host": 25.0}, fixed_us=6.0)
CLOCK = SustainedClock(boost_ms=900.0, dip_ms=100.0, dip=0.15, steady=0.05)
HOSTS = HostCollectiveCosts(dp=2, sharding="fsdp_full", hooks={("pre_forward", False): HookCost(40.0, 0.001, (10, 20), 3)},
                            outside_scale=1.1, recordings=[])


def test_every_supplier_is_a_duration_supplier():
    for s in (COMPUTE, COLLECTIVES, CLOCK, Contention(0.12), NO_CONTENTION, HOSTS):
        assert isinstance(s, DurationSupplier), type(s).__name__
    assert not isinstance(object(), DurationSupplier)


def test_clock_retime_is_the_ratio_of_mean_slowdowns():
    # 500 ms wholly in the boost (1.0) against 0..2000 ms: 900 at 1.0, 100 at 1.15, 1000 at 1.05 -> 1.0325
    assert CLOCK.retime(100.0, ClockWindow(0.0, 500.0), ClockWindow(0.0, 2000.0)) == pytest.approx(103.25)
    assert CLOCK.retime(100.0, ClockWindow(0.0, 2000.0), ClockWindow(0.0, 2000.0)) == pytest.approx(100.0)


def test_contention_retime_takes_out_the_measured_share_and_puts_back_the_new():
    c = Contention(0.12)
    assert c.retime(112.0, 1.0, 0.0) == pytest.approx(100.0)
    assert c.retime(100.0, 0.0, 0.5) == pytest.approx(106.0)
    assert c.retime(100.0, 0.25, 0.25) == pytest.approx(100.0)
    assert float(c.beside(c.alone(np.array([112.0]), np.array([1.0])), np.array([0.5]))[0]) == c.retime(112.0, 1.0, 0.5)
    assert NO_CONTENTION.retime(80.0, 1.0, 0.0) == 80.0


def test_host_collectives_retime_adds_what_the_larger_group_adds():
    one, two = HookSpec(("pre_forward", False), 15_000, 1), HookSpec(("pre_forward", False), 15_000, 2)
    assert HOSTS.retime(100.0, one, two) == pytest.approx(100.0 + 40.0 + 15.0)
    assert HOSTS.retime(100.0, one, one) == 100.0
    with pytest.raises(ValueError, match="from DP 1 to DP 2"):
        HOSTS.retime(100.0, two, HookSpec(("pre_forward", False), 15_000, 4))


def test_collective_retime_keeps_the_measured_and_adds_the_model_change():
    # ring all-reduce within a host: 6 us fixed + 2(n-1) x 5 us + 2(n-1)/n x bytes / 100 bytes/us
    one_mb, two_mb = CollectiveSpec("allreduce", 1e6, tuple(range(8))), CollectiveSpec("allreduce", 2e6, tuple(range(8)))
    assert COLLECTIVES.retime(250.0, one_mb, two_mb) == pytest.approx(250.0 + 2 * 7 / 8 * 1e6 / 100)
    assert COLLECTIVES.retime(250.0, one_mb, one_mb) == 250.0


def test_compute_retime_scales_a_gemm_by_its_flops():
    old = ComputeSpec("aten::mm", ((64, 128), (128, 256)))
    wider = ComputeSpec("aten::mm", ((64, 128), (128, 512)))
    assert COMPUTE.retime(50.0, old, wider) == pytest.approx(100.0)
    assert COMPUTE.retime(50.0, old, old) == pytest.approx(50.0)
