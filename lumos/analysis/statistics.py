"""Statistics over repeated runs: bootstrap intervals, run-to-run spread, interval coverage.

The paper reports one run per configuration and no intervals. Here every
emulated configuration is run over several seeds, so an error can be read
against the noise: a 2% prediction error means little when the actual
iteration time itself moves by 3% from run to run.
- `bootstrap_mean_ci`: mean with a 95% bootstrap confidence interval
  (scipy.stats.bootstrap, fixed seed, so tables are reproducible);
- `run_spread`: std, min-max range and coefficient of variation of a sample
  (the actual iteration time across seeds);
- `prediction_interval` / `interval_coverage`: central intervals from samples
  (a probabilistic replay) and the share of actual values they contain.
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

DEFAULT_CONFIDENCE = 0.95
DEFAULT_RESAMPLES = 9999
DEFAULT_SEED = 0


@dataclass(frozen=True)
class MeanCI:
    """A sample mean with its bootstrap confidence interval (nan bounds when n < 2)."""

    mean: float
    lo: float
    hi: float
    n: int

    def as_dict(self, prefix: str = "") -> dict[str, float]:
        return {f"{prefix}{k}": v for k, v in asdict(self).items()}

    def contains(self, value: float) -> bool:
        return bool(self.lo <= value <= self.hi)


@dataclass(frozen=True)
class Spread:
    """Run-to-run spread of one quantity (e.g. actual iteration time across seeds)."""

    n: int
    mean: float
    std: float      # sample standard deviation (ddof=1); 0 for a single run
    min: float
    max: float
    range: float    # max - min
    cv_pct: float   # 100 * std / mean

    def as_dict(self, prefix: str = "") -> dict[str, float]:
        return {f"{prefix}{k}": v for k, v in asdict(self).items()}


def _finite(values: Iterable[float]) -> np.ndarray:
    x = np.asarray(list(values) if not isinstance(values, np.ndarray) else values, dtype=float).ravel()
    return x[np.isfinite(x)]


def bootstrap_mean_ci(values: Iterable[float], confidence: float = DEFAULT_CONFIDENCE,
                      n_resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED,
                      method: str = "BCa") -> MeanCI:
    """Mean of the finite values with a bootstrap CI of the mean.

    One value has no interval (nan bounds); identical values have a zero-width
    one. BCa can fail on tiny or skewed samples (scipy returns nan); the
    percentile interval is used then.
    """
    x = _finite(values)
    n = len(x)
    if n == 0:
        return MeanCI(float("nan"), float("nan"), float("nan"), 0)
    mean = float(np.mean(x))
    if n == 1:
        return MeanCI(mean, float("nan"), float("nan"), 1)
    if np.ptp(x) == 0:
        return MeanCI(mean, mean, mean, n)
    lo, hi = _bootstrap(x, confidence, n_resamples, seed, method)
    if not (np.isfinite(lo) and np.isfinite(hi)) and method != "percentile":
        lo, hi = _bootstrap(x, confidence, n_resamples, seed, "percentile")
    return MeanCI(mean, lo, hi, n)


def _bootstrap(x: np.ndarray, confidence: float, n_resamples: int, seed: int, method: str) -> tuple[float, float]:
    from scipy import stats   # here: 1 s to import, paid only where a CI is bootstrapped

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # DegenerateDataWarning on tiny samples: handled by the caller
        res = stats.bootstrap((x,), np.mean, n_resamples=n_resamples, confidence_level=confidence,
                              method=method, vectorized=True, rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def run_spread(values: Iterable[float]) -> Spread:
    """Spread of a sample of repeated measurements (finite values only)."""
    x = _finite(values)
    n = len(x)
    if n == 0:
        nan = float("nan")
        return Spread(0, nan, nan, nan, nan, nan, nan)
    mean = float(np.mean(x))
    std = float(np.std(x, ddof=1)) if n > 1 else 0.0
    lo, hi = float(np.min(x)), float(np.max(x))
    cv = 100.0 * std / mean if mean != 0 else float("nan")
    return Spread(n, mean, std, lo, hi, hi - lo, cv)


def summarize(df: pd.DataFrame, by: Sequence[str], columns: Sequence[str],
              confidence: float = DEFAULT_CONFIDENCE, seed: int = DEFAULT_SEED) -> pd.DataFrame:
    """Per group of `by`: for each column, mean and bootstrap CI (`{col}_mean`, `_lo`, `_hi`) and `n`.

    Groups keep their order of first appearance, so tables follow the config's order.
    """
    rows = []
    for key, group in df.groupby(list(by), sort=False):
        key = key if isinstance(key, tuple) else (key,)
        row = dict(zip(by, key))
        row["n"] = len(group)
        for col in columns:
            ci = bootstrap_mean_ci(group[col], confidence=confidence, seed=seed)
            row[f"{col}_mean"], row[f"{col}_lo"], row[f"{col}_hi"] = ci.mean, ci.lo, ci.hi
        rows.append(row)
    return pd.DataFrame(rows)


def prediction_interval(samples: Iterable[float], level: float) -> tuple[float, float]:
    """Central interval holding `level` of the samples (e.g. 0.9 -> 5th to 95th percentile)."""
    x = _finite(samples)
    if len(x) == 0:
        return float("nan"), float("nan")
    tail = 50.0 * (1.0 - level)
    lo, hi = np.percentile(x, [tail, 100.0 - tail])
    return float(lo), float(hi)


def coverage(actual: Iterable[float], lo: Iterable[float], hi: Iterable[float]) -> float:
    """Share of cases whose actual value lies inside its [lo, hi] interval."""
    a, l, h = (np.asarray(list(v), dtype=float) for v in (actual, lo, hi))
    if not (len(a) == len(l) == len(h)):
        raise ValueError(f"coverage needs equal lengths, got {len(a)}, {len(l)}, {len(h)}")
    if len(a) == 0:
        return float("nan")
    return float(np.mean((a >= l) & (a <= h)))


def interval_coverage(samples_per_case: Sequence[Iterable[float]], actual_per_case: Sequence[float],
                      levels: Sequence[float] = (0.5, 0.9, 0.95)) -> dict[float, float]:
    """Observed coverage of the central prediction intervals at each nominal level.

    A calibrated probabilistic replay covers about `level` of the cases at each level.
    """
    out = {}
    for level in levels:
        bounds = [prediction_interval(s, level) for s in samples_per_case]
        out[level] = coverage(actual_per_case, [b[0] for b in bounds], [b[1] for b in bounds])
    return out
