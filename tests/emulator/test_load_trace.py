from __future__ import annotations

from lumos.trace import load_trace


def test_reader_loads_emulated_trace(tiny_run):
    out, result = tiny_run
    for r in result.ranks:
        t = load_trace(out / f"rank{r}.json.gz")
        assert t.rank == r and t.world_size == 16
