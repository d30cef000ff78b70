"""Hostile trace files (what a fuzz campaign against the reader found): every malformed trace is one line naming the file, the event, the
field and what is wrong (exit 2, never a traceback), the same down the compiled (C) path and the
plain path; absurd ranks are refused at load; the scanner's table and the name interner stay in
proportion to what a document holds; and the C kernels refuse arguments that would take them
outside their arrays, naming the argument."""

from __future__ import annotations

import gzip
import json
import time

import numpy as np
import pytest

from lumos import jit
from lumos.cli import main
from lumos.trace import TraceError, hostile, load_trace, scanned
from lumos.trace import scan as scan_mod
from lumos.trace.scan import (ARG_LENS, ARG_TABLE, EVENT_IDS, EVENT_LENS, EVENT_TABLE, K_ARGS, K_PH, N_EVENT, N_FIELDS,
                              T_INT, T_NUM, T_STR, TRACE_KEY, scan_document)

PATHS = pytest.mark.parametrize("mode", ["always", "never"], ids=["compiled", "plain"])


@pytest.fixture
def on_path(monkeypatch, mode):
    """The reader down one path: the C scanner (`always`) or orjson and `parse_document` (`never`)."""
    monkeypatch.setenv("LUMOS_JIT", mode)


def _op(**extra) -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": "op", "ts": 1, "dur": 2, "pid": 1, "tid": 1, **extra}


def _write(tmp_path, doc, name="t.json") -> str:
    path = tmp_path / name
    data = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    return str(path)


def _replay_error(capsys, path) -> str:
    """`lumos replay PATH` exits 2 with one line on stderr: that line."""
    assert main(["replay", path]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


# --- 1. args and distributedInfo that are not objects ------------------------------------------

@PATHS
@pytest.mark.parametrize("args, kind", [([1], "an array"), ("x", "a string"), (3, "a number"), (True, "a boolean"),
                                        ({"a": 1}, None), ([], None), (None, None)])
def test_args_that_are_not_an_object(tmp_path, capsys, on_path, args, kind):
    path = _write(tmp_path, {"traceEvents": [_op(), _op(name="mm", args=args)]})
    if kind is None:   # an object, null or empty: loads
        assert len(load_trace(path)) == 2
        return
    assert _replay_error(capsys, path) == \
        f"lumos replay: error: {path} (event #1 'mm'): 'args' is {kind}, not an object"


@PATHS
@pytest.mark.parametrize("dist, kind", [([1], "an array"), ("rank 0", "a string"), (7, "a number")])
def test_distributed_info_that_is_not_an_object(tmp_path, capsys, on_path, dist, kind):
    path = _write(tmp_path, {"distributedInfo": dist, "traceEvents": [_op()]})
    assert _replay_error(capsys, path) == f"lumos replay: error: {path}: 'distributedInfo' is {kind}, not an object"


# --- 2. integers beyond int64 -----------------------------------------------------------------------

@PATHS
@pytest.mark.parametrize("text, field, shown", [
    (b'"pid": 99999999999999999999', "'pid'", "1e+20"),
    (b'"pid": "99999999999999999999"', "'pid'", "'99999999999999999999'"),
    (b'"pid": 1e30', "'pid'", "1e+30"),
    (b'"pid": 123456789012345678901', "'pid'", "1.2345678901234568e+20"),   # test_awkward_documents' two
    (b'"tid": 9223372036854775808', "'tid'", "9223372036854775808"),          # 2**63: one past
    (b'"args": {"correlation": 1e19}', "'args.correlation'", "1e+19"),
    (b'"args": {"external id": "stream 99999999999999999999"}', "'args.external id'",
     "'stream 99999999999999999999'"),
])
def test_an_integer_beyond_int64_names_the_event_and_the_field(tmp_path, capsys, on_path, text, field, shown):
    doc = (b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "dur": 2}, '
           b'{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2, ' + text + b'}]}')
    path = _write(tmp_path, doc)
    assert _replay_error(capsys, path) == \
        f"lumos replay: error: {path} (event #1 'k'): {field} {shown} is beyond the 64-bit integer range"


@PATHS
def test_the_first_event_and_field_beyond_int64_is_named(tmp_path, on_path):
    doc = {"traceEvents": [_op(), _op(name="b", tid=2**70, args={"stream": 2**64}), _op(name="c", pid=2**64)]}
    with pytest.raises(TraceError) as err:
        load_trace(_write(tmp_path, doc))
    assert str(err.value).endswith("(event #1 'b'): 'tid' 1.1805916207174113e+21 is beyond the 64-bit integer range")


@PATHS
def test_the_edges_of_int64_and_a_huge_timestamp_load(tmp_path, on_path):
    doc = (b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1e30, "dur": 2, '
           b'"pid": -9223372036854775808, "tid": 9223372036854775807}]}')
    table = load_trace(_write(tmp_path, doc))
    assert (table.ts[0], table.pid[0], table.tid[0]) == (1e30, -2**63, 2**63 - 1)   # ts is a float column


# --- 5. absurd ranks -----------------------------------------------------------------------------

@PATHS
@pytest.mark.parametrize("dist, message", [
    ({"rank": 10**300}, "'distributedInfo.rank' 1e+300 is not a rank (0 to 16777215)"),
    ({"rank": -7, "world_size": 8}, "'distributedInfo.rank' -7 is not a rank of a world of size 8 (0 to 7)"),
    ({"rank": -7}, "'distributedInfo.rank' -7 is not a rank (0 to 16777215)"),
    ({"rank": 8, "world_size": 8}, "'distributedInfo.rank' 8 is not a rank of a world of size 8 (0 to 7)"),
    ({"rank": 0, "world_size": -3}, "'distributedInfo.world_size' -3 is not a world size (1 to 16777216 ranks)"),
    ({"world_size": 0}, "'distributedInfo.world_size' 0 is not a world size (1 to 16777216 ranks)"),
    ({"world_size": 2**24 + 1}, "'distributedInfo.world_size' 16777217 is not a world size (1 to 16777216 ranks)"),
    ({"rank": "rank 2", "world_size": "2"}, "'distributedInfo.rank' 'rank 2' is not a rank of a world of size 2 "
                                             "(0 to 1)"),
])
def test_absurd_ranks_are_refused_at_load(tmp_path, capsys, on_path, dist, message):
    path = _write(tmp_path, {"distributedInfo": dist, "traceEvents": [_op()]})
    assert _replay_error(capsys, path) == f"lumos replay: error: {path}: {message}"


@PATHS
@pytest.mark.parametrize("dist, rank, world", [({"rank": 3}, 3, 1), ({"rank": 2, "world_size": 4}, 2, 4),
                                               ({"world_size": 16}, 0, 16), ({}, 0, 1), (None, 0, 1)])
def test_sane_ranks_load(tmp_path, on_path, dist, rank, world):
    table = load_trace(_write(tmp_path, {"distributedInfo": dist, "traceEvents": [_op()]}))
    assert (table.rank, table.world_size) == (rank, world)


# --- 3. the scanner's table: sized by the events, not by braces in strings ------------------------

def test_braces_inside_a_string_do_not_size_the_table(tmp_path):
    braces = 20_000_000   # the file holds 80 million (78 KB gzipped); 368 bytes of table each
    data = hostile.braces_document(braces)
    assert scan_mod.count_byte(data, ord("{")) == braces + 3
    scan = scan_document(data)
    assert scan.rows == 1
    assert scan.loc.nbytes <= (len(data) // scan_mod.BYTES_PER_ROW + 65) * N_FIELDS * 16 < braces * 20
    path = _write(tmp_path, data, "braces.json.gz")
    for mode in ("always", "never"):
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("LUMOS_JIT", mode)
            assert list(load_trace(path).name) == ["op"]


@pytest.mark.parametrize("cap", [0, 1, 2, 7, 64, 999, 1000, 1001])
def test_the_table_grows_as_the_scan_finds_events(cap):
    names = hostile.ordinary_names(1000)
    data = hostile.names_document(names[:500]) [:-2] + b', {"ph": "i"}, 7, [{"ph": "X"}], ' + \
        hostile.names_document(names[500:])[len(b'{"traceEvents":['):]
    want = scan_mod._scan(data, 5000)
    ok, rows, loc, args_ok, lo, hi = scan_mod._scan(data, cap)
    assert (ok, rows, lo, hi) == (want[0], 1000, want[4], want[5]) and ok
    assert np.array_equal(_spans(loc, rows), _spans(want[2], rows))
    assert bytes(args_ok[:rows]) == bytes(want[3][:rows])
    assert len(loc) <= (max(2 * 1000, cap) + 130) * N_FIELDS * 2   # at most twice what it needs


# --- 4. names built to collide in the interner --------------------------------------------------

def test_names_built_to_collide_under_the_old_hash_intern_in_linear_time(tmp_path):
    n = 20_000
    names = hostile.colliding_names(n)
    assert len({hostile.old_span_hash(f'"{x}"'.encode()) & 0xFFFF for x in names}) == 1   # one slot, before
    data = hostile.names_document(names)
    scan = scan_document(data)
    args_ok, loc, typ, iv = scanned._arrays(scan)
    buf = np.frombuffer(data, np.uint8)
    every = np.arange(scan.rows)
    codes, first = np.empty(n, np.int32), np.empty(n, np.int64)
    probes = np.zeros(1, np.int64)
    field = scan_mod.F["name"]
    distinct = jit.kernels().interned(buf, loc, typ, N_FIELDS, field, every, codes, first, probes)
    assert distinct == n and probes[0] < 2 * n   # a colliding chain would pass n**2 / 2 = 2e8 slots
    twin_codes, twin_first = scanned._interned_twin(buf, loc, typ, field, every)   # in order of first appearance
    assert np.array_equal(codes, twin_codes) and np.array_equal(first[:distinct], twin_first)

    bad, good = tmp_path / "bad.json", tmp_path / "good.json"
    bad.write_bytes(data)
    good.write_bytes(hostile.names_document(hostile.ordinary_names(n)))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LUMOS_JIT", "always")

        def best(path):
            times = []
            for _ in range(3):
                t = time.perf_counter()
                load_trace(path)
                times.append(time.perf_counter() - t)
            return min(times)

        assert best(bad) < 5 * best(good) + 0.1   # was 11x at 20,000 names (0.23 s against 0.02 s)


# --- 8. the C kernels refuse what would take them outside their arrays ------------------------------

def _scan_args(**over):
    data = b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2}]}'
    cap = 4   # the tables' size; an `over` of cap asks for more than they hold
    args = dict(buf=data, cap=cap, loc=np.zeros((cap + 1) * N_FIELDS * 2, np.int64), args_ok=np.zeros(cap, bool),
                ev_table=EVENT_TABLE, ev_lens=EVENT_LENS, ev_ids=EVENT_IDS, arg_table=ARG_TABLE, arg_lens=ARG_LENS,
                trace_key=TRACE_KEY, n_fields=N_FIELDS, n_event=N_EVENT, k_ph=K_PH, k_args=K_ARGS)
    args.update(over)
    return list(args.values())


def test_the_scanner_takes_its_own_arguments():
    ok, rows, lo, hi, at = jit.kernels().scan(*_scan_args())
    assert (ok, rows, at) == (True, 1, -1)


@pytest.mark.parametrize("over, error", [
    ({"ev_ids": np.array([0, 1, 2, 3, 4, 99, K_PH, K_ARGS])}, r"ev_ids\[5\] = 99 is neither an event field"),
    ({"ev_ids": np.array([0, 1, 2, 3, 4, 5, K_PH, -7])}, r"ev_ids\[7\] = -7 is neither"),
    ({"ev_ids": np.array([0, 1, 2])}, r"ev_ids holds 3 ids for the 8 keys of ev_lens"),
    ({"n_fields": -1}, r"n_event = 6 and n_fields = -1"),
    ({"n_event": -1}, r"n_event = -1 and n_fields = 23"),
    ({"n_fields": 10}, r"arg_lens holds 17 keys, more than the n_fields - n_event = 4"),
    ({"k_ph": 3}, r"k_ph = 3 and k_args = -3"),
    ({"ev_lens": np.array([3, 4, 2, 3, 3, 3, 2, 99])},
     r"ev_lens\[7\] = 99 outside 0 to the width of ev_table's rows \(4\)"),
    ({"ev_lens": np.array([3, 4, 2, 3, 3, 3, 2, -1])}, r"ev_lens\[7\] = -1"),
    ({"ev_table": EVENT_TABLE[:-1]}, r"ev_table holds 31 bytes, not 8 rows"),
    ({"arg_lens": np.array(list(ARG_LENS)[:-1] + [10**6])}, r"arg_lens\[16\] = 1000000"),
    ({"loc": np.zeros(10, np.int64)}, r"loc holds 10 int64, fewer than \(cap \+ 1\) \* n_fields \* 2"),
    ({"cap": 2**62}, r"loc holds"),
    ({"args_ok": np.zeros(1, bool)}, r"args_ok holds 1, fewer than cap = 4"),
])
def test_the_scanner_refuses_arguments_outside_its_tables(over, error):
    with pytest.raises(ValueError, match=error):
        jit.kernels().scan(*_scan_args(**over))


@pytest.mark.parametrize("start, rows, lo", [(5, 0, 20), (200, 0, 16), (20, -1, 16), (20, 5, 16), (20, 0, -1)])
def test_a_resumed_scan_refuses_positions_outside_the_document(start, rows, lo):
    with pytest.raises(ValueError, match="start = .* going on needs 0 <= lo < start <= len"):
        jit.kernels().scan(*_scan_args(), start, rows, lo)


@pytest.mark.parametrize("what, error", [("ev_ids", "ev_ids must be a contiguous int64 array"),
                                         ("loc", "loc must be a contiguous writable int64 array")])
def test_the_scanner_names_an_array_of_the_wrong_type(what, error):
    kw = {what: np.zeros(30, np.float64) if what == "ev_ids" else bytes(1000)}
    with pytest.raises(TypeError, match=error):
        jit.kernels().scan(*_scan_args(**kw))


def test_classify_refuses_a_span_outside_the_buffer():
    buf = np.frombuffer(b'{"a": 12}', np.uint8)
    loc = np.full((1, N_FIELDS, 2), -1, np.int64)
    loc[0, 2] = (6, 10)   # one past the end
    typ, iv = np.zeros(N_FIELDS, np.int8), np.zeros(11, np.int64)
    with pytest.raises(ValueError, match=r"classify: loc\[0, 2\] = \(6, 10\) is a span outside the buffer \(9 bytes\)"):
        jit.kernels().classify(buf, loc, 1, typ, iv, 4)
    loc[0, 2] = (7, 6)
    with pytest.raises(ValueError, match=r"loc\[0, 2\] = \(7, 6\)"):
        jit.kernels().classify(buf, loc, 1, typ, iv, 4)
    with pytest.raises(ValueError, match="rows = -1 is negative"):
        jit.kernels().classify(buf, loc, -1, typ, iv, 4)
    loc[0, 2] = (6, 8)
    jit.kernels().classify(buf, loc, 1, typ, iv, 4)
    assert (typ[2], iv[0]) == (T_INT, 0) and typ[:2].tolist() == [0, 0]


def _one_number(text: bytes, typ_of: int) -> float:
    buf = np.array(bytearray(text), np.uint8)   # the number is the whole allocation: a read past it is past it
    loc = np.array([[[0, len(text)]]], np.int64)
    typ = np.array([[typ_of]], np.int8)
    out = np.empty(1)
    jit.kernels().numbers(buf, loc, typ, 1, 0, np.zeros(1, np.int64), out)
    return out[0]


@pytest.mark.parametrize("text", [b"1e", b"1E+", b"-1e-", b"-", b"1.5x", b"--1", b"1e5e", b"e", b"-e"])
def test_numbers_reads_no_further_than_a_span_that_is_no_number(text):
    """A span that is no JSON number is NaN (left to orjson), read only within itself: the buffer
    ends where the span does, so a read past it is one AddressSanitizer reports (fuzz/asan_build.sh).
    A span the caller calls a plain integer (T_INT, as `classify` found it) is read as its digits."""
    assert np.isnan(_one_number(text, T_NUM))
    _one_number(text, T_INT)


@pytest.mark.parametrize("text", [b"99999999999999999999999", b"-99999999999999999999", b"9223372036854775808",
                                  b"123456789012345678"])
def test_numbers_reads_long_integers_without_overflow(text):
    assert _one_number(text, T_INT) == float(text) == _one_number(text, T_NUM)


def test_the_small_kernels_name_their_arguments():
    k = jit.kernels()
    buf = np.frombuffer(b"{{}", np.uint8)
    with pytest.raises(ValueError, match="count_byte: byte = 256 is not a byte"):
        k.count_byte(buf, 256)
    with pytest.raises(ValueError, match="gather: sep = -1 is not a byte"):
        k.gather(buf, np.zeros(1, np.int64), np.ones(1, np.int64), -1, False, np.zeros(8, np.uint8))
    loc, typ = np.array([[[0, 2]]], np.int64), np.array([[T_STR]], np.int8)
    codes, first = np.empty(1, np.int32), np.empty(1, np.int64)
    with pytest.raises(TypeError, match="probes must be a contiguous int64 array"):
        k.interned(buf, loc, typ, 1, 0, np.zeros(1, np.int64), codes, first, np.zeros(1, np.int32))
    with pytest.raises(ValueError, match="probes holds no item"):
        k.interned(buf, loc, typ, 1, 0, np.zeros(1, np.int64), codes, first, np.zeros(0, np.int64))


def _spans(loc, rows: int) -> np.ndarray:
    """The (start, end) of each field of the first `rows` rows; (-1, -1) where absent (an absent field's
    end is left as it was)."""
    spans = np.frombuffer(loc, np.int64)[:rows * N_FIELDS * 2].reshape(rows, N_FIELDS, 2).copy()
    spans[spans[:, :, 0] < 0] = -1
    return spans
