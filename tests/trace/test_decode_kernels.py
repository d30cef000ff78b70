"""The C column decoders after the scan (`numbers`, `interned`: lumos/kernels/decode.c) give what
their Python twins in `scanned.py` give, bit for bit: on every field of every shipped real trace,
on hard decimal numbers, on random documents and on corrupted bytes."""

from __future__ import annotations

import gzip
import json
import random
import struct

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lumos import jit
from lumos.trace import scanned
from lumos.trace.scan import N_FIELDS, T_INT, T_NUM, T_STR, T_STR_ESC, Unusual, scan_document

from ..conftest import REAL

SHIPPED = sorted(p for p in REAL.rglob("*.json.gz") if "pytorch_et" not in p.parts)   # Kineto traces


def _scanned(data: bytes):
    s = scan_document(data)
    args_ok, loc, typ, iv = scanned._arrays(s)
    return np.frombuffer(data, dtype=np.uint8), loc, typ


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.int64)


def assert_kernels_match_twins(data: bytes, check_nan: bool = True) -> int:
    """Every field of every scanned row through both kernels and both twins; how many numbers."""
    buf, loc, typ = _scanned(data)
    every = np.arange(len(typ))
    count = 0
    for field in range(N_FIELDS):
        twin = scanned._numbers_twin(buf, loc, typ, field, every)
        out = np.empty(len(every))
        left = jit.kernels().numbers(buf, loc, typ, N_FIELDS, field, every, out)
        numeric = (typ[:, field] == T_INT) | (typ[:, field] == T_NUM)
        assert left == np.isnan(out).sum()
        done = ~np.isnan(out)
        assert not (done & ~numeric).any()
        assert (_bits(out[done]) == _bits(twin[done])).all()   # bit for bit: -0.0, the last digit
        rows = every[numeric]
        assert (_bits(scanned._numbers(buf, loc, typ, field, rows)) == _bits(twin[numeric])).all()
        if check_nan:   # orjson is left only what the C parse may not read exactly
            assert left == (~numeric).sum() or left < len(rows)
        count += len(rows)

        codes, first = scanned._interned_twin(buf, loc, typ, field, every)
        c_codes = np.empty(len(every), dtype=np.int32)
        c_first = np.empty(len(every), dtype=np.int64)
        distinct = jit.kernels().interned(buf, loc, typ, N_FIELDS, field, every, c_codes, c_first)
        assert (c_codes == codes).all() and (c_first[:distinct] == first).all()
        strings = (typ[:, field] == T_STR) | (typ[:, field] == T_STR_ESC)
        assert ((codes >= 0) == strings).all()
        which, names = scanned._interned(buf, loc, typ, field, every)
        twin_which, twin_names = scanned._interned(buf, loc, typ, field, every, twin=True)
        assert (which == twin_which).all() and names == twin_names
        values = scanned._values(buf, loc[:, field, 0], loc[:, field, 1], every[strings])
        assert [names[j] for j in which[strings]] == values   # each as orjson decodes it
    return count


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name[:40] for p in SHIPPED])
def test_every_field_of_every_shipped_trace_decodes_as_the_twins_do(path):
    assert_kernels_match_twins(gzip.decompress(path.read_bytes()))


def _next_double(x: float) -> float:
    return struct.unpack("<d", struct.pack("<q", struct.unpack("<q", struct.pack("<d", x))[0] + 1))[0]


def _hard_numbers(seed: int, n: int) -> list[str]:
    """Decimals where a parse that is not correctly rounded goes wrong: halfway between two doubles
    and next to it, long significands, exponents near the ends, -0 in each spelling."""
    from decimal import Decimal
    rnd = random.Random(seed)
    out = ["0", "-0", "0.0", "-0.0", "-0e5", "0E-7", "1e-400", "-1e-400", "4.9e-324", "2.4703282292062327e-324",
           "2.2250738585072011e-308", "2.2250738585072014e-308", "1.7976931348623157e308", "9007199254740993",
           "9007199254740992.5", "18446744073709551615", "18446744073709551616", "-9223372036854775809",
           "123456789012345678", "1234567890123456789", "0.1", "1e22", "1e23", "1.5e-22", "1e-23", "3.14159e+0"]
    for _ in range(n):
        kind = rnd.randrange(4)
        if kind == 0:   # a Kineto-like time: 13 to 17 digits, 0 to 4 decimals
            s = str(rnd.randrange(10**12, 10**17))
            if rnd.random() < .7:
                s += "." + "".join(rnd.choice("0123456789") for _ in range(rnd.randrange(1, 5)))
        elif kind == 1:   # halfway between two doubles, exactly and just off
            x = rnd.uniform(1e12, 2e15) if rnd.random() < .5 else rnd.uniform(0, 1e6)
            mid = (Decimal(x) + Decimal(_next_double(x))) / 2
            s = format(mid, "f")
            if rnd.random() < .5:
                s += "0001" if "." in s else ".0001"
        elif kind == 2:   # long significands
            s = str(rnd.randrange(1, 10**rnd.randrange(1, 40)))
            cut = rnd.randrange(0, len(s))
            s = (s[:cut] or "0") + "." + s[cut:] if cut else s
        else:
            s = f"{rnd.randrange(1, 10**rnd.randrange(1, 20))}e{rnd.randrange(-330, 290)}"
        if rnd.random() < .2:
            s = "-" + s
        out.append(s)
    return out


def _scans(data: bytes) -> bool:
    try:
        scan_document(data)
    except Unusual:   # numbers near the float limits, which the scanner leaves to orjson
        return False
    return True


def _document(ts: list[str], names: list[str]) -> bytes:
    events = ",".join(f'{{"ph": "X", "cat": "kernel", "name": {json.dumps(n)}, "ts": {t}, "dur": 1}}'
                      for t, n in zip(ts, names))
    return f'{{"traceEvents": [{events}]}}'.encode()


@pytest.mark.parametrize("seed", range(4))
def test_hard_decimals_read_as_orjson_reads_them(seed):
    numbers = [x for x in _hard_numbers(seed, 3000) if _scans(_document([x], ["a"]))]
    assert len(numbers) > 2500
    names = [random.Random(seed).choice(["a", "b", 'c"\\', "\u00e9", "a\\u0062", "ab", ""]) for _ in numbers]
    data = _document(numbers, names)
    buf, loc, typ = _scanned(data)
    every = np.arange(len(typ))
    got = scanned._numbers(buf, loc, typ, 2, every)
    assert (_bits(got) == _bits(np.array(orjson.loads(b"[" + ",".join(numbers).encode() + b"]"), dtype=float))).all()
    python = [float(int(x)) if x.lstrip("-").isdigit() else float(x) for x in numbers]   # "-0" is 0.0
    assert (_bits(got) == _bits(np.array(python))).all()
    assert_kernels_match_twins(data)


texts = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=6)
values = st.one_of(texts, st.integers(-10**20, 10**20), st.floats(-1e200, 1e200, allow_nan=False), st.none(),
                   st.booleans(), st.lists(st.integers(0, 9), max_size=2))


@st.composite
def documents(draw):
    events = []
    for _ in range(draw(st.integers(0, 30))):
        ev = {"ph": "X"}
        for key in ("cat", "name", "ts", "dur", "pid"):
            if draw(st.integers(0, 5)):
                ev[key] = draw(st.one_of(values, st.sampled_from(["kernel", "cpu_op", "ab", "a"])))
        if draw(st.booleans()):
            ev["args"] = {k: draw(values) for k in draw(st.lists(st.sampled_from(["stream", "External id", "dtype"]),
                                                                 max_size=3, unique=True))}
        events.append(ev)
    return {"traceEvents": events}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=documents(), ascii_only=st.booleans())
def test_random_documents_decode_as_the_twins_do(doc, ascii_only):
    assert_kernels_match_twins(json.dumps(doc, ensure_ascii=ascii_only).encode())


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=documents(), seed=st.integers(0, 2**32), edits=st.integers(1, 4))
def test_corrupted_documents_decode_as_the_twins_do_where_they_scan(doc, seed, edits):
    rnd = random.Random(seed)
    data = bytearray(json.dumps(doc, ensure_ascii=bool(seed % 2)).encode())
    for _ in range(edits):
        at = rnd.randrange(len(data))
        char = rnd.choice(b'{}[]",:\\ 0123456789.eE+-tfnul\x00\xc3\xa9\xff')
        if rnd.randrange(2):
            data.insert(at, char)
        else:
            data[at] = char
    try:
        assert_kernels_match_twins(bytes(data))
    except Unusual:
        pass


def test_the_decoders_refuse_rows_and_arrays_that_do_not_fit():
    buf, loc, typ = _scanned(_document(["1", "2.5"], ["a", "b"]))
    k = jit.kernels()
    with pytest.raises(ValueError, match=r"at\[0\] = 2 outside \[0, 2\)"):
        k.numbers(buf, loc, typ, N_FIELDS, 2, np.array([2]), np.empty(1))
    with pytest.raises(ValueError, match="array shapes do not match"):
        k.numbers(buf, loc, typ, N_FIELDS, N_FIELDS, np.array([0]), np.empty(1))
    with pytest.raises(ValueError, match="array shapes do not match"):
        k.interned(buf, loc, typ, N_FIELDS, 1, np.array([0, 1]), np.empty(1, np.int32), np.empty(2, np.int64))
    with pytest.raises(TypeError, match="codes must be a contiguous int32 array"):
        k.interned(buf, loc, typ, N_FIELDS, 1, np.array([0]), np.empty(1, np.int64), np.empty(1, np.int64))
    out = np.empty(2)
    assert k.numbers(buf, loc, typ, N_FIELDS, 2, np.array([0, 1]), out) == 0 and out.tolist() == [1.0, 2.5]
