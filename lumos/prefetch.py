"""A command's first trace file, read and gunzipped on a thread while the process starts up.

A `lumos replay` process spends its first second importing numpy and numba and initialising
numba's compiled-code target, all holding the interpreter lock; reading and gunzipping the
trace (zlib lets go of the lock) can run beside that on the second core (issue 16). Only the
first file of a path is prefetched, so a directory of many ranks is not held in memory twice.

`start(path)` begins; `take(file)` gives the bytes if that file was prefetched and has not
changed since, else None. A read that fails is dropped: the reader's own read then raises
its usual error. `LUMOS_NO_PREFETCH=1` turns it off (`lumos.cli`); measured with it and
without in `benchmarks/bench_pipeline.py`.
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


def _read(path: str, out: dict) -> None:
    try:
        stamp = _stamp(path)
        with open(path, "rb") as fh:
            data = fh.read()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
    except (OSError, EOFError, zlib.error):
        return
    out["stamp"], out["data"] = stamp, data


def start(path: str | os.PathLike) -> None:
    """Read (and gunzip) the first trace file of `path` (a file, or a directory of ranks) on a thread."""
    first = _first_file(os.fspath(path))
    if first is None:
        return
    key = os.path.realpath(first)
    if key in _pending:
        return
    out: dict = {}
    thread = threading.Thread(target=_read, args=(key, out), name="lumos-prefetch", daemon=True)
    _pending[key] = (thread, out)
    thread.start()


def take(path: str | os.PathLike) -> bytes | None:
    """The prefetched bytes of `path` (its decompressed JSON), once; None if there are none."""
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
    return out.get("data") if same else None
