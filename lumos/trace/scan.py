"""The compiled JSON scanner for Kineto traces: bytes -> where each needed field lies.

It validates the whole document and records, for each event, the byte range
and token type of every field `lumos.trace.reader` needs, without building a
Python object per event. The reader decodes those ranges column by column and
falls back to the plain orjson path for anything the scanner flags as unusual.
The scanning itself is C (`lumos/kernels/scan.c`, `json.h`; values nested deeper
than 256 levels are left to orjson, which refuses beyond 1024); this module holds
the fields it looks for, which the C code takes from here, and the calls.

It needs no numpy (its buffers are anonymous maps, its tables bytes and arrays), and
`lumos.trace` loads its own modules on first use, so the prefetch thread imports it and
scans while the main thread is still importing numpy (`lumos.cli`); `scanned.py` then
sees the buffers as numpy arrays, without a copy.
"""

from __future__ import annotations

import mmap
from array import array
from typing import NamedTuple

from lumos import jit


# token types of a recorded value
T_ABSENT, T_NULL, T_INT, T_NUM, T_STR, T_STR_ESC, T_TRUE, T_FALSE, T_ARR, T_OBJ = range(10)

# recorded fields: the event's own, then those of its args (a field is at most one value)
EVENT_KEYS = ("cat", "name", "ts", "dur", "pid", "tid")
ARG_KEYS = ("correlation", "External id", "external id", "stream", "device", "wait_on_stream",
            "wait_on_cuda_event_record_corr_id", "In msg nelems", "Out msg nelems", "Group size", "Sequence number",
            "cuda_sync_kind", "Collective name", "dtype", "Process Group Ranks", "Input Dims",
            "Process Group Name")
F = {k: i for i, k in enumerate(EVENT_KEYS + ARG_KEYS)}
N_FIELDS, N_EVENT = len(F), len(EVENT_KEYS)
I_FIRST = F["pid"]  # pid .. Sequence number hold integers: plain ones are read by the scanner
N_INT = F["Sequence number"] - I_FIRST + 1
K_PH, K_ARGS = -2, -3  # event keys the scanner acts on itself


class Unusual(Exception):
    """Something the scanned path does not decide itself: the plain path takes over."""


class Scan(NamedTuple):
    """The C passes over a document's bytes (`scan_document`): where each field of each "ph": "X"
    event lies, its token type, plain integers read, and the span of the traceEvents array. The
    buffers are flat: loc (cap + 1, N_FIELDS, 2) int64, args_ok (cap,) bool, typ (rows, N_FIELDS)
    int8, iv (rows, N_INT) int64 (`scanned.py` shapes them)."""
    rows: int
    loc: memoryview
    args_ok: memoryview
    lo: int
    hi: int
    typ: memoryview
    iv: memoryview


def _key_table(keys: tuple[str, ...]) -> tuple[bytes, array]:
    raw = [k.encode() for k in keys]
    width = max(map(len, raw))
    return b"".join(k.ljust(width, b"\0") for k in raw), array("q", map(len, raw))


# the key tables the C scanner matches member names against (rows of a flat table, NUL-padded)
EVENT_TABLE, EVENT_LENS = _key_table(EVENT_KEYS + ("ph", "args"))
EVENT_IDS = array("q", list(range(N_EVENT)) + [K_PH, K_ARGS])
ARG_TABLE, ARG_LENS = _key_table(ARG_KEYS)
TRACE_KEY = b"traceEvents"


HUGE = 1 << 22   # bytes from which numpy asks for huge pages too


def _zeros(items: int, fmt: str) -> memoryview:
    """A writable buffer of `items` zero items of struct format `fmt` (1 or 8 bytes), mapped, not
    allocated: as with np.empty, a page costs only once it is written to. Private, and large ones
    ask for huge pages as numpy's do (mmap's default, a shared map, made the scan of 35 MB a third
    slower)."""
    size = items * (8 if fmt == "q" else 1)
    mapped = mmap.mmap(-1, max(size, 8), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)   # not shared memory
    if size >= HUGE and hasattr(mmap, "MADV_HUGEPAGE"):
        mapped.madvise(mmap.MADV_HUGEPAGE)
    return memoryview(mapped)[:size].cast(fmt)


BYTES_PER_ROW = 64   # the shipped traces hold 340 bytes or more per "ph": "X" event


def first_cap(data) -> int:
    """The rows the scanner's table starts with: the document's count of '{' (every event opens with
    one; an upper bound on its events, near twice their number in a Kineto trace), but no more than
    one per BYTES_PER_ROW bytes. A table row takes 368 bytes of address space, so a count of braces
    that lie inside strings (80 million in a 78 KB gzipped file, found by fuzzing) once asked for 29 GB; the
    table now grows with the events the scan finds (`_scan`)."""
    most = len(data) // BYTES_PER_ROW + 64
    return count_byte(data, ord("{"), most)


def _scan(buf, cap: int):
    """Validate the whole document and record where the fields of every "ph": "X" event lie,
    in a table of `cap` rows at first, doubled (and the scan gone on with) whenever it is full.

    Returns (ok, rows, loc, args_ok, events_lo, events_hi): loc[row, field] is the
    field's byte span (start -1: absent); events_lo:events_hi is the traceEvents array.
    """
    k = jit.kernels()
    cap = max(int(cap), 0)
    loc = _zeros((cap + 1) * N_FIELDS * 2, "q")  # one spare row for other events
    args_ok = _zeros(cap, "?")
    start, rows, lo = -1, 0, -1
    while True:
        ok, rows, lo, hi, at = k.scan(buf, cap, loc, args_ok, EVENT_TABLE, EVENT_LENS, EVENT_IDS, ARG_TABLE,
                                      ARG_LENS, TRACE_KEY, N_FIELDS, N_EVENT, K_PH, K_ARGS, start, rows, lo)
        if at < 0:
            return ok, rows, loc, args_ok, lo, hi
        cap, start = 2 * cap + 64, at   # full: go on from the event that found no row, in a table twice as large
        loc = _grown(loc, (cap + 1) * N_FIELDS * 2, rows * N_FIELDS * 2, "q")
        args_ok = _grown(args_ok, cap, rows, "?")


def _grown(old: memoryview, items: int, keep: int, fmt: str) -> memoryview:
    """A zero buffer of `items` items (`_zeros`) holding the first `keep` items of `old`."""
    new = _zeros(items, fmt)
    new[:keep] = old[:keep]
    old.release()
    return new


def _classify(buf, loc, rows: int):
    """Token type of every recorded value, and the value of plain integers."""
    typ = _zeros(rows * N_FIELDS, "b")
    iv = _zeros(rows * N_INT, "q")
    jit.kernels().classify(buf, loc, rows, typ, iv, I_FIRST)
    return typ, iv


def count_byte(buf, byte: int, limit: int = -1) -> int:
    """How many times `byte` occurs in `buf`, counted up to `limit` where it is >= 0 (one pass in C;
    `bytes.count` of a 4-byte pattern takes several times longer)."""
    return jit.kernels().count_byte(buf, byte, limit)


def scan_document(data: bytes) -> Scan:
    """The passes of `scanned.scanned_columns` that are C: they let go of the interpreter lock, so
    `lumos.prefetch` runs them beside the process's start-up. Raises Unusual as it does."""
    ok, rows, loc, args_ok, lo, hi = _scan(data, first_cap(data))
    if not ok:
        raise Unusual
    typ, iv = _classify(data, loc, rows)
    return Scan(rows, loc, args_ok, lo, hi, typ, iv)
