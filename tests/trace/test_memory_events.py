"""The `[memory]` reader: peak Total Allocated per device inside the profiled steps."""

from __future__ import annotations

import gzip
import json

import pytest

from lumos.trace.errors import TraceError
from lumos.trace.memory_events import peak_allocated


def _mem(ts, total, kind=0, dev=-1, nbytes=64):
    return {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts,
            "args": {"Total Reserved": 0, "Total Allocated": total, "Bytes": nbytes, "Device Type": kind,
                     "Device Id": dev, "Addr": 4096}}


STEPS = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 100, "dur": 100},
         {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#2", "pid": 1, "tid": 1, "ts": 200, "dur": 100}]
MEMORY = [_mem(50, 10_000),                       # before the steps: the allocator's warm-up, not counted
          _mem(150, 3_000), _mem(160, 7 << 20, kind=1, dev=0),
          _mem(250, 5_000), _mem(260, 6 << 20, kind=1, dev=0), _mem(270, 9 << 20, kind=1, dev=1),
          _mem(400, 20_000)]                      # after them: not counted either


def _write(path, events, gz=False):
    raw = json.dumps({"traceEvents": events, "profile_memory": 1}).encode()
    path.write_bytes(gzip.compress(raw) if gz else raw)
    return path


def test_peak_per_device_inside_the_steps(tmp_path):
    path = _write(tmp_path / "rank0.json.gz", STEPS + MEMORY, gz=True)
    assert peak_allocated(path) == {"cpu": 5_000, "cuda:0": 7 << 20, "cuda:1": 9 << 20}
    assert peak_allocated(path, step=1) == {"cpu": 3_000, "cuda:0": 7 << 20}
    assert peak_allocated(path, step=2) == {"cpu": 5_000, "cuda:0": 6 << 20, "cuda:1": 9 << 20}


def test_without_step_ranges_every_event_counts(tmp_path):
    assert peak_allocated(_write(tmp_path / "t.json", MEMORY)) == {"cpu": 20_000, "cuda:0": 7 << 20,
                                                                   "cuda:1": 9 << 20}


def test_no_memory_events_is_none(tmp_path):
    assert peak_allocated(_write(tmp_path / "t.json", STEPS)) is None
    # events recorded, but none inside the chosen step
    assert peak_allocated(_write(tmp_path / "u.json", STEPS + [_mem(50, 10)])) is None


@pytest.mark.parametrize("bad,why", [
    ({"Total Allocated": "3000"}, "integer 'Total Allocated'"),
    ({"Device Type": None}, "'Device Type'"),
    (None, "'args' object"),
])
def test_a_malformed_memory_event_names_the_file_and_the_event(tmp_path, bad, why):
    ev = _mem(150, 3_000)
    if bad is None:
        del ev["args"]
    else:
        ev["args"].update(bad)
    path = _write(tmp_path / "rank3.json", STEPS + [_mem(140, 10), ev])
    with pytest.raises(TraceError, match=why) as info:
        peak_allocated(path)
    assert info.value.path == str(path)
    assert info.value.event == "#3 '[memory]'"        # the fourth event of the file
    assert "rank3.json (event #3 '[memory]')" in str(info.value)


def test_a_missing_step_is_an_error(tmp_path):
    with pytest.raises(TraceError, match="no ProfilerStep#7"):
        peak_allocated(_write(tmp_path / "t.json", STEPS + MEMORY), step=7)
