"""The predictor's graph builder finds no timeline violation in an emulated trace (test-side only:
the emulator package itself never imports lumos.graph)."""

from __future__ import annotations

from lumos.graph.build import build_graph
from lumos.trace import load_trace


def test_zero_timeline_violations(tiny_run):
    out, result = tiny_run
    for r in result.ranks:
        g = build_graph(load_trace(out / f"rank{r}.json.gz"))
        assert g.summary["violations"] == 0, g.summary["violations_by_class"]
        assert g.summary["sync_waits"]["inferred"] == 0     # every wait is explicit (non-legacy trace)
