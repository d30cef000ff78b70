"""Bootstrap intervals, run-to-run spread and interval coverage on samples with known answers."""

import math

import numpy as np
import pandas as pd
import pytest

from lumos.analysis.statistics import (bootstrap_mean_ci, coverage, interval_coverage, prediction_interval,
                                       run_spread, summarize)


def test_bootstrap_ci_contains_mean_and_is_reproducible():
    x = [2.1, 3.4, 1.9, 2.8, 3.0, 2.2, 2.6, 3.1, 2.4, 2.5]
    ci = bootstrap_mean_ci(x)
    assert ci.n == 10
    assert ci.mean == pytest.approx(2.6)
    assert ci.lo < 2.6 < ci.hi
    # a 95% interval of the mean of this sample is about mean +- 2 * s / sqrt(n) = 2.6 +- 0.29
    assert 2.2 < ci.lo < 2.5 and 2.7 < ci.hi < 3.0
    assert bootstrap_mean_ci(x) == ci  # fixed seed: same interval every time
    wider = bootstrap_mean_ci(x, confidence=0.99)
    assert wider.lo < ci.lo and wider.hi > ci.hi


def test_bootstrap_ci_edge_cases():
    one = bootstrap_mean_ci([4.0])
    assert one.mean == 4.0 and one.n == 1 and math.isnan(one.lo) and math.isnan(one.hi)
    same = bootstrap_mean_ci([1.5, 1.5, 1.5])
    assert (same.mean, same.lo, same.hi, same.n) == (1.5, 1.5, 1.5, 3)
    empty = bootstrap_mean_ci([float("nan")])
    assert empty.n == 0 and math.isnan(empty.mean)
    # nan entries are dropped, not propagated
    assert bootstrap_mean_ci([1.0, float("nan"), 3.0]).mean == 2.0


def test_run_spread_exact_numbers():
    s = run_spread([1.0, 2.0, 3.0, 4.0, 5.0])
    assert (s.n, s.mean, s.min, s.max, s.range) == (5, 3.0, 1.0, 5.0, 4.0)
    assert s.std == pytest.approx(math.sqrt(2.5))
    assert s.cv_pct == pytest.approx(100 * math.sqrt(2.5) / 3)
    single = run_spread([7.0])
    assert (single.n, single.std, single.range, single.cv_pct) == (1, 0.0, 0.0, 0.0)


def test_summarize_groups_in_order_of_appearance():
    df = pd.DataFrame({"cfg": ["b", "a", "b", "a", "b"], "err": [1.0, 10.0, 3.0, 10.0, 2.0]})
    out = summarize(df, ["cfg"], ["err"])
    assert list(out["cfg"]) == ["b", "a"]
    assert list(out["n"]) == [3, 2]
    assert list(out["err_mean"]) == [2.0, 10.0]
    assert out.loc[1, "err_lo"] == 10.0 and out.loc[1, "err_hi"] == 10.0
    assert out.loc[0, "err_lo"] < 2.0 < out.loc[0, "err_hi"]


def test_prediction_interval_and_coverage():
    samples = np.arange(101, dtype=float)  # 0..100
    assert prediction_interval(samples, 0.9) == pytest.approx((5.0, 95.0))
    assert prediction_interval(samples, 0.5) == pytest.approx((25.0, 75.0))
    assert coverage([1, 5, 9], [0, 6, 8], [2, 7, 10]) == pytest.approx(2 / 3)
    with pytest.raises(ValueError):
        coverage([1, 2], [0], [3])
    cases = [samples, samples, samples, samples]
    cov = interval_coverage(cases, [50.0, 80.0, 96.0, 99.0], levels=(0.5, 0.9, 0.95))
    assert cov == {0.5: 0.25, 0.9: 0.5, 0.95: 0.75}
