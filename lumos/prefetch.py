"""A command's first trace file, read and gunzipped on a thread while the process starts up.

A `lumos replay` process spends its start-up importing numpy and its own modules, holding the
interpreter lock; reading and gunzipping the trace (zlib lets go of the lock) can run beside
that on the second core (docs/notes/2026-12-02-per-job-cost.md), and so can the first pass over
the bytes that the caller hands in as `then` (the reader's scan, whose C kernels let go of the lock
too: docs/notes/2026-12-03-startup-against-hta.md). Only
the first file of a path is prefetched, so a directory of many ranks is not held in memory twice.

`start(path, then)` begins; `take(file)` gives (bytes, what `then` made of them or None) if that
file was prefetched and has not changed since, else None. A read that fails is dropped: the
reader's own read then raises its usual error; so is a `then` that raises (the reader does
that work again and reports what is wrong). `LUMOS_NO_PREFETCH=1` turns it off (`lumos.cli`);
measured with it and without in `benchmarks/bench_pipeline.py`.
"""

from __future__ import annotations

import gzip
import os
import threading
import zlib

__all__ = ["start", "take"]

_pending: dict[str, tuple[threading.Thread, dict]] = {}


def _stamp(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_mtime_ns, st.st_size


def _first_file(path: str) -> str | None:
    if os.path.isfile(path):
        return path
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path) if n.endswith((".json", ".json.gz")))
        return os.path.join(path, names[0]) if names else None
    return None


def gunzip(data: bytes) -> bytes:
    """`gzip.decompress(data)` without its second pass over the output: zlib checks the member's
    CRC as it inflates. Anything but one gzip member (then zero padding) is left to
    `gzip.decompress`."""
    inflate = zlib.decompressobj(wbits=31)
    out = inflate.decompress(data)
    if not inflate.eof or inflate.unused_data.lstrip(b"\0"):
        return gzip.decompress(data)
    return out


def _read(path: str, out: dict, then) -> None:
    try:
        stamp = _stamp(path)
        with open(path, "rb") as fh:
            data = fh.read()
        if data[:2] == b"\x1f\x8b":
            data = gunzip(data)
    except (OSError, EOFError, zlib.error):
        return
    out["stamp"], out["data"] = stamp, data
    if then is not None:
        try:
            out["then"] = then(data)
        except Exception:   # noqa: BLE001  (the reader does it again and reports what is wrong)
            pass


def start(path: str | os.PathLike, then=None) -> None:
    """Read (and gunzip) the first trace file of `path` (a file, or a directory of ranks) on a thread,
    then run `then(data)` there (optional)."""
    first = _first_file(os.fspath(path))
    if first is None:
        return
    key = os.path.realpath(first)
    if key in _pending:
        return
    out: dict = {}
    thread = threading.Thread(target=_read, args=(key, out, then), name="lumos-prefetch", daemon=True)
    _pending[key] = (thread, out)
    thread.start()


def take(path: str | os.PathLike) -> tuple[bytes, object] | None:
    """The prefetched bytes of `path` (its decompressed JSON) and what `then` made of them (None if
    nothing), once; None if there are none."""
    if not _pending:
        return None
    got = _pending.pop(os.path.realpath(os.fspath(path)), None)
    if got is None:
        return None
    thread, out = got
    thread.join()
    try:
        same = out.get("stamp") == _stamp(os.fspath(path))
    except OSError:
        return None
    return (out["data"], out.get("then")) if same and "data" in out else None
