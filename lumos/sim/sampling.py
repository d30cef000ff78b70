"""Draw task durations and edge lags from a duration model, for Monte Carlo replays.

A point replay takes each task's measured duration; an interval needs many
replays, each with durations another iteration could have had. This module
only turns a fitted model (`DurationModel`, arrays) and one vector of random
numbers into one vector of durations and lags; the fit from a trace lives in
`lumos.analysis.spread`, the replay loop and the quantiles in
`lumos.analysis.uncertainty`.

For task i, with u the sample's uniforms and f its speed factors:

    dur[i] = base[i] * pool(task_pool[i], u[task_u[i]]) * f[factor[i]]

where pool(c, x) is the empirical quantile x of pool c (a sorted slice of
`pool_val`), a missing pool (-1) reads as 1 and a missing factor as 1. Tasks
that share a draw index (the members of one collective instance) get the same
ratio. Edge lags alike: lag[j] = lag_base[j] * pool(lag_pool[j], u[lag_u[j]]).
A pool of ones and no factor reproduce the point durations bit for bit.

A collective of a rank replayed without its peers also waited for them: its
measured duration is its transfer (`base`) plus `wait[i]`. The wait is not
drawn; the peers' arrival is kept where the point replay put it (`peer_at`,
the point start + the wait), moved by one peer speed factor: the peers run
the same kernels as this rank, so a peer slower by a factor fp arrives later
by (fp - 1) times the compute this rank ran before the collective
(`peer_lead`). Where the rank was profiled for several steps, each sample
also takes the peers' timing of one of them (the step s drawn by
u[peer_u]; `peer_delta[s, peer_slot[i]]`: how much later the peers came
for this collective in step s). The collective may not end before

    floor[i] = peer_at[i] + peer_delta[s, peer_slot[i]] + (f[peer_factor] - 1) * peer_lead[i] + dur[i]

so a rank that arrives later waits less, as it does on a cluster. Tasks
the peers do not bound (no wait, no other step) get no floor (-inf).

Where the base was profiled for several steps, a prediction also takes each
sample's host work from one of them (the step k drawn by u[step_u]): every
CPU task and program-order gap is multiplied by `step_task[k, i]` /
`step_lag[k, j]`, that step's value over the median the point replay uses.

`draws` makes the random numbers with numpy's Generator, so the compiled
sampler (`sample_compiled`) and the plain one (`sample_reference`) read the
very same numbers; the tests hold their durations equal.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from lumos import intervals
from lumos.jit import njit

__all__ = ["DurationModel", "draws", "sample_reference", "sample_compiled", "with_host_steps", "with_peers"]


@dataclass
class DurationModel:
    """Per-task and per-edge sampling plan of one graph (edges in the graph's order)."""
    base: np.ndarray         # float64 per task: the duration a ratio of 1 gives
    task_pool: np.ndarray    # int64 per task: ratio pool (-1: fixed at base)
    task_u: np.ndarray       # int64 per task: uniform index (shared by one collective's members)
    factor: np.ndarray       # int64 per task: speed factor (-1: none)
    lag_base: np.ndarray     # float64 per edge
    lag_pool: np.ndarray     # int64 per edge (-1: fixed)
    lag_u: np.ndarray        # int64 per edge
    pool_ptr: np.ndarray     # int64, CSR over pools
    pool_val: np.ndarray     # float64, each pool sorted ascending
    factor_sigma: np.ndarray  # float64 per factor: std of log speed
    n_uniform: int           # uniforms per sample
    wait: np.ndarray         # float64 per task: measured wait for peers beyond base (0: none)
    peer_slot: np.ndarray    # int64 per task: column of peer_delta (-1: none)
    peer_factor: int = -1                 # factor moving the peers' arrival (-1: none)
    peer_delta: np.ndarray | None = None  # float64 (steps, slots): peers later in that profiled step (us)
    peer_u: int = -1                      # uniform that picks the step (-1: none)
    peer_at: np.ndarray | None = None    # float64 per task: when the peers were ready (-inf: no floor)
    peer_lead: np.ndarray | None = None  # float64 per task: compute time before it, which the peer factor stretches
    step_task: np.ndarray | None = None  # float64 (steps, tasks): host work of a profiled step over its median (1: none)
    step_lag: np.ndarray | None = None   # float64 (steps, edges): the same for program-order gaps
    step_u: int = -1                     # uniform that picks the profiled step (-1: none)

    @property
    def peered(self) -> np.ndarray:
        """Tasks whose end the peers bound: they waited for them, or other steps tell when they came."""
        return (self.wait > 0) | (self.peer_slot >= 0)

    @property
    def has_peers(self) -> bool:
        return bool(self.peered.any())

    @property
    def n_factors(self) -> int:
        return len(self.factor_sigma)


def draws(rng: np.random.Generator, model: DurationModel) -> tuple[np.ndarray, np.ndarray]:
    """One sample's random numbers: uniforms in [0, 1) and the speed factors exp(sigma * z)."""
    u = rng.random(model.n_uniform)
    f = np.exp(model.factor_sigma * rng.standard_normal(model.n_factors))
    return u, f


def sample_reference(model: DurationModel, u: np.ndarray, f: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(durations, lags, end floors or None) of one sample, in plain Python: the definition
    `sample_compiled` must match."""
    ptr, val = model.pool_ptr, model.pool_val

    def pick(c: int, x: float) -> float:
        return val[ptr[c] + int(x * (ptr[c + 1] - ptr[c]))]

    dur = np.empty(len(model.base))
    for i in range(len(dur)):
        d = model.base[i]
        if model.task_pool[i] >= 0:
            d = d * pick(model.task_pool[i], u[model.task_u[i]])
        if model.factor[i] >= 0:
            d = d * f[model.factor[i]]
        dur[i] = d
    lag = np.empty(len(model.lag_base))
    for j in range(len(lag)):
        x = model.lag_base[j]
        lag[j] = x * pick(model.lag_pool[j], u[model.lag_u[j]]) if model.lag_pool[j] >= 0 else x
    if model.step_u >= 0:
        k = int(u[model.step_u] * len(model.step_task))
        for i in range(len(dur)):
            dur[i] = dur[i] * model.step_task[k, i]
        for j in range(len(lag)):
            lag[j] = lag[j] * model.step_lag[k, j]
    if model.peer_at is None:
        return dur, lag, None
    fp = f[model.peer_factor] if model.peer_factor >= 0 else 1.0
    step = int(u[model.peer_u] * len(model.peer_delta)) if model.peer_u >= 0 else -1
    floor = np.full(len(dur), -np.inf)
    for i in range(len(dur)):
        if np.isfinite(model.peer_at[i]):
            slot = model.peer_slot[i]
            shift = model.peer_delta[step, slot] if step >= 0 and slot >= 0 else 0.0
            floor[i] = model.peer_at[i] + shift + (fp - 1.0) * model.peer_lead[i] + dur[i]
    return dur, lag, floor


@njit(cache=True)
def _sample(base, task_pool, task_u, factor, lag_base, lag_pool, lag_u, ptr, val, u, f, dur, lag):
    for i in range(len(base)):
        d = base[i]
        c = task_pool[i]
        if c >= 0:
            d = d * val[ptr[c] + int(u[task_u[i]] * (ptr[c + 1] - ptr[c]))]
        if factor[i] >= 0:
            d = d * f[factor[i]]
        dur[i] = d
    for j in range(len(lag_base)):
        x = lag_base[j]
        c = lag_pool[j]
        if c >= 0:
            x = x * val[ptr[c] + int(u[lag_u[j]] * (ptr[c + 1] - ptr[c]))]
        lag[j] = x


@njit(cache=True)
def _floors(peer_at, peer_lead, peer_slot, peer_delta, step, fp, dur, floor):
    for i in range(len(peer_at)):
        p = peer_at[i]
        if p > -np.inf:
            if step >= 0 and peer_slot[i] >= 0:
                p = p + peer_delta[step, peer_slot[i]]
            floor[i] = p + (fp - 1.0) * peer_lead[i] + dur[i]
        else:
            floor[i] = -np.inf


def sample_compiled(model: DurationModel, u: np.ndarray, f: np.ndarray,
                    out: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(durations, lags, end floors or None) of one sample, compiled; `out` reuses three arrays
    across samples."""
    n = len(model.base)
    dur, lag, floor = out if out is not None else (np.empty(n), np.empty(len(model.lag_base)), np.empty(n))
    m = model
    _sample(m.base, m.task_pool, m.task_u, m.factor, m.lag_base, m.lag_pool, m.lag_u,
            m.pool_ptr, m.pool_val, u, f, dur, lag)
    if m.step_u >= 0:
        k = int(u[m.step_u] * len(m.step_task))
        dur *= m.step_task[k]
        lag *= m.step_lag[k]
    if m.peer_at is None:
        return dur, lag, None
    step = int(u[m.peer_u] * len(m.peer_delta)) if m.peer_u >= 0 else -1
    delta = m.peer_delta if m.peer_delta is not None else np.zeros((0, 0))
    _floors(m.peer_at, m.peer_lead, m.peer_slot, delta, step, float(f[m.peer_factor]) if m.peer_factor >= 0 else 1.0,
            dur, floor)
    return dur, lag, floor


def with_host_steps(model: DurationModel, task_ratio: np.ndarray, lag_ratio: np.ndarray,
                    drop_factor: np.ndarray | None = None) -> DurationModel:
    """The model with each sample's host work taken from one profiled step, drawn at random:
    `task_ratio` (steps, tasks) and `lag_ratio` (steps, edges), that step's value over the median
    the point uses, NaN where the step says nothing (then 1). The tasks in `drop_factor` (default:
    those with a ratio) lose their rank speed factor, which the same steps fitted: the step draw
    carries that spread whole."""
    if len(task_ratio) < 2:
        return model
    t = np.where(np.isfinite(task_ratio), task_ratio, 1.0)
    e = np.where(np.isfinite(lag_ratio), lag_ratio, 1.0)
    factor = model.factor.copy()
    factor[np.isfinite(task_ratio).any(axis=0) if drop_factor is None else drop_factor] = -1
    return replace(model, factor=factor, step_task=t, step_lag=e, step_u=model.n_uniform,
                   n_uniform=model.n_uniform + 1)


def with_peers(model: DurationModel, start: np.ndarray, end: np.ndarray, compute: np.ndarray) -> DurationModel:
    """The model with the peers' arrival placed on the point replay's timeline (`start`, `end`):
    peer_at = the collective's point start + its measured wait (-inf: not bound by peers);
    peer_lead = the time the `compute` tasks kept the GPU busy before that start."""
    if not model.has_peers:
        return model
    waited = model.peered
    s, e = intervals.union(start[compute], end[compute])
    before = np.zeros(len(start))
    if len(s):
        busy = np.concatenate([[0.0], np.cumsum(e - s)])  # busy time before each union
        k = np.searchsorted(s, start, side="right") - 1   # the last union that began by each start
        at = np.maximum(k, 0)
        before = np.where(k >= 0, busy[at] + np.clip(np.minimum(start, e[at]) - s[at], 0.0, None), 0.0)
    return replace(model, peer_at=np.where(waited, start + model.wait, -np.inf),
                   peer_lead=np.where(waited, before, 0.0))
