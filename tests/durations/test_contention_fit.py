"""Compute kernels slowed under communication (lumos.durations.contention): exact shares and
fits on hand-made kernels, invariants on random ones, and what recorded traces give (measured on
hardware: a public A100 trace and our single-GPU H200 base)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from lumos.graph.model import TaskKind
from lumos.graph.run_graph import build_run_graph
from lumos.intervals import intersection_length, share_under, union
from lumos.trace import load_run, load_trace
from lumos.durations.contention import Contention, base_shares, fit_contention, weighted_median
from lumos.predict.options import PredictOptions
from lumos.predict.whatif import base_plan

ROOT = Path(__file__).resolve().parents[2] / "resources" / "traces"


def _share(kernels, comm):
    k, c = np.array(kernels, float).reshape(-1, 2), np.array(comm, float).reshape(-1, 2)
    return share_under(k[:, 0], k[:, 1], c[:, 0], c[:, 1]).tolist()


def test_share_under_communication_counts_overlapping_collectives_once():
    assert _share([[0, 10]], [[5, 15]]) == [0.5]
    assert _share([[0, 10]], [[0, 2], [4, 6]]) == [0.4]
    assert _share([[0, 10]], [[2, 6], [4, 8]]) == [0.6]        # two streams at once: one union
    assert _share([[0, 10], [20, 30], [5, 5]], [[25, 40]]) == [0.0, 0.5, 0.0]   # an empty kernel: 0
    assert _share([[0, 10]], np.zeros((0, 2))) == [0.0]


@settings(max_examples=200, deadline=None)
@given(hs.lists(hs.tuples(hs.floats(0, 100), hs.floats(0, 30)), min_size=1, max_size=8),
       hs.lists(hs.tuples(hs.floats(0, 100), hs.floats(0, 30)), max_size=8))
def test_share_under_is_the_overlap_with_the_union_over_the_kernel(kernels, comm):
    ks = np.array([k[0] for k in kernels]); ke = ks + np.array([k[1] for k in kernels])
    cs = np.array([c[0] for c in comm], float); ce = cs + np.array([c[1] for c in comm], float)
    got = share_under(ks, ke, cs, ce)
    assert np.all((got >= 0) & (got <= 1))
    u = union(cs, ce)
    for a, b, s in zip(ks, ke, got):
        want = intersection_length((np.array([a]), np.array([b])), u) / (b - a) if b > a else 0.0
        assert s == pytest.approx(want, abs=1e-9)


def _occurrences(kernel: str, under: list, clear: list):
    return [kernel] * (len(under) + len(clear)), under + clear, [1.0] * len(under) + [0.0] * len(clear)


def test_the_fit_is_the_time_weighted_median_of_each_kernels_under_over_clear_ratio():
    rows = [_occurrences("gemm|A", [112, 112, 112, 500], [100, 100, 100]),     # 1.12, 836 us under
            _occurrences("gemm|B", [240, 240, 240], [200, 200, 200]),          # 1.20, 720 us
            _occurrences("norm|C", [33, 33, 33], [30, 30, 30]),                # 1.10, 99 us
            _occurrences("tiny|D", [3, 3, 3], [2, 2, 2]),                      # under 10 us: not read
            _occurrences("half|E", [50, 50], [40, 40, 40])]                    # 2 under: not read
    keys, dur, share = (np.array(sum((r[i] for r in rows), []), dtype=object if i == 0 else float)
                        for i in range(3))
    fit = fit_contention(keys, dur, share)
    assert fit.kernels == 3 and fit.ratios == pytest.approx((1.1, 1.12, 1.2))
    assert fit.slowdown == pytest.approx(0.12)        # half of 1,655 us of weight lies at or below 1.12
    # a kernel partly under communication (share 0.5) takes part in neither side
    assert fit_contention(keys, dur, np.where(share == 1.0, 0.5, share)).kernels == 0


def test_fewer_than_three_kernels_say_nothing_and_a_speedup_floors_at_zero():
    two = [_occurrences("a", [120] * 3, [100] * 3), _occurrences("b", [120] * 3, [100] * 3)]
    keys, dur, share = (np.array(sum((r[i] for r in two), []), dtype=object if i == 0 else float) for i in range(3))
    assert fit_contention(keys, dur, share) == Contention(0.0, kernels=2, ratios=(1.2, 1.2))
    faster = [_occurrences(k, [90] * 3, [100] * 3) for k in "abc"]
    keys, dur, share = (np.array(sum((r[i] for r in faster), []), dtype=object if i == 0 else float) for i in range(3))
    assert fit_contention(keys, dur, share).slowdown == 0.0


def test_alone_and_beside_undo_each_other_and_weighted_median_takes_the_lower_on_a_tie():
    c = Contention(0.12)
    dur, share = np.array([112.0, 106.0, 100.0]), np.array([1.0, 0.5, 0.0])
    assert c.alone(dur, share).tolist() == pytest.approx([100.0, 100.0, 100.0])
    assert c.beside(c.alone(dur, share), share).tolist() == pytest.approx(dur.tolist())
    assert weighted_median(np.array([3.0, 1.0, 2.0]), np.array([1.0, 1.0, 2.0])) == 2.0
    assert weighted_median(np.array([1.0, 2.0]), np.array([1.0, 1.0])) == 1.0


def test_a_public_a100_trace_shows_its_long_kernels_twice_as_slow_under_nccl():
    """HTA's trace_diff control rank (A100, NCCL on its own streams; resources/traces/real/hta): by
    kernel name, 4 kernels of 10 us or more run both wholly under and wholly clear of NCCL."""
    t = load_trace(ROOT / "real" / "hta" / "trace_diff__control__control.json.gz")
    g = build_run_graph([t])
    tasks = np.flatnonzero((g.kind == TaskKind.GPU) & ~g.comm.astype(bool) & (g.event >= 0)
                           & np.array([not str(n).startswith("Mem") for n in g.name]))
    dur, share = base_shares(g, [t], tasks)
    assert len(tasks) == 1436 and int(np.count_nonzero(share >= 0.99)) == 340
    fit = fit_contention(np.array([str(n) for n in g.name[tasks]], dtype=object), dur, share)
    assert fit.kernels == 4 and fit.ratios == pytest.approx((1.4545, 2.0, 2.0, 2.45), abs=1e-4)
    assert fit.slowdown == pytest.approx(1.0)


def test_a_single_gpu_base_has_nothing_to_fit_and_keeps_its_durations():
    tables = load_run(ROOT / "h200" / "base_r0")
    fitted, off = base_plan(tables), base_plan(tables, PredictOptions(contention="off"))
    assert fitted.contention == Contention(0.0) and off.contention.mode == "off"
    assert np.array_equal(fitted.graph.dur, off.graph.dur)


def test_an_unknown_contention_mode_is_refused_by_name():
    with pytest.raises(ValueError, match="contention must be one of fit, off, got 'always'"):
        base_plan(load_run(ROOT / "h200" / "base_r0"), PredictOptions(contention="always"))
