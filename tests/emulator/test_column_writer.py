"""The emulator's column-wise trace writer against its definition, the dict-per-event path."""

from __future__ import annotations

import gzip

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lumos.emulator import emulate
from lumos.trace.column_writer import INT, USEC, Fragments, Kind, around_events, encode_rows
from lumos.trace.writer import encode_trace


def _reference(result, rank) -> bytes:
    return encode_trace(result.events(rank), result.metadata(rank))


def test_written_files_are_the_dict_path_byte_for_byte(tiny_run):
    out, result = tiny_run
    for r in result.ranks:
        written = gzip.decompress((out / f"rank{r}.json.gz").read_bytes())
        assert written == _reference(result, r)
        assert len(orjson.loads(written)["traceEvents"]) == len(result.events(r))


@pytest.mark.parametrize("overrides", [
    ["model=tiny", "seed=5", "trace.legacy=true"],               # no cuda_sync events
    ["model=tiny", "seed=1", "parallel.pp=1", "parallel.dp=2"],   # no pipeline sends
    ["model=tiny", "seed=2", "trace.base_ts_us=0.0"],             # times from 0
])
def test_encode_equals_the_dict_path(overrides):
    result = emulate(overrides, progress=False)
    for r in result.ranks:
        assert result.encode(r).tobytes() == _reference(result, r)


def test_kernel_args_keep_their_extra_fields(tiny_run):
    _, result = tiny_run
    doc = orjson.loads(result.encode(result.ranks[0]).tobytes())
    nccl = [e for e in doc["traceEvents"] if e.get("cat") == "kernel" and "Collective name" in e["args"]]
    assert nccl, "the tiny run has collectives"
    assert list(nccl[0]["args"])[:4] == ["External id", "device", "stream", "correlation"]


def _one_column(values, fmt) -> list:
    fr = Fragments()
    kinds = (Kind((b"",), (fmt,), pre=b"", post=b""),)
    n = len(values)
    body = encode_rows(fr, kinds, np.zeros(n, dtype=np.int64), np.full(n, fr.add(b""), dtype=np.int64),
                       np.asarray(values, dtype=np.int64).reshape(n, 1), np.full(n, -1, dtype=np.int64))
    return body.tobytes().split(b",") if n else []


def test_numbers_are_written_exactly():
    assert _one_column([0, 7, -7, 10, 123456789012345678], INT) == \
        [b"0", b"7", b"-7", b"10", b"123456789012345678"]
    # nanoseconds as microseconds, three decimals at most, always a decimal point
    assert _one_column([0, 1, 10, 100, 1000, 1500, 1050, 1005, -1500, 1700000000123456], USEC) == \
        [b"0.0", b"0.001", b"0.01", b"0.1", b"1.0", b"1.5", b"1.05", b"1.005", b"-1.5", b"1700000000123.456"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=-(2 ** 53), max_value=2 ** 53), max_size=40))
def test_times_parse_to_the_same_doubles_as_ns_over_1000(ns):
    fr = Fragments()
    kinds = (Kind((b"", b","), (USEC, INT), pre=b"", post=b"]"),)
    n = len(ns)
    body = encode_rows(fr, kinds, np.zeros(n, dtype=np.int64), np.full(n, fr.add(b"["), dtype=np.int64),
                       np.column_stack([np.asarray(ns, dtype=np.int64)] * 2) if n else np.zeros((0, 2), np.int64),
                       np.full(n, -1, dtype=np.int64), b"[", b"]")
    got = orjson.loads(body.tobytes())
    assert got == [[v / 1000.0, v] for v in ns]
    assert all(isinstance(a, float) and isinstance(b, int) for a, b in got)


def test_tail_fragments_and_heads_are_placed_per_event():
    fr = Fragments()
    kinds = (Kind((b'{"a":',), (INT,), pre=b',"t":', post=b"}"), Kind((b'{"b":',), (USEC,)))
    tails = fr.extend([b'"x"', b'"y"'])
    body = encode_rows(fr, kinds, np.array([0, 1, 0]), np.full(3, fr.add(b""), dtype=np.int64),
                       np.array([[1], [2500], [3]]), np.array([tails[0], -1, tails[1]]), b"[", b"]")
    assert orjson.loads(body.tobytes()) == [{"a": 1, "t": "x"}, {"b": 2.5}, {"a": 3, "t": "y"}]


def test_events_are_appended_to_the_documents_event_list():
    def whole(document, body):
        prefix, suffix = around_events(document, more=bool(body))
        return prefix + body + suffix
    assert orjson.loads(whole({"k": 1, "traceEvents": [{"m": 0}]}, b'{"e":1}')) == \
        {"k": 1, "traceEvents": [{"m": 0}, {"e": 1}]}
    assert orjson.loads(whole({"traceEvents": []}, b'{"e":1},{"e":2}')) == {"traceEvents": [{"e": 1}, {"e": 2}]}
    assert whole({"traceEvents": []}, b"") == b'{"traceEvents":[]}'
    with pytest.raises(ValueError, match="last key"):
        around_events({"traceEvents": [], "after": 1})


def test_rows_must_line_up():
    fr = Fragments()
    with pytest.raises(ValueError, match="one row per event"):
        encode_rows(fr, (Kind((b"",), (INT,)),), np.zeros(2, dtype=np.int64), np.zeros(1, dtype=np.int64),
                    np.zeros((2, 1), dtype=np.int64), np.zeros(2, dtype=np.int64))
    with pytest.raises(ValueError, match="out of range"):
        encode_rows(fr, (Kind((b"",), (INT,)),), np.zeros(2, dtype=np.int64), np.array([0, 99]),
                    np.zeros((2, 1), dtype=np.int64), np.full(2, -1, dtype=np.int64))
