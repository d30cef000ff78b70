"""A multi-rank run: a directory of per-rank trace files, ordered by rank.

The rank and world size of each file come from its `distributedInfo`; a file
without `distributedInfo.rank` takes its rank from its name (`FILE_RANK`:
`rank3`, `rank-3`, `rank_3`, `worker3`, case-insensitive, at the start of the
name or after a non-alphanumeric character: `trace_rank3.json`,
`worker3_step_12.pt.trace.json.gz`), marked `metadata["rank_from_file_name"]`;
the world size is then the other files' (or, where none says, the highest rank
plus one). A directory whose files still do not read as the ranks of one run
(a file with neither, two files claiming one rank, world sizes that disagree, a
rank outside its world) is refused with one line naming the files and the
clash: replaying such a set as one run would silently pair unrelated timelines.
Where a file's `distributedInfo.rank` and its name disagree and the ranks do
not clash, `distributedInfo` is taken and the disagreement kept in
`metadata["rank_note"]` for the replay to print. `ranks_from_files=True` takes
each file as its own rank instead, in file-name order, and marks each table
(`metadata["rank_from_file_order"]`).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from .errors import TraceError
from .reader import MAX_RANKS, load_trace
from .table import TraceTable

TRACE_SUFFIXES = (".json", ".json.gz")
HINT = "pass --ranks-from-files to take each file as its own rank, in file-name order"
FILE_RANK = re.compile(r"(?:^|[^a-z0-9])(?:rank|worker)[-_]?(\d+)(?![0-9])", re.IGNORECASE)
NAME_FORMS = "rank3, rank-3, rank_3 or worker3"


def file_rank(name: str) -> int | None:
    """The rank a file's name says (`FILE_RANK`), None when it says none, two different ones, or one
    no world holds (MAX_RANKS or more)."""
    found = {int(m.group(1)) for m in FILE_RANK.finditer(name)}
    return found.pop() if len(found) == 1 and max(found) < MAX_RANKS else None


def trace_files(directory: Path) -> list[Path]:
    files = sorted(p for p in directory.iterdir()
                   if p.is_file() and p.name.endswith(TRACE_SUFFIXES) and p.name != "manifest.json")
    return files


def _rank_info(table: TraceTable) -> tuple[int | None, int | None]:
    """(rank, world size) as the file states them; None where it does not."""
    dist = table.metadata.get("distributedInfo")
    if not isinstance(dist, dict):
        return None, None
    rank = table.rank if dist.get("rank") is not None else None
    world = table.world_size if dist.get("world_size") is not None else None
    return rank, world


def rank_clash(tables: list[TraceTable]) -> str | None:
    """Why these files are not the ranks of one run, or None if they are."""
    names = [Path(t.path).name for t in tables]
    info = [_rank_info(t) for t in tables]
    info = [(r if r is not None else file_rank(n), w) for n, (r, w) in zip(names, info)]
    missing = [n for n, (r, _) in zip(names, info) if r is None]
    if missing:
        return (f"{', '.join(missing)} {'carries' if len(missing) == 1 else 'carry'} no rank (no distributedInfo.rank, "
                f"and {'its name says' if len(missing) == 1 else 'their names say'} none: {NAME_FORMS})")
    by_rank: dict[int, list[str]] = {}
    for n, (r, _) in zip(names, info):
        by_rank.setdefault(r, []).append(n)
    for r, files in sorted(by_rank.items()):
        if len(files) > 1:
            said = [file_rank(f) for f in files]
            named = f" (their names say ranks {', '.join(map(str, said))})" \
                if None not in said and len(set(said)) == len(said) else ""
            return (f"{' and '.join(files)} all claim rank {r}" if len(files) > 2 else
                    f"{files[0]} and {files[1]} both claim rank {r}") + named
    worlds = {w for _, w in info if w is not None}
    if len(worlds) > 1:
        said = ", ".join(f"{n} says {w}" for n, (_, w) in zip(names, info) if w is not None)
        return f"world sizes disagree ({said})"
    for n, (r, w) in zip(names, info):
        if w is not None and not 0 <= r < w:
            return f"{n} claims rank {r} of a world of size {w}"
    return None


def run_files(path: str | os.PathLike) -> list[Path]:
    """The trace files of `path`: the file itself, or a directory's .json/.json.gz files in name order."""
    path = Path(path)
    if not path.exists():
        raise TraceError(path, "no such file or directory")
    if path.is_file():
        return [path]
    files = trace_files(path)
    if not files:
        raise TraceError(path, "directory holds no .json or .json.gz trace")
    return files


def load_run(path: str | os.PathLike, ranks_from_files: bool = False) -> list[TraceTable]:
    """Load a file (one rank) or a directory (one file per rank; rank from distributedInfo).

    A directory whose files are not the ranks of one run raises TraceError,
    unless `ranks_from_files`: then file k (in name order) is rank k of len(files).
    """
    tables = [load_trace(f) for f in run_files(path)]
    return settle_ranks(path, tables, ranks_from_files)


def settle_ranks(path: str | os.PathLike, tables: list[TraceTable], ranks_from_files: bool = False) -> list[TraceTable]:
    """The tables of `path`'s files (in file-name order) as the ranks of one run, sorted by rank; a
    TraceError where a directory's files are not (`rank_clash`). Tables that are shells (their
    events dropped, `lumos.analysis.run_stream`) are settled the same way."""
    if Path(path).is_file():
        return tables
    if ranks_from_files:
        for i, t in enumerate(tables):
            t.metadata["rank_from_file_order"] = True
            t.rank, t.world_size = i, len(tables)
        return tables
    if len(tables) > 1:
        clash = rank_clash(tables)
        if clash is not None:
            raise TraceError(path, f"the files are not ranks of one run: {clash}; {HINT}")
        _ranks_from_names(tables)
    return sorted(tables, key=lambda t: t.rank)


def rank_as_loaded(table: TraceTable, index: int, n_files: int, ranks_from_files: bool = False) -> bool:
    """Give `table`, file `index` of a directory's `n_files`, the rank `settle_ranks` will give it,
    from this file alone (its distributedInfo, else its name; with `ranks_from_files` its place);
    False where no rank can be read from it (the run is then refused once every file is read)."""
    if ranks_from_files:
        table.metadata["rank_from_file_order"] = True
        table.rank, table.world_size = index, n_files
        return True
    if n_files < 2 or _rank_info(table)[0] is not None:
        return True
    said = file_rank(Path(table.path).name)
    if said is None:
        return False
    table.rank = said
    return True


def stream_order(files: list[Path], ranks_from_files: bool = False) -> list[int]:
    """The order to read `files` in so that their ranks most likely come in rank order: by the rank
    each name says (`file_rank`), names that say none after, in name order (file-name order with
    `ranks_from_files`). distributedInfo, read only with the events, can still say otherwise."""
    if ranks_from_files:
        return list(range(len(files)))
    said = [file_rank(f.name) for f in files]
    return sorted(range(len(files)), key=lambda i: (said[i] is None, said[i] or 0, i))


def _ranks_from_names(tables: list[TraceTable]) -> None:
    """Give files without distributedInfo.rank the rank their name says (rank_clash has checked it
    does); note where distributedInfo and the name disagree."""
    info = [_rank_info(t) for t in tables]
    worlds = {w for _, w in info if w is not None}
    for t, (r, _) in zip(tables, info):
        said = file_rank(Path(t.path).name)
        if r is None:
            t.rank = said
            t.metadata["rank_from_file_name"] = True
        elif said is not None and said != r:
            t.metadata["rank_note"] = (f"{Path(t.path).name}: distributedInfo says rank {r}, its name says rank "
                                       f"{said}; distributedInfo taken")
    if any(r is None for r, _ in info):
        world = worlds.pop() if worlds else max(t.rank for t in tables) + 1
        for t in tables:
            t.world_size = world


def read_manifest(path: str | Path) -> dict:
    """The `manifest.json` beside a run's traces (`lumos emulate` writes one; a capture may not): {} without."""
    p = Path(path)
    m = p / "manifest.json" if p.is_dir() else p.parent / "manifest.json"
    if m.exists():
        return json.loads(m.read_text())
    return {}
