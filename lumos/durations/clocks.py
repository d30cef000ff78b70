"""Sustained clocks: the same kernel runs slower once the GPU has been busy long enough.

Seen on our H200 recordings (measured on hardware; `python studies/h200/clocks.py`): a
kernel of one name, grid and block runs at one speed for the first ~0.9 s of continuous
work, then 10-20% slower for about 0.1-0.2 s, then settles a few percent slower than at
the start. That is the shape of a power limit enforced over an averaging window (the GPU
boosts above its sustainable clock until the window's average power reaches the limit,
the controller overshoots, then holds a lower clock; NVIDIA documents the limit and the
clock-event reasons `SW_POWER_CAP` / `HW_SLOWDOWN` in NVML, not the controller's timing).

A short recording (the bundled GPT's base: 5 iterations of 128 ms, 0.64 s in all) runs
entirely in the boost part; a target that keeps the GPU busy longer (more layers, wider,
larger micro-batches, more micro-batches) is profiled partly or wholly after it. A
duration model fitted on the base alone cannot see that, so the compute kernels of a
prediction are slowed by the clock the target would run at:

    slowdown(t) =  1            t < boost_ms                 (t: busy time since the run began)
                   1 + dip      boost_ms <= t < boost_ms + dip_ms
                   1 + steady   after

- `recorded`: the mean of slowdown(t) over the profiled window the recording schedule
  gives (iterations `skipped` .. `skipped + steps` at the predicted period), divided by the
  same mean over the base's window at its own period: what a recording of the target made
  the way the base was made would show.
- `steady`: (1 + steady) over the base's window mean: a long training run.

The constants are per GPU model, in `config/predict/clusters/h100_roce.yaml` (`sustained_clock:`),
fitted by `fit_sustained_clock` on a calibration recording (the same kernels as the base,
run longer) against the base: never on a prediction's own target.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["SustainedClock", "ClockWindow", "CLOCK_MODES", "clock_for", "fit_sustained_clock", "busy_ratios"]

CLOCK_MODES = ("auto", "recorded", "steady", "off")


@dataclass(frozen=True)
class ClockWindow:
    """The stretch of busy time, in ms since the run began, that a task (or a window of them) ran in."""
    t0_ms: float
    t1_ms: float


@dataclass(frozen=True)
class SustainedClock:
    boost_ms: float      # busy time before the power limit takes hold
    dip_ms: float        # how long the controller's overshoot lasts
    dip: float           # extra slowdown during the overshoot (0.15: 15% slower)
    steady: float        # slowdown after it

    def mean(self, t0_ms: float, t1_ms: float) -> float:
        """Mean slowdown over busy time [t0_ms, t1_ms] (piecewise constant, exact)."""
        if t1_ms <= t0_ms:
            return self.at(t0_ms)
        b, d = self.boost_ms, self.boost_ms + self.dip_ms

        def overlap(a, z):
            return max(0.0, min(t1_ms, z) - max(t0_ms, a))
        area = overlap(-np.inf, b) + overlap(b, d) * (1 + self.dip) + overlap(d, np.inf) * (1 + self.steady)
        return area / (t1_ms - t0_ms)

    def at(self, t_ms: float) -> float:
        if t_ms < self.boost_ms:
            return 1.0
        return 1.0 + (self.dip if t_ms < self.boost_ms + self.dip_ms else self.steady)

    def window(self, period_ms: float, skipped: int, steps: int) -> float:
        """Mean slowdown over profiled iterations `skipped` .. `skipped + steps` of `period_ms` each."""
        return self.mean(skipped * period_ms, (skipped + steps) * period_ms)

    def retime(self, measured_us: float, old: ClockWindow, new: ClockWindow) -> float:
        """A duration measured in busy window `old`, run in `new`: the ratio of their mean slowdowns."""
        return measured_us * self.mean(new.t0_ms, new.t1_ms) / self.mean(old.t0_ms, old.t1_ms)

    def as_dict(self) -> dict:
        return {"boost_ms": self.boost_ms, "dip_ms": self.dip_ms, "dip": self.dip, "steady": self.steady}


def clock_for(gpu: str | None, profile: dict) -> SustainedClock | None:
    """The profile's constants for a GPU model (the trace's `deviceProperties` name), or None."""
    table = profile.get("sustained_clock") or {}
    c = table.get(gpu) if gpu else None
    if not c:
        return None
    return SustainedClock(float(c["boost_ms"]), float(c["dip_ms"]), float(c["dip"]), float(c["steady"]))


def busy_ratios(base: list, run, bin_ms: float = 50.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(bin start ms, duration ratio, weight) of `run`'s kernels against the same kernels in `base`.

    `base` and `run` are `lumos.trace.kernels.KernelRecord`s. A kernel's reference is its
    key's mean duration over every base recording; a bin's ratio is the summed durations of
    its kernels over their summed references (weight: the references). Busy time counts from
    the run's first iteration: `skipped` iterations at the run's period, then the kernel's
    start after the first profiled step's.
    """
    sums: dict = {}
    for b in base:
        for k, d in zip(b.key, b.dur):
            s = sums.setdefault(k, [0.0, 0])
            s[0] += d
            s[1] += 1
    ref = {k: s / n for k, (s, n) in sums.items()}
    if run.skipped is None:
        raise ValueError(f"{run.path}: the recording does not say how many iterations ran before the profiled "
                         "ones (no lumosCapture wait/warmup); busy time cannot be placed")
    have = np.array([k in ref for k in run.key], dtype=bool)
    r = np.array([ref[k] for k in run.key[have]])
    t_ms = (run.skipped * run.period_us + run.ts[have] - run.step_start[0]) / 1e3
    b = np.floor(t_ms / bin_ms).astype(int)
    num = np.bincount(b, weights=run.dur[have])
    den = np.bincount(b, weights=r)
    keep = den > 0
    return np.flatnonzero(keep) * bin_ms, num[keep] / den[keep], den[keep]


def fit_sustained_clock(bins: list[tuple[np.ndarray, np.ndarray, np.ndarray]], base_windows: list[tuple[float, float]],
                        bin_ms: float = 50.0, min_weight_us: float = 2000.0) -> tuple[SustainedClock, dict]:
    """The constants that best explain binned duration ratios (`busy_ratios` of calibration runs).

    A grid over `boost_ms` and `dip_ms` (25 ms steps); for each, `dip` and `steady` by weighted
    least squares, the model's bin ratio being its mean slowdown over the bin divided by its mean
    over the base's windows (`base_windows`, busy-time ms: the reference ran there). Bins with
    less than `min_weight_us` of reference kernel time are left out (a few short kernels). Returns
    the constants and {rms_before, rms_after, bins}: the weighted RMS of (ratio - 1) and of the
    residual, in percent.
    """
    t = np.concatenate([b[0] for b in bins])
    y = np.concatenate([b[1] for b in bins])
    w = np.concatenate([b[2] for b in bins])
    keep = w >= min_weight_us
    t, y, w = t[keep], y[keep], w[keep]
    if len(t) < 4:
        raise ValueError("too few calibration bins to fit a sustained clock")
    best = None
    for boost in np.arange(200.0, 2000.0 + 1, 25.0):
        for dip_ms in np.arange(0.0, 400.0 + 1, 25.0):
            # Share of each bin (and of the base windows) in the dip and after it: the model is linear
            # in (dip, steady) once boost and dip_ms are fixed.
            probe_dip = SustainedClock(boost, dip_ms, 1.0, 0.0)
            probe_steady = SustainedClock(boost, dip_ms, 0.0, 1.0)
            xd = np.array([probe_dip.mean(a, a + bin_ms) - 1 for a in t])
            xs = np.array([probe_steady.mean(a, a + bin_ms) - 1 for a in t])
            bd = np.mean([probe_dip.mean(*bw) - 1 for bw in base_windows])
            bs = np.mean([probe_steady.mean(*bw) - 1 for bw in base_windows])
            # y ~ (1 + dip xd + steady xs) / (1 + dip bd + steady bs); linearised by multiplying out:
            # y - 1 = dip (xd - y bd) + steady (xs - y bs)
            A = np.stack([xd - y * bd, xs - y * bs], axis=1) * np.sqrt(w)[:, None]
            rhs = (y - 1) * np.sqrt(w)
            coef, *_ = np.linalg.lstsq(A, rhs, rcond=None)
            dip, steady = (float(max(c, 0.0)) for c in coef)
            model = SustainedClock(float(boost), float(dip_ms), dip, steady)
            pred = np.array([model.mean(a, a + bin_ms) for a in t]) / np.mean([model.mean(*bw) for bw in base_windows])
            err = float(np.sum(w * (y - pred) ** 2))
            if best is None or err < best[0]:
                best = (err, model)
    err, model = best
    return model, {"rms_before_pct": round(100 * float(np.sqrt(np.sum(w * (y - 1) ** 2) / np.sum(w))), 3),
                   "rms_after_pct": round(100 * float(np.sqrt(err / np.sum(w))), 3), "bins": int(len(t))}
