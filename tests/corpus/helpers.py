"""What the corpus tests read off a graph: edges by name or correlation id, one replay."""

from __future__ import annotations

import gzip
import json

import numpy as np

from lumos.analysis.replay import replay_graph
from lumos.graph import EdgeClass


def edges(g, cls) -> list[tuple[str, str, float]]:
    """(source name, destination name, lag) of every edge of class `cls`, sorted."""
    return sorted((str(g.name[s]), str(g.name[d]), float(lag))
                  for s, d, c, lag in zip(g.src, g.dst, g.cls, g.lag) if c == cls)


def all_edges(g) -> list[tuple[str, str, str, float]]:
    return sorted((EdgeClass(c).label, str(g.name[s]), str(g.name[d]), float(lag))
                  for s, d, c, lag in zip(g.src, g.dst, g.cls, g.lag))


def task(g, name: str) -> int:
    """The one task called `name`."""
    (i,) = np.flatnonzero(g.name == name)
    return int(i)


def replay_exact(g):
    """Replay `g` unchanged; every task must start and end where it was measured."""
    r = replay_graph(g, engine="reference", iteration="gpu")
    assert np.array_equal(r.schedule.start, g.ts) and np.array_equal(r.schedule.end, g.ts + g.dur)
    assert g.summary["violations"] == 0
    return r


def read_events(path) -> dict:
    """A shipped trace's JSON document, to cut or alter for a test."""
    with gzip.open(path) as fh:
        return json.load(fh)
