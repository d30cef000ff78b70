"""The alpha-beta collective model recovers known latency and bandwidth from synthetic samples."""

import numpy as np
import pytest

from lumos.durations.collectives import AlphaBeta, CollectiveSpec, fit_alpha_beta, rails

PROFILE = {"gpus_per_host": 8, "nics_per_host": 8, "kernel_fixed_us": 5.0,
           "levels": {"intra_host": {"bandwidth_gb_s": 100.0, "step_latency_us": 1.0},
                      "inter_host": {"bandwidth_gb_s": 10.0, "step_latency_us": 7.0}}}


def _truth(kind, nbytes, group, alpha, beta, fixed=5.0):
    n = len(group)
    steps, factor = (1, 1.0) if kind in ("send", "recv") else (2 * (n - 1), 2 * (n - 1) / n)
    return fixed + steps * alpha + factor * nbytes / beta


def test_recovers_intra_host_alpha_and_beta():
    alpha, beta = 3.5, 300e3    # us per step, bytes per us (300 GB/s)
    rng = np.random.default_rng(0)
    samples = []
    for group in [(0, 1), (0, 2, 4, 6), tuple(range(8))]:
        for nbytes in (4.0, 4096.0, 2.5e7, 8e7):
            t = _truth("allreduce", nbytes, group, alpha, beta)
            # a peer sometimes arrives late: only the fastest decile is the transfer
            for wait in rng.exponential(200.0, 30) * (rng.random(30) < 0.5):
                samples.append((CollectiveSpec("allreduce", nbytes, group), t + wait))
            samples.append((CollectiveSpec("allreduce", nbytes, group), t))
            samples.extend([(CollectiveSpec("allreduce", nbytes, group), t)] * 5)
    m = fit_alpha_beta(samples, PROFILE, quantile=0.0)
    assert m.source["intra_host"] == "fit"
    assert m.alpha_us["intra_host"] == pytest.approx(alpha, rel=1e-6)
    assert m.beta_bytes_per_us["intra_host"] == pytest.approx(beta, rel=1e-6)
    assert m.source["inter_host"] == "profile"
    assert m.beta_bytes_per_us["inter_host"] == pytest.approx(10e3)


def test_single_size_inter_host_takes_alpha_from_profile():
    beta = 40e3
    spec = CollectiveSpec("send", 2.5e7, (0, 8))
    t = _truth("send", 2.5e7, (0, 8), 7.0, beta)
    m = fit_alpha_beta([(spec, t)] * 4, PROFILE)
    assert m.source["inter_host"] == "fit beta, profile alpha"
    assert m.alpha_us["inter_host"] == 7.0
    assert m.beta_bytes_per_us["inter_host"] == pytest.approx(beta, rel=1e-9)


def test_multi_rail_bandwidth_and_retime():
    m = AlphaBeta(alpha_us={"intra_host": 2.0, "inter_host": 10.0},
                  beta_bytes_per_us={"intra_host": 300e3, "inter_host": 40e3}, fixed_us=5.0)
    assert rails(tuple(range(0, 16, 2)), 8, 8) == 4       # 4 GPUs of the group on each of 2 hosts
    dp8 = CollectiveSpec("allreduce", 8e7, tuple(range(0, 16, 2)))
    expected = 5.0 + 14 * 10.0 + (14 / 8) * 8e7 / (4 * 40e3)
    assert m.time_us(dp8) == pytest.approx(expected)
    dp4 = CollectiveSpec("allreduce", 8e7, (0, 2, 4, 6))
    assert m.time_us(dp4) == pytest.approx(5.0 + 6 * 2.0 + 1.5 * 8e7 / 300e3)
    # retime keeps the measured waiting: measured - model(old) + model(new)
    assert m.retime(1000.0, dp4, dp8) == pytest.approx(1000.0 - m.time_us(dp4) + m.time_us(dp8))
    assert m.retime(1000.0, dp4, dp4) == 1000.0


def test_two_group_sizes_fit_a_constant_not_the_latency():
    # the emulated 15B base: TP 2 and DP 4 inside a host (2 and 6 ring steps), every collective
    # with a constant part; the latency per step is not identifiable, so the profile's is used
    beta, constant = 250e3, 30.0
    samples = [(CollectiveSpec("allreduce", nbytes, group), _truth("allreduce", nbytes, group, 1.0, beta) + constant)
               for group in [(0, 1), (0, 2, 4, 6)] for nbytes in (4096.0, 2.5e7, 8e7)]
    m = fit_alpha_beta(samples, PROFILE, quantile=0.0)
    assert m.source["intra_host"] == "fit beta and constant, profile alpha"
    assert m.alpha_us["intra_host"] == 1.0
    assert m.level_fixed_us["intra_host"] == pytest.approx(constant)
    assert m.beta_bytes_per_us["intra_host"] == pytest.approx(beta)
    # a TP 8 all-reduce then costs 14 steps of the profile's latency, plus the constant once
    tp8 = CollectiveSpec("allreduce", 2.5e7, tuple(range(8)))
    assert m.time_us(tp8) == pytest.approx(5.0 + constant + 14 * 1.0 + 1.75 * 2.5e7 / beta)


def test_the_profile_reads_the_same_without_omegaconf(tmp_path):
    """load_profile reads plain YAML itself (omegaconf's import is a tenth of a second of every
    `lumos predict`), with omegaconf's YAML 1.2 floats; interpolations still go through omegaconf."""
    from omegaconf import OmegaConf

    from lumos.config import config_dir
    from lumos.durations.collectives import load_profile

    shipped = config_dir() / "predict" / "clusters" / "h100_roce.yaml"
    assert load_profile() == OmegaConf.to_container(OmegaConf.load(shipped), resolve=True)
    p = tmp_path / "cluster.yaml"
    p.write_text("a: 1e3\nb: 5E-6\nc: 12\nd: .5\ne: '1e3'\nf: 1_000\ng: [1.0e+9, x]\n")
    got = load_profile(p)
    assert got == {"a": 1000.0, "b": 5e-06, "c": 12, "d": 0.5, "e": "1e3", "f": 1000, "g": [1e9, "x"]}
    assert got == OmegaConf.to_container(OmegaConf.load(p))
    assert isinstance(got["c"], int) and isinstance(got["a"], float)
    p.write_text("gbps: 200\nnic: ${gbps}\n")
    assert load_profile(p) == {"gbps": 200, "nic": 200}
