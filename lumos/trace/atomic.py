"""Atomic file output: write to a temporary name beside the target, then rename.

A crash or an interrupted pipeline job never leaves a half-written result under
the final name. (`tempfile` is imported on the first write: with `random` it is a few ms of every
`lumos replay` that writes nothing.)
"""

from __future__ import annotations

import contextlib
import gzip
import os
from pathlib import Path


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "wb", compresslevel: int = 6):
    """Open a temporary file next to `path`; rename it over `path` on success.

    A `.gz` path is gzip-compressed at `compresslevel` (1: fastest, for bulk output)."""
    import tempfile

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; results are meant to be shared
    try:
        if path.suffix == ".gz" and "b" in mode:
            # mtime=0 keeps gzip output byte-identical across runs (determinism tests).
            raw = open(tmp, mode)
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=compresslevel) as fh:
                yield fh
            raw.close()
        else:
            with open(tmp, mode) as fh:
                yield fh
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    with atomic_open(path, "wb") as fh:
        fh.write(data)


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))
