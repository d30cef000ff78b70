"""Remove edges from a built graph: by class, or a random fraction.

Lags are fitted on the full graph before anything is removed, so what a
removed edge explained is lost rather than moved onto another edge. A task
left with no in-edge and no measured anchor is free to start at the window
start: nothing the model still knows orders it.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from .model import EdgeClass, Graph, WaitKind


def release_orphans(graph: Graph, window_start: float | None = None) -> Graph:
    """Give every task that has no in-edge and no release time the window start as release."""
    if window_start is None:
        window_start = float(graph.summary["window_us"][0])
    orphan = np.ones(graph.n_tasks, dtype=bool)
    orphan[graph.dst] = False
    orphan &= ~np.isfinite(graph.release)
    release = graph.release.copy()
    release[orphan] = window_start
    graph.release = release
    return graph


def drop_classes(graph: Graph, classes: Iterable[EdgeClass]) -> Graph:
    """A new graph without the edges of `classes` (and without run-time waits if `sync` goes)."""
    classes = {EdgeClass(c) for c in classes}
    if not classes:
        return graph
    keep = ~np.isin(graph.cls, [int(c) for c in classes])
    out = graph.with_edges(keep)
    if EdgeClass.SYNC in classes:
        out.wait_kind = np.full_like(graph.wait_kind, WaitKind.NONE)
    out.summary["edge_classes"] = sorted(c.label for c in EdgeClass if c not in classes)
    out.summary["edges"] = out.edge_counts()
    return release_orphans(out)


def random_keep_mask(n_edges: int, fraction: float, seed: int, rank: int = 0) -> np.ndarray:
    """Keep-mask dropping round(fraction * n_edges) edges, chosen reproducibly by (seed, rank)."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"drop fraction must be within [0, 1], not {fraction}")
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), int(rank)]))
    keep = np.ones(n_edges, dtype=bool)
    keep[rng.choice(n_edges, size=int(round(fraction * n_edges)), replace=False)] = False
    return keep


def drop_random(graph: Graph, fraction: float, seed: int) -> Graph:
    """A new graph without a random `fraction` of all edges (run-time waits are kept)."""
    rank = int(graph.summary.get("rank", 0) or 0)
    keep = random_keep_mask(graph.n_edges, fraction, seed, rank)
    out = graph.with_edges(keep)
    out.summary["edges"] = out.edge_counts()
    out.summary["inferred_edges"] = int(np.sum(out.inferred))
    out.summary["random_drop"] = {"fraction": fraction, "seed": int(seed), "dropped": int(np.sum(~keep))}
    return release_orphans(out)
