"""Ablations of the execution graph, the dPRO-style baseline, and the metrics that score them.

The paper never says which dependency class buys how much accuracy. Every
variant here replays the same iteration and is scored against the same
measured timeline:
- `iteration_error_pct`: (replayed - measured) / measured iteration, signed;
- `component_l1_us`: sum over exposed compute, overlapped, exposed comm and
  other of |replayed - measured|, and `component_l1_pct`, that sum as a share
  of the measured iteration;
- `cp_precision` / `cp_recall`: tasks on the replayed critical path against
  tasks on the measured one (definition in `critical_path.py`), plus the same
  over GPU ops only (`cp_gpu_*`), which separates "cannot see the host" from
  "picks the wrong kernels".
On a run of several ranks the run-level figures are the critical rank's (the
rank whose measured iteration is longest, as `lumos replay` reports).

Variants (`ablation_table`): full Lumos; dPRO-style; each edge class dropped
alone (through `build_graph(edge_classes=...)`: lags fitted on the full graph,
then the class removed); a random fraction of all edges dropped after the
full build (1, 5, 10% by default, 5 seeds); the inter-thread gap threshold
swept over 10 us to 3 ms (`GAP_THRESHOLDS_US`, log-spaced around the 100 us
default: below the ~10 us launch overheads every host hiccup becomes an edge,
above a few ms only the forward/backward hand-off is left).
Run-time sync waits (`WaitKind`) are not edges: a random drop leaves them,
dropping the `sync` class removes them.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Sequence

import numpy as np

from lumos.baselines.dpro import build_dpro, replay_dpro
from lumos.graph import ALL_EDGE_CLASSES, DEFAULT_GAP_THRESHOLD_US, EdgeClass, Graph, build_graph
from lumos.graph.ablate import drop_classes, drop_random, random_keep_mask, release_orphans  # noqa: F401
from lumos.sim import SimulationError
from lumos.trace import TraceTable

from .breakdown import COMPONENTS, component_l1_us
from .critical_path import compare_paths, critical_path, measured_critical_path
from .replay import RankReplay, RunReplay, measured_breakdown, replay_graph, replayed_breakdown

if TYPE_CHECKING:
    import pandas as pd

RANDOM_FRACTIONS = (0.01, 0.05, 0.10)
DEFAULT_SEEDS = (0, 1, 2, 3, 4)
GAP_THRESHOLDS_US = (10.0, 30.0, 100.0, 300.0, 1000.0, 3000.0)


def drop_random_edges(graph: Graph, fraction: float, seed: int) -> Graph:
    """`graph` with a random `fraction` of all its edges removed (reproducible per seed and rank)."""
    return drop_random(graph, fraction, seed)


# -- metrics ------------------------------------------------------------------------
@dataclass
class Reference:
    """One rank's full graph and the critical path of its measured timeline."""
    graph: Graph
    path: np.ndarray


def reference_for(table: TraceTable, step=None, graph: Graph | None = None) -> Reference:
    """The reference a variant of `table` is scored against (reuses `graph` if it is the full one)."""
    if graph is None or not _is_full(graph):
        graph = build_graph(table, step=step)
    return Reference(graph, measured_critical_path(graph))


def _is_full(graph: Graph) -> bool:
    s = graph.summary
    return (s.get("simulator", "lumos") == "lumos" and "random_drop" not in s
            and set(s.get("edge_classes", ())) == {c.label for c in ALL_EDGE_CLASSES}
            and s.get("gap_threshold_us") == DEFAULT_GAP_THRESHOLD_US)


def rank_metrics(ref: Reference, replay: RankReplay) -> dict:
    """The ablation metrics of one rank's replay against its measured timeline."""
    measured, replayed = replay.measured, replay.replayed
    l1 = component_l1_us(replayed, measured)
    path = critical_path(replay.graph, replay.schedule.start, replay.schedule.end)
    err = replay.error_pct
    out = {"iteration_error_pct": None if err is None else round(err, 4), "component_l1_us": round(l1, 3),
           "component_l1_pct": round(100.0 * l1 / measured.iteration_us, 4) if measured.iteration_us else None}
    out.update(compare_paths(ref.graph, ref.path, replay.graph, path).as_dict())
    return out


def run_metrics(run: RunReplay, refs: dict[int, Reference] | None = None) -> tuple[dict, dict[int, dict]]:
    """(run-level metrics, metrics per rank); run level = the critical rank's. Without `refs`, the
    ranks are `RankFigures` that were scored as they were replayed (their `metrics`)."""
    per_rank = {r.rank: r.metrics if refs is None else rank_metrics(refs[r.rank], r) for r in run.ranks}
    crit = run.critical.rank
    top = dict(per_rank[crit])
    if len(run.ranks) > 1:
        top["rank"] = crit
    return top, per_rank


def attach_metrics(doc: dict, run_level: dict, per_rank: dict[int, dict]) -> dict:
    """Add `metrics` to a `RunReplay.as_dict()` document (top level, and per rank when several)."""
    doc["metrics"] = run_level
    for r in doc.get("ranks", ()):
        r["metrics"] = per_rank[r["rank"]]
    return doc


# -- variants -----------------------------------------------------------------------
def replay_variant(tables: Sequence[TraceTable], step=None,
                   edge_classes: Iterable[EdgeClass] = ALL_EDGE_CLASSES,
                   gap_threshold_us: float = DEFAULT_GAP_THRESHOLD_US, drop_random: float = 0.0,
                   seed: int = 0, engine: str = "auto", iteration: str = "step") -> RunReplay:
    """Replay every rank with the given edge classes and threshold, then a random edge drop."""
    classes = frozenset(edge_classes)
    run = RunReplay()
    for table in tables:
        graph = build_graph(table, step=step, edge_classes=classes, gap_threshold_us=gap_threshold_us)
        if drop_random > 0:
            graph = drop_random_edges(graph, drop_random, seed)
        run.ranks.append(replay_graph(graph, engine=engine, iteration=iteration))
    return run


def replay_built(graphs: Sequence[Graph], edge_classes: Iterable[EdgeClass] = ALL_EDGE_CLASSES,
                 drop_random: float = 0.0, seed: int = 0, engine: str = "auto",
                 iteration: str = "step") -> tuple[RunReplay, dict[int, Reference]]:
    """`replay_variant` for graphs already built (a Chakra trace's, `lumos.graph.chakra`): their lags
    were fitted on the full graph, so dropping a class after loading is the same ablation. Returns
    the replay and the references its metrics are scored against."""
    drop = set(EdgeClass) - frozenset(edge_classes)
    run, refs = RunReplay(), {}
    for graph in graphs:
        variant = drop_classes(graph, drop) if drop else graph
        if drop_random > 0:
            variant = drop_random_edges(variant, drop_random, seed)
        replay = replay_graph(variant, engine=engine, iteration=iteration)
        run.ranks.append(replay)
        refs[replay.rank] = Reference(graph, measured_critical_path(graph))
    return run, refs


def replay_dpro_tables(tables: Sequence[TraceTable], step=None) -> RunReplay:
    """The dPRO-style baseline on every rank, in the shape `lumos replay` reports."""
    run = RunReplay()
    for table in tables:
        d = build_dpro(table, step=step)
        graph = d.to_graph()
        schedule = replay_dpro(d)
        run.ranks.append(RankReplay(rank=d.rank, graph=graph, schedule=schedule,
                                    measured=measured_breakdown(graph),
                                    replayed=replayed_breakdown(graph, schedule)))
    return run


def _variants(seeds, fractions, gap_thresholds):
    yield "lumos", "full", "", None, {}
    yield "dpro", "dpro", "", None, None
    for c in EdgeClass:
        yield f"drop:{c.label}", "drop_class", c.label, None, {"edge_classes": ALL_EDGE_CLASSES - {c}}
    for f in fractions:
        for s in seeds:
            yield f"random:{f:g}", "drop_random", f"{f:g}", int(s), {"drop_random": f, "seed": int(s)}
    for g in gap_thresholds:
        yield f"gap:{g:g}", "gap_threshold", f"{g:g}", None, {"gap_threshold_us": float(g)}


def ablation_table(tables: Sequence[TraceTable], step=None, *, engine: str = "auto",
                   seeds: Sequence[int] = DEFAULT_SEEDS, fractions: Sequence[float] = RANDOM_FRACTIONS,
                   gap_thresholds: Sequence[float] = GAP_THRESHOLDS_US, label: str | None = None,
                   iteration: str = "gpu") -> pd.DataFrame:
    """One row per variant of one trace or run: full Lumos, dPRO-style, each class dropped,
    random drops per fraction and seed, the gap-threshold sweep; metrics as in the module doc.
    The iteration is the GPU span by default, as the paper's ablation and the dPRO-style
    baseline (which has no CPU side) measure it.

    A variant whose replay cannot finish gets NaN metrics and the reason in `error`.
    """
    from tqdm import tqdm   # here, not at the top: 0.05 s of every `lumos replay`'s start-up

    import pandas as pd   # here, not at import: `lumos replay` needs none of it
    tables = list(tables)
    label = label or (tables[0].path if len(tables) == 1 else f"{tables[0].path} (+{len(tables) - 1} ranks)")
    refs = {t.rank: reference_for(t, step) for t in tables}
    full_graphs = {t.rank: refs[t.rank].graph for t in tables}
    variants = list(_variants(seeds, fractions, gap_thresholds))
    rows = []
    last_log = time.monotonic()
    for name, family, param, seed, kw in tqdm(variants, desc="ablation", unit="variant",
                                              disable=not sys.stderr.isatty()):
        t0 = time.perf_counter()
        row = {"trace": label, "variant": name, "family": family, "param": param, "seed": seed,
               "ranks": len(tables)}
        try:
            if kw is None:
                run = replay_dpro_tables(tables, step)
            elif family == "full":
                run = RunReplay([replay_graph(full_graphs[t.rank], engine=engine, iteration=iteration)
                                 for t in tables])
            elif family == "drop_random":
                run = RunReplay([replay_graph(drop_random_edges(full_graphs[t.rank], kw["drop_random"], kw["seed"]),
                                              engine=engine, iteration=iteration) for t in tables])
            else:
                run = replay_variant(tables, step, engine=engine, iteration=iteration, **kw)
            row.update(_row_figures(run, refs))
            row["error"] = ""
        except SimulationError as exc:
            row["error"] = str(exc)
        row["wall_s"] = round(time.perf_counter() - t0, 3)
        rows.append(row)
        if time.monotonic() - last_log > 5.0:
            import logging   # here: a `lumos replay` never logs, and logging costs its start-up 3 ms
            logging.getLogger(__name__).info("ablation %s: %d/%d variants", label, len(rows), len(variants))
            last_log = time.monotonic()
    out = pd.DataFrame(rows, columns=_COLUMNS)
    out["seed"] = out["seed"].astype("Int64")
    return out


_METRICS = ("iteration_error_pct", "component_l1_us", "component_l1_pct", "cp_precision", "cp_recall",
            "cp_gpu_precision", "cp_gpu_recall", "cp_predicted_tasks", "cp_measured_tasks")
_COLUMNS = (["trace", "variant", "family", "param", "seed", "ranks", "critical_rank", "measured_us", "replayed_us",
             "abs_iteration_error_pct", "mean_abs_rank_error_pct"] + list(_METRICS)
            + [f"measured_{c}" for c in COMPONENTS] + [f"replayed_{c}" for c in COMPONENTS]
            + ["edges", "error", "wall_s"])


def _row_figures(run: RunReplay, refs: dict[int, Reference]) -> dict:
    top, _ = run_metrics(run, refs)
    crit = run.critical
    row = {"critical_rank": crit.rank, "measured_us": round(crit.measured.iteration_us, 3),
           "replayed_us": round(crit.replayed.iteration_us, 3),
           "abs_iteration_error_pct": _abs(crit.error_pct),
           "mean_abs_rank_error_pct": round(float(np.nanmean([_abs(r.error_pct) for r in run.ranks])), 4),
           "edges": int(crit.graph.n_edges)}
    row.update({k: float("nan") if top[k] is None else top[k] for k in _METRICS})
    for c in COMPONENTS:
        row[f"measured_{c}"] = round(getattr(crit.measured, c), 3)
        row[f"replayed_{c}"] = round(getattr(crit.replayed, c), 3)
    return row


def _abs(x: float | None) -> float:
    return float("nan") if x is None else round(abs(x), 4)


def spread_over_seeds(table: pd.DataFrame) -> pd.DataFrame:
    """Random-drop rows summarized per trace and fraction: mean, std, min, max over the seeds
    whose replay finished, how many seeds ran and how many could not finish."""
    rnd = table[table["family"] == "drop_random"]
    cols = ["iteration_error_pct", "abs_iteration_error_pct", "component_l1_pct", "cp_precision", "cp_recall"]
    agg = rnd.groupby(["trace", "param"])[cols].agg(["mean", "std", "min", "max"])
    agg.columns = [f"{a}_{b}" for a, b in agg.columns]
    agg["seeds"] = rnd.groupby(["trace", "param"]).size()
    failed = rnd["error"].fillna("").astype(str).str.len() > 0  # "" in memory, NaN once read back from CSV
    agg["failed"] = failed.groupby([rnd["trace"], rnd["param"]]).sum()
    return agg.reset_index()


__all__ = ["release_orphans", "random_keep_mask", "drop_random_edges", "Reference", "reference_for",
           "rank_metrics", "run_metrics", "attach_metrics", "replay_variant", "replay_built", "replay_dpro_tables",
           "ablation_table", "spread_over_seeds", "RANDOM_FRACTIONS", "DEFAULT_SEEDS", "GAP_THRESHOLDS_US"]
