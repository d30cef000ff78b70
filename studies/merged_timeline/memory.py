"""Peak Python memory and time while writing the merged timeline of the first N ranks of a run.

The merged file is written rank by rank (`lumos.report.merged_timeline`); if it is, the peak while
writing stays flat as N grows. The replay of every rank is done first and is not counted: only
`write_merged_timeline` runs under tracemalloc (which slows it about threefold).

    python studies/merged_timeline/memory.py RUN 1 4 16
"""

from __future__ import annotations

import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from lumos.analysis.ablation import reference_for, replay_variant
from lumos.report.merged_timeline import (
    measured_side,
    replayed_side,
    write_merged_timeline,
)
from lumos.trace import load_run


def main(run: str, counts: list[int]) -> None:
    tables = load_run(run)
    result = replay_variant(tables)
    refs = {t.rank: reference_for(t, None, r.graph) for r, t in zip(result.ranks, tables)}
    by_rank = {t.rank: t for t in tables}
    with tempfile.TemporaryDirectory() as tmp:
        for n in counts:
            pairs = ((measured_side(r.rank, refs[r.rank].graph, refs[r.rank].path, by_rank[r.rank]),
                      replayed_side(r, by_rank[r.rank])) for r in result.ranks[:n])
            out = Path(tmp) / f"merged{n}.json.gz"
            tracemalloc.start()
            t0 = time.perf_counter()
            events = write_merged_timeline(out, pairs)
            seconds = time.perf_counter() - t0
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            print(f"{n} ranks: {events} events, {out.stat().st_size / 2**20:.1f} MiB gzipped, "
                  f"peak {peak / 2**20:.1f} MiB while writing, {seconds:.2f} s under tracemalloc")


if __name__ == "__main__":
    main(sys.argv[1], [int(n) for n in sys.argv[2:]] or [1, 4, 16])
