"""Draw task durations and edge lags from a duration model, for Monte Carlo replays.

A point replay takes each task's measured duration; an interval needs many
replays, each with durations another iteration could have had. This module
only turns a fitted model (`DurationModel`, arrays) and one vector of random
numbers into one vector of durations and lags; the fit from a trace lives in
`lumos.analysis.spread`, the replay loop and the quantiles in
`lumos.analysis.uncertainty`.

For task i, with u the sample's uniforms and f its speed factors:

    dur[i] = (base[i] * pool(task_pool[i], u[task_u[i]]) + pool(wait_pool[i], u[wait_u[i]])) * f[factor[i]]

where pool(c, x) is the empirical quantile x of pool c (a sorted slice of
`pool_val`), a missing pool (-1) reads as 1 for the ratio and 0 for the wait,
and a missing factor as 1. Tasks that share a draw index (the members of one
collective instance) get the same ratio. Edge lags alike:
lag[j] = lag_base[j] * pool(lag_pool[j], u[lag_u[j]]). A pool of ones and no
factor reproduce the point durations bit for bit.

`draws` makes the random numbers with numpy's Generator, so the compiled
sampler (`sample_compiled`) and the plain one (`sample_reference`) read the
very same numbers; the tests hold their durations equal.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

__all__ = ["DurationModel", "draws", "sample_reference", "sample_compiled"]


@dataclass
class DurationModel:
    """Per-task and per-edge sampling plan of one graph (edges in the graph's order)."""
    base: np.ndarray         # float64 per task: the duration a ratio of 1 gives
    task_pool: np.ndarray    # int64 per task: ratio pool (-1: fixed at base)
    task_u: np.ndarray       # int64 per task: uniform index (shared by one collective's members)
    wait_pool: np.ndarray    # int64 per task: pool of waits added in us (-1: none)
    wait_u: np.ndarray       # int64 per task
    factor: np.ndarray       # int64 per task: speed factor (-1: none)
    lag_base: np.ndarray     # float64 per edge
    lag_pool: np.ndarray     # int64 per edge (-1: fixed)
    lag_u: np.ndarray        # int64 per edge
    pool_ptr: np.ndarray     # int64, CSR over pools
    pool_val: np.ndarray     # float64, each pool sorted ascending
    factor_sigma: np.ndarray  # float64 per factor: std of log speed
    n_uniform: int           # uniforms per sample

    @property
    def n_factors(self) -> int:
        return len(self.factor_sigma)


def draws(rng: np.random.Generator, model: DurationModel) -> tuple[np.ndarray, np.ndarray]:
    """One sample's random numbers: uniforms in [0, 1) and the speed factors exp(sigma * z)."""
    u = rng.random(model.n_uniform)
    f = np.exp(model.factor_sigma * rng.standard_normal(model.n_factors))
    return u, f


def sample_reference(model: DurationModel, u: np.ndarray, f: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(durations, lags) of one sample, in plain Python: the definition `sample_compiled` must match."""
    ptr, val = model.pool_ptr, model.pool_val

    def pick(c: int, x: float) -> float:
        return val[ptr[c] + int(x * (ptr[c + 1] - ptr[c]))]

    dur = np.empty(len(model.base))
    for i in range(len(dur)):
        d = model.base[i]
        if model.task_pool[i] >= 0:
            d = d * pick(model.task_pool[i], u[model.task_u[i]])
        if model.wait_pool[i] >= 0:
            d = d + pick(model.wait_pool[i], u[model.wait_u[i]])
        if model.factor[i] >= 0:
            d = d * f[model.factor[i]]
        dur[i] = d
    lag = np.empty(len(model.lag_base))
    for j in range(len(lag)):
        x = model.lag_base[j]
        lag[j] = x * pick(model.lag_pool[j], u[model.lag_u[j]]) if model.lag_pool[j] >= 0 else x
    return dur, lag


@njit(cache=True)
def _sample(base, task_pool, task_u, wait_pool, wait_u, factor, lag_base, lag_pool, lag_u, ptr, val, u, f,
            dur, lag):
    for i in range(len(base)):
        d = base[i]
        c = task_pool[i]
        if c >= 0:
            d = d * val[ptr[c] + int(u[task_u[i]] * (ptr[c + 1] - ptr[c]))]
        c = wait_pool[i]
        if c >= 0:
            d = d + val[ptr[c] + int(u[wait_u[i]] * (ptr[c + 1] - ptr[c]))]
        if factor[i] >= 0:
            d = d * f[factor[i]]
        dur[i] = d
    for j in range(len(lag_base)):
        x = lag_base[j]
        c = lag_pool[j]
        if c >= 0:
            x = x * val[ptr[c] + int(u[lag_u[j]] * (ptr[c + 1] - ptr[c]))]
        lag[j] = x


def sample_compiled(model: DurationModel, u: np.ndarray, f: np.ndarray,
                    out: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(durations, lags) of one sample, compiled; `out` reuses two arrays across samples."""
    dur, lag = out if out is not None else (np.empty(len(model.base)), np.empty(len(model.lag_base)))
    m = model
    _sample(m.base, m.task_pool, m.task_u, m.wait_pool, m.wait_u, m.factor, m.lag_base, m.lag_pool, m.lag_u,
            m.pool_ptr, m.pool_val, u, f, dur, lag)
    return dur, lag
