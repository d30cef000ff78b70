"""Trace events encoded to JSON a column at a time, for writers that hold columns, not dicts.

One rank of a large emulated run records millions of events; building a dict per event and
handing the list to orjson cost more than the emulation (measured:
docs/notes/2026-12-02-per-job-cost.md). Here an event is a row:

    head            numbers, each after its kind's separator            pre  tail  post
    {"ph":"X",...,"pid":  7  ,"tid":  7  ,"ts":  1.5  ,"dur":  2.25  ,"args":  {...}  }

`head` and `tail` index a table of byte fragments (a kernel's name is encoded once per name,
an op's args once per op); the separators, the number formats, `pre` and `post` belong to the
event's kind. One compiled pass copies the fragments and writes the numbers. A time column
holds integer nanoseconds and is written as microseconds with three decimals, which parse to
the same double as `ns / 1000.0` (and always with a decimal point, as orjson writes a float).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
import orjson

from lumos.jit import njit

__all__ = ["INT", "USEC", "MAX_NUMBERS", "Fragments", "Kind", "around_events", "encode_rows"]

INT, USEC = 0, 1          # a number column: plain integer; integer ns written as microseconds
MAX_NUMBERS = 8           # numbers per event, at most
_DIGITS = 21              # bytes one int64 may need, sign and decimal point included


class Fragments:
    """The byte strings events are stitched from, each stored once under an integer id."""

    def __init__(self):
        self._parts: list[bytes] = []
        self._ids: dict[bytes, int] = {}

    def add(self, fragment: bytes) -> int:
        """The id of `fragment` (stored the first time)."""
        got = self._ids.get(fragment)
        if got is None:
            got = self._ids[fragment] = len(self._parts)
            self._parts.append(fragment)
        return got

    def ids(self, keys: Sequence, encode) -> np.ndarray:
        """One id per key, `encode(key)` called once per distinct key."""
        ids = {k: self.add(encode(k)) for k in dict.fromkeys(keys)}
        return np.fromiter(map(ids.__getitem__, keys), dtype=np.int64, count=len(keys))

    def extend(self, fragments: Iterable[bytes]) -> np.ndarray:
        """Ids of fragments that are (nearly) all distinct, stored without looking them up."""
        first = len(self._parts)
        self._parts.extend(fragments)
        return np.arange(first, len(self._parts), dtype=np.int64)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """All fragments as one byte array and their offsets (fragment k is buf[off[k]:off[k + 1]])."""
        lengths = np.fromiter(map(len, self._parts), dtype=np.int64, count=len(self._parts))
        off = np.zeros(len(self._parts) + 1, dtype=np.int64)
        np.cumsum(lengths, out=off[1:])
        return np.frombuffer(b"".join(self._parts), dtype=np.uint8), off


@dataclass(frozen=True)
class Kind:
    """The fixed part of one kind of event: a separator and a format per number, then `pre`
    (before the event's own tail fragment) and `post` (after it)."""
    separators: tuple[bytes, ...]
    formats: tuple[int, ...]
    pre: bytes = b""
    post: bytes = b"}"

    def __post_init__(self):
        if len(self.separators) != len(self.formats) or len(self.formats) > MAX_NUMBERS:
            raise ValueError(f"a kind has one format per separator, at most {MAX_NUMBERS}: {self}")


def encode_rows(fragments: Fragments, kinds: Sequence[Kind], kind: np.ndarray, head: np.ndarray,
                numbers: np.ndarray, tail: np.ndarray, prefix: bytes = b"", suffix: bytes = b"") -> np.ndarray:
    """`prefix`, then events `i` in row order, comma-separated: head[i], kind[i]'s numbers
    (numbers[i, j]), its `pre`, the fragment tail[i] (-1: none), its `post`; then `suffix`.
    The bytes come as a uint8 array (`.tobytes()`, or write it as it is: no copy)."""
    n = len(kind)
    if not (len(head) == len(tail) == len(numbers) == n):
        raise ValueError("encode_rows: kind, head, numbers and tail must have one row per event")
    if n == 0:
        return np.frombuffer(prefix + suffix, dtype=np.uint8)
    k = len(kinds)
    sep = np.full((k, MAX_NUMBERS), -1, dtype=np.int64)
    fmt = np.zeros((k, MAX_NUMBERS), dtype=np.int8)
    count = np.zeros(k, dtype=np.int64)
    pre = np.empty(k, dtype=np.int64)
    post = np.empty(k, dtype=np.int64)
    for j, kd in enumerate(kinds):
        count[j] = len(kd.formats)
        for s, (separator, f) in enumerate(zip(kd.separators, kd.formats)):
            sep[j, s], fmt[j, s] = fragments.add(separator), f
        pre[j], post[j] = fragments.add(kd.pre), fragments.add(kd.post)
    buf, off = fragments.arrays()
    length = np.diff(off)
    head = np.ascontiguousarray(head, dtype=np.int64)
    tail = np.ascontiguousarray(tail, dtype=np.int64)
    kind = np.ascontiguousarray(kind, dtype=np.int64)
    numbers = np.ascontiguousarray(numbers, dtype=np.int64)
    if numbers.ndim != 2 or numbers.shape[1] < int(count.max()):
        raise ValueError(f"encode_rows: numbers must be (events, >= {int(count.max())})")
    # the compiled pass does not check its indices: a bad one would write past the buffer
    if kind.min() < 0 or kind.max() >= k or head.min() < 0 or head.max() >= len(length) \
            or tail.min() < -1 or tail.max() >= len(length):
        raise ValueError("encode_rows: a kind, head or tail index is out of range")
    per_kind = np.bincount(kind, minlength=k)
    fixed = sum(int(per_kind[j]) * (int(length[sep[j, :count[j]]].sum()) + int(length[pre[j]])
                                     + int(length[post[j]]) + _DIGITS * int(count[j])) for j in range(k))
    bound = len(prefix) + int(length[head].sum()) + int(length[tail[tail >= 0]].sum()) + fixed + n + len(suffix)
    out = np.empty(bound, dtype=np.uint8)
    out[:len(prefix)] = np.frombuffer(prefix, dtype=np.uint8)
    end = _stitch(buf, off, sep, fmt, count, pre, post, kind, head, numbers, tail, out, len(prefix))
    out[end:end + len(suffix)] = np.frombuffer(suffix, dtype=np.uint8)
    return out[:end + len(suffix)]


def around_events(document: dict, more: bool = True) -> tuple[bytes, bytes]:
    """(prefix, suffix): `document` as JSON (its last key the "traceEvents" list, possibly empty),
    cut where more events, comma-separated, are appended to that list (`more`: some will be)."""
    events = document.get("traceEvents")
    if not isinstance(events, list) or "traceEvents" != list(document)[-1]:
        raise ValueError('around_events: the document\'s last key must be the "traceEvents" list')
    head = orjson.dumps(document, option=orjson.OPT_SERIALIZE_NUMPY)
    if not more:
        return head, b""
    return head[:-2] + (b"," if events else b""), b"]}"


_POW10 = np.array([10 ** k for k in range(19)], dtype=np.int64)


@njit(cache=True, nogil=True)
def _copy(buf, off, k, out, pos):
    if k < 0:
        return pos
    a = off[k]
    n = off[k + 1] - a
    if n > 16:
        out[pos:pos + n] = buf[a:a + n]
    else:   # most fragments are a few bytes: a plain loop beats a slice copy's set-up
        for q in range(n):
            out[pos + q] = buf[a + q]
    return pos + n


@njit(cache=True, nogil=True)
def _int(v, out, pos):
    if v < 0:
        out[pos] = 45   # '-'
        pos += 1
        v = -v
    digits = 1
    while digits < 19 and v >= _POW10[digits]:
        digits += 1
    p = pos + digits - 1
    while p >= pos:
        q = v // 10
        out[p] = 48 + (v - q * 10)
        v = q
        p -= 1
    return pos + digits


@njit(cache=True, nogil=True)
def _usec(ns, out, pos):
    if ns < 0:
        out[pos] = 45
        pos += 1
        ns = -ns
    pos = _int(ns // 1000, out, pos)
    out[pos] = 46   # '.'
    frac = ns % 1000
    if frac == 0:
        out[pos + 1] = 48
        return pos + 2
    d = 3
    while frac % 10 == 0:
        frac //= 10
        d -= 1
    for q in range(d - 1, -1, -1):
        out[pos + 1 + q] = 48 + frac % 10
        frac //= 10
    return pos + 1 + d


@njit(cache=True, nogil=True)
def _stitch(buf, off, sep, fmt, count, pre, post, kind, head, numbers, tail, out, pos):
    for i in range(len(kind)):
        if i:
            out[pos] = 44   # ','
            pos += 1
        k = kind[i]
        pos = _copy(buf, off, head[i], out, pos)
        for j in range(count[k]):
            pos = _copy(buf, off, sep[k, j], out, pos)
            if fmt[k, j] == 0:
                pos = _int(numbers[i, j], out, pos)
            else:
                pos = _usec(numbers[i, j], out, pos)
        pos = _copy(buf, off, pre[k], out, pos)
        pos = _copy(buf, off, tail[i], out, pos)
        pos = _copy(buf, off, post[k], out, pos)
    return pos


if __name__ == "__main__":   # `python -m lumos.trace.column_writer`: compile (and cache) the encoder now
    _fr = Fragments()
    _body = encode_rows(_fr, (Kind((b'{"n":',), (USEC,)),), np.zeros(1, dtype=np.int64),
                        np.array([_fr.add(b"")]), np.array([[1500]]), np.array([-1]), b"[", b"]")
    assert orjson.loads(_body.tobytes()) == [{"n": 1.5}], _body
