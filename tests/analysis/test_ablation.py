"""Ablations: each class drop removes exactly its class, random drops are reproducible,
orphaned tasks are released, and the ablation table scores every variant."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pandas as pd
import pytest

from lumos.analysis.ablation import (ablation_table, drop_random_edges, random_keep_mask, release_orphans,
                                     spread_over_seeds)
from lumos.cli import main
from lumos.graph import ALL_EDGE_CLASSES, EdgeClass, WaitKind, build_graph
from lumos.trace import load_trace

from ..baselines.test_dpro import MULTI_STREAM, NCCL, ONE_STREAM, training_step

# a trace in which the class has edges (cross_rank: a single rank has none, so nothing else may go)
TRACE_FOR = {EdgeClass.SYNC: ONE_STREAM, EdgeClass.INTER_STREAM: MULTI_STREAM}


def edge_set(g, exclude=None):
    return Counter((int(s), int(d), int(c), float(l)) for s, d, c, l in zip(g.src, g.dst, g.cls, g.lag)
                   if c != exclude)


@pytest.mark.parametrize("cls", list(EdgeClass), ids=lambda c: c.label)
def test_each_class_drop_removes_exactly_that_class(cls):
    table = load_trace(TRACE_FOR.get(cls, NCCL))
    full = build_graph(table)
    dropped = build_graph(table, edge_classes=ALL_EDGE_CLASSES - {cls})
    counts = full.edge_counts()
    if cls != EdgeClass.CROSS_RANK:
        assert counts[cls.label] > 0
    assert dropped.edge_counts() == {**counts, cls.label: 0}
    # every other edge is still there with the lag fitted on the full graph
    assert edge_set(dropped) == edge_set(full, exclude=int(cls))
    if cls == EdgeClass.SYNC:
        assert np.any(full.wait_kind != WaitKind.NONE) and np.all(dropped.wait_kind == WaitKind.NONE)
    else:
        assert np.array_equal(dropped.wait_kind, full.wait_kind)


def test_random_keep_mask_drops_the_rounded_share():
    keep = random_keep_mask(10, 0.3, seed=3)
    assert keep.sum() == 7
    assert np.array_equal(keep, random_keep_mask(10, 0.3, seed=3))
    with pytest.raises(ValueError):
        random_keep_mask(10, 1.5, seed=0)


def test_random_drop_is_reproducible_per_seed_and_differs_across_seeds():
    full = build_graph(load_trace(NCCL))
    a, b, c = (drop_random_edges(full, 0.05, s) for s in (3, 3, 4))
    assert np.array_equal(a.src, b.src) and np.array_equal(a.dst, b.dst) and np.array_equal(a.lag, b.lag)
    assert not (np.array_equal(a.src, c.src) and np.array_equal(a.dst, c.dst))
    n_drop = int(round(0.05 * full.n_edges))
    assert a.n_edges == c.n_edges == full.n_edges - n_drop
    assert a.summary["random_drop"] == {"fraction": 0.05, "seed": 3, "dropped": n_drop}
    assert sum(a.edge_counts().values()) == a.n_edges
    assert full.n_edges == sum(full.edge_counts().values())  # the full graph is untouched


def test_tasks_that_lose_every_in_edge_start_free_from_the_window_start():
    full = build_graph(training_step().table())
    gemm = int(np.flatnonzero(full.name == "gemm_fwd")[0])
    assert full.release[gemm] == -np.inf and np.sum(full.dst == gemm) == 1
    cut = release_orphans(full.with_edges(full.dst != gemm))
    assert cut.release[gemm] == 0.0                     # the ProfilerStep window starts at 0
    others = np.arange(full.n_tasks) != gemm
    assert np.array_equal(cut.release[others], full.release[others])
    assert full.release[gemm] == -np.inf                # the source graph keeps its release times


def test_ablation_table_scores_every_variant():
    df = ablation_table([training_step().table()], seeds=(0, 1), fractions=(0.1,), gap_thresholds=(10, 100))
    assert df["variant"].tolist() == (["lumos", "dpro"] + [f"drop:{c.label}" for c in EdgeClass]
                                      + ["random:0.1", "random:0.1", "gap:10", "gap:100"])
    assert (df["error"] == "").all() and (df["measured_us"] == 155.0).all()
    row = df.set_index("variant")
    assert row.loc["lumos", ["iteration_error_pct", "component_l1_us", "cp_precision", "cp_recall"]].tolist() \
        == [0.0, 0.0, 1.0, 1.0]
    assert row.loc["dpro", ["replayed_us", "iteration_error_pct", "component_l1_us", "component_l1_pct",
                            "cp_precision", "cp_recall", "cp_gpu_recall"]].tolist() \
        == [165.0, 6.4516, 20.0, 12.9032, 0.25, 0.2, 1.0]
    # launch edges gone: GPU ops run back to back from the window start
    assert row.loc["drop:launch", "replayed_us"] == 85.0
    full_edges = row.loc["lumos", "edges"]
    counts = build_graph(training_step().table()).edge_counts()
    for c in EdgeClass:
        assert row.loc[f"drop:{c.label}", "edges"] == full_edges - counts[c.label]
    assert df.loc[df["family"] == "drop_random", "edges"].tolist() == [full_edges - 1] * 2
    assert df.loc[df["family"] == "drop_random", "seed"].tolist() == [0, 1]


def test_spread_over_seeds():
    df = pd.DataFrame({"trace": "t", "family": "drop_random", "param": "0.05",
                       "iteration_error_pct": [-1.0, -3.0, np.nan], "abs_iteration_error_pct": [1.0, 3.0, np.nan],
                       "component_l1_pct": [2.0, 4.0, np.nan], "cp_precision": [1.0, 0.5, np.nan],
                       "cp_recall": [0.5, 0.5, np.nan], "error": ["", "", "replay cannot finish"]})
    s = spread_over_seeds(df).iloc[0]
    assert (s["iteration_error_pct_mean"], s["iteration_error_pct_min"], s["iteration_error_pct_max"]) \
        == (-2.0, -3.0, -1.0)
    assert s["cp_precision_mean"] == 0.75 and s["seeds"] == 3 and s["failed"] == 1


def test_cli_drop_random_is_reproducible_and_scored(tmp_path, capsys):
    path = training_step().write(tmp_path / "step.json")
    docs = []
    for _ in range(2):
        assert main(["replay", str(path), "--drop-random", "0.2", "--seed", "3", "--format", "json"]) == 0
        docs.append(json.loads(capsys.readouterr().out))
    assert docs[0] == docs[1]
    assert docs[0]["graph"]["random_drop"] == {"fraction": 0.2, "seed": 3, "dropped": 2}
    assert set(docs[0]["metrics"]) >= {"iteration_error_pct", "component_l1_us", "component_l1_pct",
                                       "cp_precision", "cp_recall"}


def test_cli_full_replay_metrics_are_perfect(tmp_path, capsys):
    path = training_step().write(tmp_path / "step.json")
    assert main(["replay", str(path), "--format", "json"]) == 0
    m = json.loads(capsys.readouterr().out)["metrics"]
    assert (m["iteration_error_pct"], m["component_l1_us"], m["cp_precision"], m["cp_recall"]) == (0.0, 0.0, 1.0, 1.0)
    assert m["cp_measured_tasks"] == 5


def test_cli_rejects_a_fraction_out_of_range(tmp_path):
    path = training_step().write(tmp_path / "step.json")
    assert main(["replay", str(path), "--drop-random", "1.0"]) == 2
