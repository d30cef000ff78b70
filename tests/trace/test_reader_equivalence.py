"""The fast reader gives exactly what a straightforward parse gives: every column, every error.

`reference_load` below is the plain reader as first written (orjson, then one
event at a time into lists); it is frozen here as the specification. The fast
reader must match it on every shipped trace, on random documents in random
layouts, and on corrupted bytes (same table, or the same error).
"""

from __future__ import annotations

import gzip
import json
import random

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lumos.trace import TraceError, load_trace, schema
from lumos.trace import reader, scan, scanned
from lumos.trace.table import FLOAT_COLUMNS, INT_COLUMNS, OBJECT_COLUMNS, TraceTable

from ..conftest import ALL_TRACES, REAL

PYTORCH_ET = sorted((REAL / "param" / "dlrm_8rank" / "pytorch_et").glob("*.json.gz"))


@pytest.fixture(autouse=True)
def _scanner_always(monkeypatch):
    """`load_trace` takes the scanner whatever a file's size (small files would go plain)."""
    monkeypatch.setenv("LUMOS_JIT", "always")


# --- the specification ---------------------------------------------------------------------

def _ref_int(value, default=-1):
    if value is None:
        return default
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, float):
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.rsplit(" ", 1)[-1])
        except ValueError:
            return default
    return default


def _kind(value) -> str:
    if value is True or value is False:
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return {list: "an array", dict: "an object", str: "a string"}.get(type(value), "null")


def _label(i, name) -> str:
    return f"#{i} {name!r}" if len(name) <= 120 else f"#{i} {name[:117]!r}..."


def _shown(value) -> str:
    return repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."


# the integer columns by their keys, in the order an event's are checked for int64
INT_KEYS = (("pid", None), ("tid", None), ("corr", "correlation"), ("ext", "External id"), ("stream", "stream"),
            ("device", "device"), ("wait_stream", "wait_on_stream"), ("wait_corr", "wait_on_cuda_event_record_corr_id"),
            ("in_nelems", "In msg nelems"), ("out_nelems", "Out msg nelems"), ("group_size", "Group size"),
            ("seq", "Sequence number"))


def reference_parse(doc, path) -> TraceTable:
    if not isinstance(doc, dict):
        raise TraceError(path, "top level is not a JSON object")
    events = doc.get("traceEvents")
    if events is None and "nodes" in doc and "schema" in doc:
        raise TraceError(path, f"a PyTorch execution trace (schema {doc['schema']}), not a Kineto trace: pass the "
                               "Kineto trace of the same run (Lumos ties kernels to launches by correlation id "
                               "and reads no execution trace)")
    if events is None:
        raise TraceError(path, "no 'traceEvents' key: not a Kineto/Chrome trace")
    if not isinstance(events, list):
        raise TraceError(path, "'traceEvents' is not a list")
    cols = {c: [] for c in INT_COLUMNS + FLOAT_COLUMNS + OBJECT_COLUMNS}
    kept = []   # the event of each row
    unmodelled, unmodelled_us = {}, {}
    for i, ev in enumerate(events):
        if not isinstance(ev, dict) or ev.get("ph") != "X":
            continue
        cat = ev.get("cat")
        code = schema.CATEGORY_CODES.get(cat.lower()) if isinstance(cat, str) else None
        name = ev.get("name")
        if code is None:
            # a device event (device or stream arg) of a category Lumos does not model
            args = ev.get("args")
            if isinstance(cat, str) and isinstance(args, dict) and (
                    args.get("device") is not None or args.get("stream") is not None):
                unmodelled[cat] = unmodelled.get(cat, 0) + 1
                dur = ev.get("dur")   # their time, where it is a positive number
                if type(dur) in (int, float) and dur > 0:
                    unmodelled_us[cat] = unmodelled_us.get(cat, 0.0) + float(dur)
            continue
        if code == schema.PY_MODULE and not (isinstance(name, str) and name.startswith("nn.Module: ")):
            continue   # of the Python calls, only the module calls
        if not isinstance(name, str):
            raise TraceError(path, "event has no name", event=f"#{i}")
        ts, dur = ev.get("ts"), ev.get("dur")
        if not isinstance(ts, (int, float)) or isinstance(ts, bool):
            raise TraceError(path, "missing or non-numeric 'ts'", event=_label(i, name))
        if not isinstance(dur, (int, float)) or isinstance(dur, bool):
            raise TraceError(path, "missing or non-numeric 'dur'", event=_label(i, name))
        if dur < 0:
            raise TraceError(path, f"negative duration {dur}", event=_label(i, name))
        if code == schema.CPU_OP and name.startswith("ProfilerStep#"):
            code = schema.ANNOTATION
        args = ev.get("args") or {}
        if not isinstance(args, dict):   # a list, a string, a number: refused
            raise TraceError(path, f"'args' is {_kind(args)}, not an object", event=_label(i, name))
        kept.append(i)
        gpu = code in schema.GPU_CATEGORIES or code == schema.SYNC or code == schema.GPU_ANNOTATION
        tid = _ref_int(ev.get("tid"))
        cols["name"].append(name)
        cols["cat"].append(code)
        cols["pid"].append(_ref_int(ev.get("pid")))
        cols["tid"].append(tid)
        cols["ts"].append(ts)
        cols["dur"].append(dur)
        cols["corr"].append(_ref_int(args.get("correlation")))
        cols["ext"].append(_ref_int(args.get("External id", args.get("external id"))))
        stream = args.get("stream")
        cols["stream"].append(_ref_int(stream) if stream is not None else (tid if gpu and code != schema.SYNC else -1))
        cols["device"].append(_ref_int(args.get("device"), _ref_int(ev.get("pid")) if gpu else -1))
        cols["wait_stream"].append(_ref_int(args.get("wait_on_stream")))
        cols["wait_corr"].append(_ref_int(args.get("wait_on_cuda_event_record_corr_id")))
        cols["sync_kind"].append(args.get("cuda_sync_kind"))
        cols["coll_name"].append(args.get("Collective name"))
        cols["in_nelems"].append(_ref_int(args.get("In msg nelems")))
        cols["out_nelems"].append(_ref_int(args.get("Out msg nelems")))
        cols["group_size"].append(_ref_int(args.get("Group size")))
        cols["seq"].append(_ref_int(args.get("Sequence number")))
        cols["dtype"].append(args.get("dtype"))
        cols["pg_ranks"].append(args.get("Process Group Ranks"))
        cols["pg_name"].append(args.get("Process Group Name"))
        cols["input_dims"].append(args.get("Input Dims") if code == schema.CPU_OP else None)
    for row, i in enumerate(kept):   # an integer beyond int64: the first event, its first such field
        for c, key in INT_KEYS:
            if not -2**63 <= cols[c][row] < 2**63:
                ev = events[i]
                if key is None:
                    field, value = c, ev[c]
                else:
                    key = "external id" if key == "External id" and key not in ev["args"] else key
                    field, value = f"args.{key}", ev["args"][key]
                raise TraceError(path, f"{field!r} {_shown(value)} is beyond the 64-bit integer range",
                                 event=_label(i, ev["name"]))
    arrays = {c: np.asarray(cols[c], dtype=np.int64) for c in INT_COLUMNS}
    arrays["cat"] = arrays["cat"].astype(np.int8)
    arrays.update({c: np.asarray(cols[c], dtype=np.float64) for c in FLOAT_COLUMNS})
    for c in OBJECT_COLUMNS:
        arr = np.empty(len(cols[c]), dtype=object)
        for k, v in enumerate(cols[c]):
            arr[k] = v
        arrays[c] = arr
    dist = doc.get("distributedInfo") or {}
    if not isinstance(dist, dict):
        raise TraceError(path, f"'distributedInfo' is {_kind(dist)}, not an object")
    rank, world = _ref_int(dist.get("rank"), 0), _ref_int(dist.get("world_size"), 1)
    top = 2**24          # the most ranks a world may hold
    if dist.get("world_size") is not None and not 1 <= world <= top:
        raise TraceError(path, f"'distributedInfo.world_size' {_shown(dist['world_size'])} is not a world size "
                               f"(1 to {top} ranks)")
    if dist.get("rank") is not None and dist.get("world_size") is not None and not 0 <= rank < world:
        raise TraceError(path, f"'distributedInfo.rank' {_shown(dist['rank'])} is not a rank of a world of size "
                               f"{world} (0 to {world - 1})")
    if dist.get("rank") is not None and not 0 <= rank < top:
        raise TraceError(path, f"'distributedInfo.rank' {_shown(dist['rank'])} is not a rank (0 to {top - 1})")
    meta = {k: v for k, v in doc.items() if k != "traceEvents"}
    table = TraceTable(path=str(path), rank=rank, world_size=world, metadata=meta,
                       unmodelled=dict(sorted(unmodelled.items())),
                       unmodelled_us=dict(sorted(unmodelled_us.items())), **arrays)
    if len(table) == 0:
        held = ("; it holds device events of categories Lumos does not model: "
                + ", ".join(f"{k} {n}" for k, n in table.unmodelled.items())) if unmodelled else ""
        raise TraceError(path, "no CPU or GPU events of a known category" + held)
    return table


def reference_load(path) -> TraceTable:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise TraceError(path, f"not valid JSON (truncated or corrupt?): {exc}") from None
    return reference_parse(doc, path)


def assert_same_table(new: TraceTable, ref: TraceTable) -> None:
    assert len(new) == len(ref)
    for c in ref.columns():
        a, b = getattr(new, c), getattr(ref, c)
        assert a.dtype == b.dtype, c
        if b.dtype == object:
            assert a.tolist() == b.tolist(), c
            assert [type(v) for v in a] == [type(v) for v in b], c
        else:
            assert np.array_equal(a, b, equal_nan=True), (c, np.flatnonzero(a != b)[:5])
    assert (new.path, new.rank, new.world_size) == (ref.path, ref.rank, ref.world_size)
    assert new.metadata == ref.metadata and list(new.metadata) == list(ref.metadata)
    assert new.unmodelled == ref.unmodelled and list(new.unmodelled) == list(ref.unmodelled)
    assert new.unmodelled_us == ref.unmodelled_us and list(new.unmodelled_us) == list(ref.unmodelled_us)


def outcome(load, path):
    """A table, or the error as (type, message)."""
    try:
        return load(path)
    except Exception as exc:  # noqa: BLE001 - any error must match too
        return (type(exc), str(exc))


def assert_same_outcome(path) -> None:
    ref, new = outcome(reference_load, path), outcome(load_trace, path)
    if isinstance(ref, TraceTable):
        assert isinstance(new, TraceTable), new
        assert_same_table(new, ref)
    else:
        assert new == ref


# --- shipped traces ----------------------------------------------------------------------

@pytest.mark.parametrize("path", ALL_TRACES, ids=[p.name[:40] for p in ALL_TRACES])
def test_every_shipped_trace_reads_identically_by_the_scanner(path):
    data = gzip.decompress(path.read_bytes())
    arrays, doc, unmodelled, unmodelled_us = scanned.scanned_columns(data)  # the fast path itself, not its fallback
    ref = reference_load(path)
    assert_same_table(reader._table(arrays, doc, path, unmodelled, unmodelled_us), ref)
    assert_same_table(load_trace(path), ref)


@pytest.mark.parametrize("path", ALL_TRACES, ids=[p.name[:40] for p in ALL_TRACES])
def test_every_shipped_trace_reads_identically_down_the_plain_path(path, monkeypatch):
    # what a process without numba running reads a file under SCANNER_PAYS_BYTES with
    monkeypatch.setenv("LUMOS_JIT", "never")
    assert_same_table(load_trace(path), reference_load(path))


def test_uncompressed_json_reads_identically(tmp_path):
    path = tmp_path / "nccl.json"
    path.write_bytes(gzip.decompress((REAL / "hta" / "nccl_parser_config__nccl_data.json.gz").read_bytes()))
    assert_same_table(load_trace(path), reference_load(path))


@pytest.mark.parametrize("path", PYTORCH_ET[:2], ids=[p.name for p in PYTORCH_ET[:2]])
def test_execution_traces_are_refused_the_same_way(path):
    with pytest.raises(TraceError, match="a PyTorch execution trace \\(schema 1.0.1\\), not a Kineto trace"):
        load_trace(path)
    assert_same_outcome(path)


# --- random documents --------------------------------------------------------------------

ints = st.one_of(st.integers(-3, 10**6), st.integers(-2**63, 2**63 - 1))
readable_ints = st.one_of(ints, st.none(), st.booleans(), st.floats(-1e6, 1e6, allow_nan=False),
                          st.sampled_from(["stream 7", "12", "x", "", "7 8", " 3", "-4"]), st.just([1, 2]),
                          st.just({"a": 1}))
odd_ints = st.one_of(readable_ints, st.integers(10**19, 10**25), st.just(1e30))  # the last two overflow
texts = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=8)
numbers = st.one_of(st.integers(-10**6, 10**16), st.floats(-1e12, 1e17, allow_nan=False, allow_infinity=False))
values = st.one_of(texts, numbers, st.none(), st.booleans(), st.lists(st.integers(0, 9), max_size=3),
                   st.lists(st.lists(st.integers(0, 4), max_size=3), max_size=3))
ARG_NAMES = ["correlation", "External id", "external id", "stream", "device", "wait_on_stream",
             "wait_on_cuda_event_record_corr_id", "cuda_sync_kind", "Collective name", "In msg nelems",
             "Out msg nelems", "Group size", "Sequence number", "dtype", "Process Group Ranks", "Input Dims",
             "Call stack"]
NAMES = ["ProfilerStep#3", "ProfilerStep#x", "ncclKernel_a", "cudaLaunchKernel", 'a"b\\c', "\u00e9\u4e2d", "t\u0000",
         "nn.Module: Block_0", "nn.Module: \u00e9_1"]


def sometimes(draw, one_in: int) -> bool:
    return one_in > 0 and draw(st.integers(1, one_in)) == 1


@st.composite
def events(draw, messy: bool):
    """One event; when not `messy`, only the kinds of oddity a real trace could hold."""
    bad = 20 if messy else 0  # one in `bad` fields is missing or of the wrong type
    ev = {}
    if not sometimes(draw, 10):
        ev["ph"] = draw(st.sampled_from(["X", "X", "X", "i", "s", "B", "x"]))
    if not sometimes(draw, 10):
        ev["cat"] = draw(st.sampled_from(["cpu_op", "Operator", "kernel", "KERNEL", "cuda_runtime", "Runtime",
                                          "gpu_memcpy", "Memset", "cuda_sync", "user_annotation",
                                          "gpu_user_annotation", "python_function", "ac2g", "Trace", "kernel",
                                          "mtia_ccp_events", "hpu_op"]))
    if sometimes(draw, bad):
        if draw(st.booleans()):
            ev["name"] = draw(values)
    else:
        ev["name"] = draw(st.one_of(texts, st.sampled_from(NAMES)))
    for key in ("ts", "dur"):
        if sometimes(draw, bad):
            if draw(st.booleans()):
                ev[key] = draw(values)
        else:
            ev[key] = draw(numbers if key == "ts" else st.one_of(st.integers(0, 10**6), st.floats(0, 1e6)))
    for key in ("pid", "tid"):
        if not sometimes(draw, 6):
            ev[key] = draw((odd_ints if messy else readable_ints) if sometimes(draw, 4) else ints)
    shape = draw(st.integers(0, 12))
    if shape == 0:
        ev["args"] = None
    elif shape == 1 and messy:
        ev["args"] = draw(st.sampled_from([[], 0, "", False, {}, [1]]))
    elif shape > 2:
        keys = draw(st.lists(st.sampled_from(ARG_NAMES), max_size=6, unique=True))
        ev["args"] = {k: draw((odd_ints if messy else readable_ints) if draw(st.booleans()) else values)
                      for k in keys}
    return ev


@st.composite
def documents(draw):
    messy = draw(st.integers(0, 3)) == 0
    evs = draw(st.lists(events(messy), max_size=25))
    if sometimes(draw, 10):
        evs.insert(draw(st.integers(0, len(evs))), draw(values))  # not an event object
    doc = {"schemaVersion": 1}
    if draw(st.booleans()):   # mostly a rank of the world; sometimes none, or an absurd one
        world = draw(st.integers(1, 8))
        rank = draw(st.integers(0, world - 1)) if not sometimes(draw, 4) else draw(readable_ints)
        doc["distributedInfo"] = {"rank": rank, "world_size": world} if not sometimes(draw, 10) else \
            draw(st.one_of(values, st.just({"rank": rank}), st.just({"world_size": draw(readable_ints)})))
    doc["traceEvents"] = evs
    if draw(st.booleans()):
        doc["deviceProperties"] = [{"id": 0, "name": "H100"}]
    return doc


def _dump(doc, style: int) -> bytes:
    if style == 0:
        return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()
    if style == 1:
        return json.dumps(doc, indent=1, ensure_ascii=True).encode()
    if style == 2:
        return json.dumps(doc, separators=(" , ", " :\t"), ensure_ascii=False).encode()
    return (" \r\n" + json.dumps(doc, indent="\t", ensure_ascii=True) + "\n\n").encode()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(doc=documents(), style=st.integers(0, 3))
def test_random_documents_read_identically(tmp_path_factory, doc, style):
    path = tmp_path_factory.mktemp("doc") / "t.json"
    path.write_bytes(_dump(doc, style))
    assert_same_outcome(path)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=documents(), seed=st.integers(0, 2**32), edits=st.integers(1, 3))
def test_corrupted_bytes_give_the_same_table_or_the_same_error(tmp_path_factory, doc, seed, edits):
    rnd = random.Random(seed)
    data = bytearray(json.dumps(doc, ensure_ascii=bool(seed % 2)).encode())
    for _ in range(edits):
        at = rnd.randrange(len(data))
        op = rnd.randrange(3)
        char = rnd.choice(b'{}[]",:\\ 0123456789.eE+-tfnulx\x00\x1f\xc3\xa9\xff')
        if op == 0:
            del data[at]
        elif op == 1:
            data.insert(at, char)
        else:
            data[at] = char
    path = tmp_path_factory.mktemp("bad") / "t.json"
    path.write_bytes(bytes(data))
    assert_same_outcome(path)


@pytest.mark.parametrize("text", [
    b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2, "dur": 3, '
    b'"args": {"stream": 1}, "args": {"stream": "stream 9", "device": 2.7}}], "traceEvents": []}',
    b'{"traceEvents": [{"ph": "X", "c\\u0061t": "kernel", "name": "k", "ts": 1, "dur": 2}]}',
    b'{"traceEvents": [{"ph": "\\u0058", "cat": "kernel", "name": "k", "ts": 1, "dur": 2}]}',
    b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k\\ud83d\\ude00", "ts": 1e2, "dur": 2E-1}]}',
    b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k\\ud800x", "ts": 1, "dur": 2}]}',
    b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k\\udc00\\ud800", "ts": 1, "dur": 2}]}',
    b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1e400, "dur": 2}]}',
    b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1e-400, "dur": 25e-1}]}',
    b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": -0, "dur": 0.0}]}',
    b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2, "args": [1]}]}',
    b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "k", "ts": 1, "dur": 2, "pid": 1e30}]}',
    b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "k", "ts": 1, "dur": 2, "pid": 123456789012345678901}]}',
    b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "k", "ts": 1, "dur": -1}]}',
    b'\xef\xbb\xbf{"traceEvents": []}',
    b'{"traceEvents": [' + b'[' * 300 + b']' * 300 + b']}',
    b'{"traceEvents": [{"ph": "X", "cat": "Kernel", "name": "\xc3\xa9", "ts": 1, "dur": 2}]} x',
    b'{"traceEvents": [{"ph": "X", "cat": "Kernel", "name": "\xed\xa0\x80", "ts": 1, "dur": 2}]}',
    b'{"traceEvents": [{"ph": "X", "cat": "\xc3\x89kernel", "name": "n", "ts": 1, "dur": 2}]}',
    b'{"traceEvents": {"ph": "X"}}',
    b'{"traceEvents": [{"ph":"X","cat":"kernel","name":"a","ts":1,"dur":2,"args":{"External id":null,'
    b'"external id":5,"In msg nelems":"7","Group size":true,"Process Group Ranks":"[0, 1]"}}]}',
])
def test_awkward_documents(tmp_path, text):
    path = tmp_path / "t.json"
    path.write_bytes(text)
    assert_same_outcome(path)


@pytest.mark.parametrize("mode", ["always", "never"])
@pytest.mark.parametrize("text, message", [
    (b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2, "args": [1]}]}',
     "(event #0 'k'): 'args' is an array, not an object"),
    (b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "k", "ts": 1, "dur": 2, "pid": 1e30}]}',
     "(event #0 'k'): 'pid' 1e+30 is beyond the 64-bit integer range"),
    (b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "k", "ts": 1, "dur": 2, "pid": 123456789012345678901}]}',
     "(event #0 'k'): 'pid' 1.2345678901234568e+20 is beyond the 64-bit integer range"),
    (b'{"distributedInfo": [0], "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "k", "ts": 1, "dur": 2}]}',
     ": 'distributedInfo' is an array, not an object"),
])
def test_malformed_awkward_documents_give_one_clear_line_down_both_paths(tmp_path, monkeypatch, mode, text, message):
    """Of the awkward documents above, those once a traceback are one TraceError line."""
    monkeypatch.setenv("LUMOS_JIT", mode)
    path = tmp_path / "t.json"
    path.write_bytes(text)
    with pytest.raises(TraceError) as err:
        load_trace(path)
    assert str(err.value) == (f"{path}{message}" if message.startswith(":") else f"{path} {message}")


def test_repeated_keys_take_the_last_value_as_orjson_does(tmp_path):
    path = tmp_path / "t.json"
    path.write_bytes(b'{"traceEvents": [{"ph": "B", "ph": "X", "cat": "cpu_op", "cat": "kernel", "name": "a", '
                     b'"name": "k", "ts": 1, "dur": 2, "dur": 3, "args": {"stream": 1}, '
                     b'"args": {"stream": "stream 9", "stream": 4, "device": 2.7}}]}')
    arrays, doc, unmodelled, unmodelled_us = scanned.scanned_columns(path.read_bytes())  # decided by the scanner
    table = reader._table(arrays, doc, path, unmodelled, unmodelled_us)
    assert_same_table(table, reference_load(path))
    assert (table.name[0], table.cat[0], table.dur[0], table.stream[0], table.device[0]) == ("k", schema.KERNEL,
                                                                                              3.0, 4, 2)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(doc=documents(), style=st.integers(0, 3), cap=st.integers(0, 5))
def test_a_scan_whose_table_starts_small_grows_to_the_same_scan(doc, style, cap):
    """The scanner's table grows as it finds events: a scan begun with room for `cap` rows
    goes on from the event that found no row and ends where a scan with room for all of them does."""
    data = _dump(doc, style)
    ok, rows, loc, args_ok, lo, hi = scan._scan(data, cap)
    want = scan._scan(data, data.count(b"{"))
    assert (ok, rows, lo) == (want[0], want[1], want[4]) and (not ok or hi == want[5])
    assert np.array_equal(_spans(loc, rows), _spans(want[2], rows))
    assert bytes(args_ok[:rows]) == bytes(want[3][:rows])


def _spans(loc, rows: int) -> np.ndarray:
    """The (start, end) of each field of the first `rows` rows; (-1, -1) where absent (an absent field's
    end is left as it was)."""
    spans = np.frombuffer(loc, np.int64)[:rows * scan.N_FIELDS * 2].reshape(rows, scan.N_FIELDS, 2).copy()
    spans[spans[:, :, 0] < 0] = -1
    return spans
