"""Kernels by launch configuration, for comparing the same kernel across recordings.

The columnar reader keeps what the replay needs, not a kernel's grid and block. Two
recordings of one model run the same kernels on the same shapes; the name with its grid
and block tells them apart where one name serves several shapes (a cuBLAS kernel for
QKV and for FC2). Reading them is a calibration's job (how the same kernel's duration
moves over a run: `lumos.durations.clocks`), not the replay's, so this reads
the raw document once and keeps only kernels and profiler steps.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson

from .errors import TraceError
from .reader import _read_bytes
from .table import gpu_name

__all__ = ["KernelRecord", "read_kernels"]


@dataclass
class KernelRecord:
    """One trace's kernels (`key` = name|grid|block, `ts`, `dur` in us, time order), its profiled
    steps (`step_start`, `step_dur`, us) and the profiler's schedule where `lumos capture` wrote it
    (`skipped`: wait + warm-up iterations before the first profiled one; None when not recorded) and
    the model's sizes it recorded (`config`)."""

    path: Path
    key: np.ndarray
    ts: np.ndarray
    dur: np.ndarray
    step_start: np.ndarray
    step_dur: np.ndarray
    skipped: int | None
    gpu: str | None
    config: dict           # the model's sizes as `lumos capture` recorded them ({} otherwise)

    @property
    def period_us(self) -> float:
        return float(np.mean(self.step_dur))

    def window_ms(self) -> tuple[float, float]:
        """The profiled steps in busy time (ms from the run's first iteration, at the run's period)."""
        p = self.period_us / 1e3
        return self.skipped * p, (self.skipped + len(self.step_dur)) * p


def read_kernels(path: str | os.PathLike) -> KernelRecord:
    """The kernels and profiler steps of one trace file (.json or .json.gz)."""
    p = Path(path)
    try:
        doc = orjson.loads(_read_bytes(p))   # gzip by magic bytes, one-line errors naming the file
    except orjson.JSONDecodeError as exc:
        raise TraceError(p, f"not valid JSON: {exc}") from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        raise TraceError(p, "no traceEvents list")
    keys, ts, dur, steps = [], [], [], []
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        if e.get("cat") == "kernel":
            a = e.get("args") or {}
            keys.append(f"{e.get('name')}|{a.get('grid')}|{a.get('block')}")
            ts.append(float(e["ts"]))
            dur.append(float(e.get("dur", 0.0)))
        elif str(e.get("name", "")).startswith("ProfilerStep#"):
            steps.append((float(e["ts"]), float(e.get("dur", 0.0))))
    if not keys:
        raise TraceError(p, "no kernel events: not a GPU trace")
    if not steps:
        raise TraceError(p, "no ProfilerStep# ranges: the run's iterations are not marked")
    order = np.argsort(ts, kind="stable")
    steps.sort()
    cap = doc.get("lumosCapture") or {}
    skipped = int(cap["wait"]) + int(cap["warmup"]) if "wait" in cap and "warmup" in cap else None
    return KernelRecord(path=p, key=np.array(keys, dtype=object)[order], ts=np.array(ts)[order],
                        dur=np.array(dur)[order], step_start=np.array([s for s, _ in steps]),
                        step_dur=np.array([d for _, d in steps]), skipped=skipped, gpu=gpu_name(doc),
                        config=dict(cap.get("config") or {}))
