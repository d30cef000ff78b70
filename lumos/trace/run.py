"""A multi-rank run: a directory of per-rank trace files, ordered by rank."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import TraceError
from .reader import load_trace
from .table import TraceTable

TRACE_SUFFIXES = (".json", ".json.gz")


def trace_files(directory: Path) -> list[Path]:
    files = sorted(p for p in directory.iterdir()
                   if p.is_file() and p.name.endswith(TRACE_SUFFIXES) and p.name != "manifest.json")
    return files


def load_run(path: str | os.PathLike) -> list[TraceTable]:
    """Load a file (one rank) or a directory (one file per rank; rank from distributedInfo)."""
    path = Path(path)
    if not path.exists():
        raise TraceError(path, "no such file or directory")
    if path.is_file():
        return [load_trace(path)]
    files = trace_files(path)
    if not files:
        raise TraceError(path, "directory holds no .json or .json.gz trace")
    tables = [load_trace(f) for f in files]
    ranks = [t.rank for t in tables]
    if len(set(ranks)) != len(ranks):
        # No distributedInfo: fall back to file order, but say so in the metadata.
        for i, t in enumerate(tables):
            t.metadata["rank_from_file_order"] = True
            t.rank = i
    return sorted(tables, key=lambda t: t.rank)
