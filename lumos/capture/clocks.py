"""Log the GPU's clocks, power and temperature (NVML) while the profiler records.

A kernel trace says how long each kernel took, not at what clock. On our H200
recordings the same kernel ran 10-20% slower for ~150 ms after ~0.85 s of
continuous work, then settled ~4% slower (a power limit): without a clock log an
analysis cannot tell a slower clock from slower work. `ClockSampler` reads the
capture's GPU every `interval_ms` on a daemon thread, from the first profiled
step to the end of the last, and `metadata()` is the trace's
`lumosCapture["clocks"]` block.

Samples are placed on steps by `time.perf_counter` marks taken at `cap.step()`
(`mark`), not by the trace's clock, so an analysis needs no clock-domain
alignment: sample `[step, t_ms, ...]` lies `t_ms` after the start of the
`ProfilerStep#{step}` range (to within the cost of `profiler.step()`).

    ProfilerStep#2          ProfilerStep#3
    |-----------------------|-----------------------|
    mark(2)   .  .  .  .  . mark(3)  .  .  .  .  .  stop()
              samples, t_ms from mark(2) ...

pynvml (PyPI `nvidia-ml-py`) is imported only by `start()`; when it is missing,
NVML will not initialize or the device has no NVML handle, the block says why
(`{"source": None, "why": ...}`) and the capture goes on.
"""

from __future__ import annotations

import os
import threading
import time
from bisect import bisect_right
from typing import Any, Callable

__all__ = ["ClockSampler", "REASONS", "FIELDS", "decode_reasons", "unavailable",
           "DEFAULT_INTERVAL_MS", "MAX_SAMPLES"]

DEFAULT_INTERVAL_MS = 10.0   # one read of every field this often
MAX_SAMPLES = 20_000         # 200 s at 10 ms, ~1 MB of JSON; later samples are not taken

#: Columns of each sample row: profiled step (N of ProfilerStep#N), ms since that
#: step's start (middle of the reads), SM and memory clock (MHz), board power (W),
#: GPU temperature (C), clock-event reasons bitmask (decode with `decode_reasons`).
FIELDS = ("step", "t_ms", "sm_mhz", "mem_mhz", "power_w", "temp_c", "reasons")

#: NVML clock-event (formerly "throttle") reason bits, as pynvml 13.615 defines them
#: (nvmlClocksEventReason* / nvmlClocksThrottleReason*; the last two exist only as
#: throttle reasons).
REASONS = {
    0x1: "GPU_IDLE",
    0x2: "APPLICATIONS_CLOCKS_SETTING",
    0x4: "SW_POWER_CAP",
    0x8: "HW_SLOWDOWN",
    0x10: "SYNC_BOOST",
    0x20: "SW_THERMAL",
    0x40: "HW_THERMAL",
    0x80: "HW_POWER_BRAKE",
    0x100: "DISPLAY_CLOCK_SETTING",
    0x200: "BOARD_LIMIT",
    0x400: "RELIABILITY",
}


def decode_reasons(mask: int | None) -> list[str]:
    """Names of the set bits, lowest first; an unknown bit is named by its hex value."""
    if not mask:
        return []
    names, bit = [], 1
    while bit <= mask:
        if mask & bit:
            names.append(REASONS.get(bit, hex(bit)))
        bit <<= 1
    return names


def unavailable(why: str) -> dict:
    """The block written when nothing was sampled: `{"source": None, "why": why}`."""
    return {"source": None, "why": " ".join(str(why).split())}


def _read(fn: Callable, *args):
    """One NVML read; None when this GPU or driver does not support it."""
    try:
        return fn(*args)
    except Exception:  # pynvml.NVMLError_NotSupported and friends: a missing value, not a failure
        return None


def _device_handle(nvml, index: int, visible: str | None):
    """The NVML handle of CUDA device `index` (NVML counts all GPUs; CUDA only the visible ones)."""
    if visible is None:
        return nvml.nvmlDeviceGetHandleByIndex(index)
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    if not 0 <= index < len(entries):
        raise LookupError(f"cuda:{index} is not in CUDA_VISIBLE_DEVICES={visible!r}")
    entry = entries[index]
    if entry.startswith("MIG-"):
        raise LookupError("a MIG instance has no clocks of its own")
    if entry.isdigit():
        return nvml.nvmlDeviceGetHandleByIndex(int(entry))
    return nvml.nvmlDeviceGetHandleByUUID(entry)


def _mean(xs: list) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _rounded(x, ndigits: int):
    return None if x is None else round(x, ndigits)


class ClockSampler:
    """Sample one CUDA device's clocks through NVML between `start()` and `stop()`.

    `device_index` is the CUDA index the model runs on (mapped through
    CUDA_VISIBLE_DEVICES to NVML's). `nvml` replaces the pynvml module (tests),
    `clock` time.perf_counter. Call `mark(step)` when each profiled step begins,
    `stop()` after the last; `metadata()` is the trace block. Nothing here
    raises: a failure is recorded in the block.
    """

    def __init__(self, device_index: int, *, interval_ms: float = DEFAULT_INTERVAL_MS,
                 max_samples: int = MAX_SAMPLES, nvml=None,
                 clock: Callable[[], float] = time.perf_counter):
        if interval_ms <= 0 or max_samples < 1:
            raise ValueError("interval_ms must be > 0 and max_samples >= 1")
        self.device_index = int(device_index)
        self.interval_ms = interval_ms
        self.max_samples = int(max_samples)
        self.clock = clock
        self._nvml = nvml
        self._handle = None
        self._opened = False               # NVML was initialized and the device found
        self._reasons_fn: Callable | None = None
        self.why: str | None = None        # set when NVML could not be used
        self.error: str | None = None      # set when sampling stopped on an unexpected error
        self.power_limit_w: float | None = None
        self.max_sm_mhz: int | None = None
        self.truncated = False
        self._raw: list[tuple] = []        # (t, sm, mem, power_mw, temp, reasons), t from `clock`
        self._marks: list[tuple[int, float]] = []   # (step, t0), in order
        self._end: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- NVML --------------------------------------------------------------------------
    def open(self) -> bool:
        """Initialize NVML and find the device; False (and `why`) when it cannot be used."""
        if self._handle is not None:
            return True
        if self.why is not None:
            return False
        nvml = self._nvml
        if nvml is None:
            try:
                import pynvml as nvml
            except ImportError:
                self.why = "pynvml is not installed (pip install nvidia-ml-py)"
                return False
            self._nvml = nvml
        try:
            nvml.nvmlInit()
        except Exception as exc:
            self.why = f"nvmlInit failed: {exc}"
            return False
        try:
            self._handle = _device_handle(nvml, self.device_index, os.environ.get("CUDA_VISIBLE_DEVICES"))
        except Exception as exc:
            self.why = f"no NVML device for cuda:{self.device_index}: {exc}"
            _read(nvml.nvmlShutdown)
            return False
        self._opened = True
        h = self._handle
        limit_mw = _read(nvml.nvmlDeviceGetEnforcedPowerLimit, h)
        self.power_limit_w = None if limit_mw is None else limit_mw / 1000.0
        self.max_sm_mhz = _read(nvml.nvmlDeviceGetMaxClockInfo, h, getattr(nvml, "NVML_CLOCK_SM", 1))
        # nvmlDeviceGetCurrentClocksEventReasons replaced ...ThrottleReasons (same bits);
        # an older driver lacks the new symbol, an older pynvml the new function.
        for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
            fn = getattr(nvml, name, None)
            if fn is not None and _read(fn, h) is not None:
                self._reasons_fn = fn
                break
        return True

    def sample(self) -> None:
        """Read every field once and keep the row (up to `max_samples`)."""
        if self._handle is None or self.truncated:
            return
        if len(self._raw) >= self.max_samples:
            self.truncated = True
            return
        nvml, h = self._nvml, self._handle
        t0 = self.clock()
        sm = _read(nvml.nvmlDeviceGetClockInfo, h, getattr(nvml, "NVML_CLOCK_SM", 1))
        mem = _read(nvml.nvmlDeviceGetClockInfo, h, getattr(nvml, "NVML_CLOCK_MEM", 2))
        power_mw = _read(nvml.nvmlDeviceGetPowerUsage, h)
        temp = _read(nvml.nvmlDeviceGetTemperature, h, getattr(nvml, "NVML_TEMPERATURE_GPU", 0))
        reasons = _read(self._reasons_fn, h) if self._reasons_fn is not None else None
        t1 = self.clock()
        self._raw.append(((t0 + t1) / 2, sm, mem, power_mw, temp, reasons))

    # -- the capture's calls ------------------------------------------------------------
    def start(self) -> None:
        """Open NVML and start sampling on a daemon thread (no-op when NVML is unusable)."""
        if self._thread is not None or not self.open():
            return
        self._thread = threading.Thread(target=self._run, name="lumos-clocks", daemon=True)
        self._thread.start()

    def mark(self, step: int, t: float | None = None) -> None:
        """Profiled step `step` (ProfilerStep#step) begins now (or at `t`)."""
        self._marks.append((int(step), self.clock() if t is None else t))

    def stop(self, t: float | None = None) -> None:
        """The last profiled step ends now (or at `t`): stop the thread, release NVML."""
        if self._end is None:
            self._end = self.clock() if t is None else t
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._handle is not None:
            _read(self._nvml.nvmlShutdown)
            self._handle = None

    def _run(self) -> None:
        period = self.interval_ms / 1000.0
        due = time.perf_counter()
        try:
            while not self.truncated:
                self.sample()
                due += period   # a fixed rate: the reads' own cost does not stretch the interval
                if self._stop.wait(max(0.0, due - time.perf_counter())):
                    break
        except Exception as exc:  # never take the training loop down
            self.error = " ".join(f"{type(exc).__name__}: {exc}".split())

    # -- the trace block ----------------------------------------------------------------
    def rows(self) -> list[list]:
        """The samples as FIELDS rows; samples before the first mark or after `stop` are dropped."""
        starts = [t0 for _, t0 in self._marks]
        out = []
        for t, sm, mem, power_mw, temp, reasons in self._raw:
            i = bisect_right(starts, t) - 1
            if i < 0 or (self._end is not None and t > self._end):
                continue
            step, t0 = self._marks[i]
            out.append([step, round((t - t0) * 1000.0, 3), sm, mem,
                        None if power_mw is None else round(power_mw / 1000.0, 3), temp, reasons])
        return out

    def metadata(self) -> dict[str, Any]:
        """`lumosCapture["clocks"]`: the samples and a per-step summary, or why there are none."""
        if self.why is not None:
            return unavailable(self.why)
        if not self._opened:
            return unavailable("no profiled step began, so NVML was never opened")
        rows = self.rows()
        block: dict[str, Any] = {
            "source": "nvml", "device_index": self.device_index, "interval_ms": self.interval_ms,
            "power_limit_w": self.power_limit_w, "max_sm_mhz": self.max_sm_mhz,
            "fields": list(FIELDS), "samples": rows, "per_step": self._per_step(rows),
            "max_samples": self.max_samples, "truncated": self.truncated,
        }
        if self.truncated:
            block["why_truncated"] = f"sampling stopped after {self.max_samples} samples"
        if self.error is not None:
            block["error"] = self.error
        return block

    def _per_step(self, rows: list[list]) -> list[dict]:
        by_step: dict[int, list[list]] = {step: [] for step, _ in self._marks}
        for r in rows:
            by_step[r[0]].append(r)
        return [_summary(step, mine) for step, mine in by_step.items()]


def _summary(step: int, rows: list[list]) -> dict[str, Any]:
    """One step's line of `per_step`: what its samples say, None where they say nothing."""
    def col(name: str) -> list:
        i = FIELDS.index(name)
        return [r[i] for r in rows if r[i] is not None]

    sm, power, temp = col("sm_mhz"), col("power_w"), col("temp_c")
    mask = 0
    for m in col("reasons"):
        mask |= int(m)
    return {
        "step": step, "samples": len(rows),
        "sm_mhz_mean": _rounded(_mean(sm), 1), "sm_mhz_min": min(sm, default=None),
        "power_w_mean": _rounded(_mean(power), 3), "power_w_max": max(power, default=None),
        "temp_c_max": max(temp, default=None), "reasons": decode_reasons(mask),
    }
