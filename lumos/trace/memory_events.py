"""Peak allocated memory per device from a trace's `[memory]` events (`profile_memory=True`).

The memory model (`lumos.predict.memory`) predicts a peak; a trace recorded with
`profile_memory=True` measures one. Kineto writes an instant event per allocation and free:

    {"ph": "i", "name": "[memory]", "ts": ..., "args": {"Total Allocated": 40960000,
     "Total Reserved": 0, "Bytes": 8192, "Device Type": 0, "Device Id": -1, "Addr": ...}}

`Total Allocated` is the allocator's running total after the event. What it counts differs
by device, and that decides what a peak can calibrate:
- CUDA (Device Type 1): the caching allocator's own statistics, so everything live on the
  device, parameters and optimizer state allocated before profiling included.
- CPU (Device Type 0): a counter of the bytes allocated while profiling was on, starting at 0;
  tensors allocated before (parameters, optimizer state) are not in it.

The main reader (`reader.py`) drops these events; this module reads them alone, with orjson,
and only when the file holds one.
"""

from __future__ import annotations

import os
from pathlib import Path

import orjson

from .errors import TraceError
from .reader import _read_bytes

__all__ = ["peak_allocated", "device_name"]

MEMORY_EVENT = "[memory]"
#: c10::DeviceType codes Kineto writes in `Device Type`; ROCm reports itself as CUDA.
DEVICE_TYPES = {0: "cpu", 1: "cuda"}


def device_name(device_type: int, device_id: int) -> str:
    """'cpu', 'cuda:0', or 'type9:0' for a device type not named here."""
    kind = DEVICE_TYPES.get(device_type, f"type{device_type}")
    return kind if kind == "cpu" else f"{kind}:{device_id}"


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _steps(events: list, step: int | None) -> list[tuple[float, float]]:
    """(start, end) of the ProfilerStep#N ranges (only #step when given)."""
    out = []
    for ev in events:
        if not isinstance(ev, dict) or ev.get("ph") != "X":
            continue
        name = ev.get("name")
        if isinstance(name, str) and name.startswith("ProfilerStep#") and \
                (step is None or name == f"ProfilerStep#{step}") and _number(ev.get("ts")) and _number(ev.get("dur")):
            out.append((ev["ts"], ev["ts"] + ev["dur"]))
    return out


def peak_allocated(path: str | os.PathLike, step: int | None = None) -> dict[str, int] | None:
    """Peak `Total Allocated` bytes per device ('cpu', 'cuda:0', ...) inside the profiled steps.

    Only the `[memory]` events inside a `ProfilerStep#N` range count (inside `ProfilerStep#step`
    when `step` is given); a trace without step ranges counts all of them. None when the trace
    has no `[memory]` event in that window (recorded without `profile_memory=True`). A `[memory]`
    event without a numeric `ts`, or without integer `Total Allocated`, `Device Type` and
    `Device Id` args, raises TraceError naming the file and the event.

    >>> peak_allocated("traces/run1/rank0.json.gz")           # doctest: +SKIP
    {'cpu': 40960000}
    """
    path = Path(path)
    data = _read_bytes(path)
    if b'"[memory]"' not in data:   # the common case: no parse at all
        return None
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise TraceError(path, f"not valid JSON (truncated or corrupt?): {exc}") from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        raise TraceError(path, "no 'traceEvents' list: not a Kineto/Chrome trace")
    windows = _steps(events, step)
    if step is not None and not windows:
        raise TraceError(path, f"no ProfilerStep#{step} range")
    peaks: dict[str, int] = {}
    for i, ev in enumerate(events):
        if not isinstance(ev, dict) or ev.get("name") != MEMORY_EVENT:
            continue
        args, ts = ev.get("args"), ev.get("ts")
        if not isinstance(args, dict) or not _number(ts):
            raise TraceError(path, "a [memory] event needs a numeric 'ts' and an 'args' object",
                             event=f"#{i} {MEMORY_EVENT!r}")
        total, kind, dev = args.get("Total Allocated"), args.get("Device Type"), args.get("Device Id")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (total, kind, dev)):
            raise TraceError(path, "a [memory] event needs integer 'Total Allocated', 'Device Type' and "
                             f"'Device Id' args, got {total!r}, {kind!r}, {dev!r}", event=f"#{i} {MEMORY_EVENT!r}")
        if windows and not any(lo <= ts <= hi for lo, hi in windows):
            continue
        name = device_name(kind, dev)
        peaks[name] = max(peaks.get(name, 0), total)
    return peaks or None
