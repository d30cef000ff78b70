"""Chakra export: what ASTRA-sim needs is in the files, and replaying the files gives our replay back.

Decoded with our own decoder (`lumos.trace.chakra`, held against a protobuf writer's bytes in
tests/trace/test_chakra_wire.py). The real 8-rank DLRM run (PARAM, V100) has all-to-alls with
sizes and all-reduces without; the EMULATED tiny 2x2x2 run, every rank written, has TP and DP
all-reduces on eight two-rank groups and pipeline send/recv between stages.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from lumos.analysis.replay import replay_graph
from lumos.cli import main as lumos_main
from lumos.emulator import emulate, write_result
from lumos.graph import EdgeClass, build_graph
from lumos.graph.chakra import (COMM_GROUPS_FILE, CTRL_CLASSES, export_run, graph_from_nodes, load_chakra_run,
                                wait_deps)
from lumos.trace import load_run
from lumos.trace.chakra import CollType, Metadata, Node, NodeType, read_et, write_et

REAL = Path(__file__).parents[2] / "resources" / "traces" / "real"
DLRM = REAL / "param" / "dlrm_8rank" / "kineto"
SMALL_REAL = [DLRM, REAL / "hta" / "sync_fixtures" / "critical_path__cuda_event_sync_multi_stream__event_sync_trace.json.gz",
              REAL / "hta" / "more" / "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz",
              REAL / "hta" / "more" / "cpu_only__rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"]
SIMULATED = {CollType.ALL_REDUCE, CollType.ALL_GATHER, CollType.REDUCE_SCATTER, CollType.ALL_TO_ALL}


@pytest.fixture(scope="module")
def tiny_all(tmp_path_factory):
    """EMULATED: tiny model, TP 2 x PP 2 x DP 2, every rank's trace written."""
    out = tmp_path_factory.mktemp("tiny_all")
    write_result(emulate(["model=tiny", "parallel.tp=2", "parallel.pp=2", "parallel.dp=2", "ranks=all", "seed=0"],
                         progress=False), out)
    return out


@pytest.fixture(scope="module", params=["dlrm", "tiny_all"])
def exported(request, tmp_path_factory):
    src = DLRM if request.param == "dlrm" else request.getfixturevalue("tiny_all")
    tables = load_run(src)
    out = tmp_path_factory.mktemp(f"et_{request.param}")
    summary = export_run(tables, out, name="run")
    graphs = {int(t.rank): build_graph(t) for t in tables}
    files = {r: read_et(out / f"run.{r}.et") for r in graphs}
    return request.param, src, out, summary, graphs, files


def test_every_task_and_edge_is_in_the_file(exported):
    _, _, _, _, graphs, files = exported
    for r, g in graphs.items():
        meta, nodes = files[r]
        assert meta.version == "0.0.4" and meta.value("lumos_rank") == r
        ids = [n.id for n in nodes]
        assert ids == list(range(g.n_tasks))                      # one node per task, ids unique
        deps = {n.id: (set(n.ctrl_deps), set(n.data_deps)) for n in nodes}
        for n in nodes:                                            # every dependency resolves in the file
            assert set(n.ctrl_deps) | set(n.data_deps) <= set(ids)
            assert not set(n.ctrl_deps) & set(n.data_deps)
        for s, d, c in zip(g.src.tolist(), g.dst.tolist(), g.cls.tolist()):
            ctrl, data = deps[d]
            assert s in (ctrl | data)
            if EdgeClass(c) not in CTRL_CLASSES:
                assert s in data
        for s, d in wait_deps(g):                                  # run-time syncs as static data deps
            assert s in deps[d][1]


def test_attributes_are_what_astra_sim_reads(exported):
    name, _, out, summary, graphs, files = exported
    groups = json.loads((out / COMM_GROUPS_FILE).read_text())
    for r, g in graphs.items():
        for n in files[r][1]:
            a = n.attr
            assert a["is_cpu_op"][0] == "bool_val"
            assert isinstance(n.duration_micros, int) and n.duration_micros >= round(g.dur[n.id]) - 1
            if n.type == NodeType.COMP_NODE:
                assert a["is_cpu_op"][1] == (g.kind[n.id] == 0)
            elif n.type == NodeType.COMM_COLL_NODE:
                assert a["is_cpu_op"][1] is False and g.comm[n.id]
                assert a["comm_type"][0] == "int64_val" and a["comm_type"][1] in SIMULATED
                assert a["comm_size"][0] == "int64_val" and a["comm_size"][1] > 0
                assert a["pg_name"][0] == "string_val" and r in groups[a["pg_name"][1]]
            else:
                assert n.type in (NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE)
                for k in ("comm_src", "comm_dst", "comm_tag"):
                    assert a[k][0] == "int32_val"
                assert a["comm_size"][0] == "int64_val"
                assert a["comm_src" if n.type == NodeType.COMM_SEND_NODE else "comm_dst"][1] == r
    if name == "dlrm":   # the all-to-alls pair up on the world; the all-reduces say no size
        assert summary.nodes == {"COMP_NODE": 11699, "COMM_COLL_NODE": 40}
        assert groups == {"1": list(range(8))} and summary.as_dict()["comm_as_compute"] == {"size": 24}
    else:
        assert summary.nodes["COMM_SEND_NODE"] == summary.nodes["COMM_RECV_NODE"] == 32
        assert sorted(map(tuple, groups.values())) == [(0, 1), (0, 2), (1, 3), (2, 3), (4, 5), (4, 6), (5, 7), (6, 7)]
        assert summary.as_dict()["comm_as_compute"] == {} and summary.missing_ranks == []


def test_peers_agree_on_what_they_issue(exported):
    """ASTRA-sim pairs a group's collectives in issue order and a send with the receive of its tag."""
    _, _, out, _, graphs, files = exported
    groups = json.loads((out / COMM_GROUPS_FILE).read_text())
    for pg, members in groups.items():
        seqs = [[(n.attr["comm_type"][1], n.attr["comm_size"][1]) for n in files[r][1]
                 if n.type == NodeType.COMM_COLL_NODE and n.attr["pg_name"][1] == pg] for r in members]
        assert seqs[0] and all(s == seqs[0] for s in seqs)
    sends, recvs = Counter(), Counter()
    for r in graphs:
        for n in files[r][1]:
            key = lambda: (n.attr["comm_src"][1], n.attr["comm_dst"][1], n.attr["comm_tag"][1], n.attr["comm_size"][1])
            if n.type == NodeType.COMM_SEND_NODE:
                sends[key()] += 1
            elif n.type == NodeType.COMM_RECV_NODE:
                recvs[key()] += 1
    assert sends == recvs and all(v == 1 for v in sends.values())


def test_replay_of_the_export_is_the_replay(exported):
    _, _, out, _, graphs, _ = exported
    for g2 in load_chakra_run(out):
        g = graphs[int(g2.summary["rank"])]
        for f in g.TASK_FIELDS + g.PROC_FIELDS:
            assert np.array_equal(getattr(g, f), getattr(g2, f)), f
        assert getattr(g2, "dur").dtype == g.dur.dtype and g2.kind.dtype == g.kind.dtype
        edges = lambda x: sorted(zip(x.dst.tolist(), x.src.tolist(), x.cls.tolist(), x.lag.tolist(), x.inferred.tolist()))
        assert edges(g) == edges(g2)
        a, b = replay_graph(g), replay_graph(g2)
        assert a.replayed.as_dict() == b.replayed.as_dict() and a.measured.as_dict() == b.measured.as_dict()
        assert np.array_equal(a.schedule.start, b.schedule.start)


def test_without_our_attributes_the_export_still_replays(exported):
    """What ASTRA-sim sees (no lumos_* attributes) has no cycle: every node can run."""
    _, _, _, _, graphs, files = exported
    for r in graphs:
        meta, nodes = files[r]
        bare = [Node(id=n.id, name=n.name, type=n.type, ctrl_deps=n.ctrl_deps, data_deps=n.data_deps,
                     duration_micros=n.duration_micros,
                     attr={k: v for k, v in n.attr.items() if not k.startswith("lumos_")}) for n in nodes]
        rep = replay_graph(graph_from_nodes(Metadata(), bare, r, "bare"))
        assert rep.replayed.iteration_us > 0 and float(rep.replayed.iteration_us).is_integer()


@pytest.mark.parametrize("path", SMALL_REAL[1:], ids=lambda p: p.name[:30])
def test_small_real_traces_round_trip_through_the_cli(path, tmp_path, capsys):
    assert lumos_main(["export", str(path), "--out", str(tmp_path / "et")]) == 0
    capsys.readouterr()
    assert lumos_main(["replay", str(path), "--format", "json"]) == 0
    kineto = json.loads(capsys.readouterr().out)
    assert lumos_main(["replay", str(tmp_path / "et"), "--format", "json"]) == 0
    chakra = json.loads(capsys.readouterr().out)
    for key in ("measured", "replayed", "metrics"):
        assert chakra[key] == kineto[key]


def test_replay_refuses_what_needs_a_kineto_trace(exported, capsys):
    out = exported[2]
    assert lumos_main(["replay", str(out), "--joint"]) == 2
    assert "is a Chakra trace" in capsys.readouterr().err


def test_replay_of_the_export_writes_its_timelines(exported, tmp_path, capsys):
    """--out on a Chakra run: one merged timeline, or a timeline per rank (a TypeError before)."""
    _, _, out, _, graphs, _ = exported
    assert lumos_main(["replay", str(out), "--out", str(tmp_path / "merged.json.gz")]) == 0
    merged = load_run(tmp_path / "merged.json.gz")[0]
    assert set(merged.pid.tolist()) == {2 * r + k for r in graphs for k in (1, 2)}   # measured and replayed
    assert lumos_main(["replay", str(out), "--out", str(tmp_path / "per_rank")]) == 0
    assert sorted(p.name for p in (tmp_path / "per_rank").iterdir()) == sorted(f"rank{r}.json.gz" for r in graphs)
    capsys.readouterr()


def _foreign(path: Path, rank: int) -> None:
    """A Chakra trace as another tool writes it (no lumos_* attributes), two ranks alike:

        cpu  |E 0-4|
        gpu  .......|A 4-14|C 14-21|D 21-24|     C needs A; D needs B and C
        comm .......       |B 14-19|             B (all-reduce) needs A
    """
    def comp(i, name, us, deps, cpu=False):
        return Node(id=i, name=name, type=NodeType.COMP_NODE, data_deps=deps, duration_micros=us,
                    attr={"is_cpu_op": ("bool_val", cpu)})
    nodes = [comp(10, "E", 4, [], cpu=True), comp(11, "A", 10, [10]),
             Node(id=12, name="B", type=NodeType.COMM_COLL_NODE, data_deps=[11], duration_micros=5,
                  attr={"is_cpu_op": ("bool_val", False), "comm_type": ("int64_val", 0),
                        "comm_size": ("int64_val", 1 << 20)}),
             comp(13, "C", 7, [11]), comp(14, "D", 3, [12], )]
    nodes[-1].ctrl_deps = [13]
    write_et(path / f"foreign.{rank}.et", Metadata(version="0.0.4"), nodes)


def test_a_foreign_trace_replays_to_its_hand_computed_timeline(tmp_path, capsys):
    for r in (0, 1):
        _foreign(tmp_path, r)
    assert lumos_main(["replay", str(tmp_path), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    # GPU span 4..24 = 20 us: compute alone 4-14 and 19-24 (15), with the all-reduce 14-19 (5)
    want = {"iteration_us": 20.0, "exposed_compute_us": 15.0, "overlapped_us": 5.0, "exposed_comm_us": 0.0,
            "other_us": 0.0, "gpu_span_us": 20.0}
    assert [r["replayed"] for r in doc["ranks"]] == [want, want]
    g = load_chakra_run(tmp_path / "foreign.1.et")[0]
    assert g.summary["rank"] == 1 and list(g.proc_name) == ["chakra cpu (rank 1)", "chakra compute (rank 1)",
                                                            "chakra communication (rank 1)"]


def test_a_foreign_trace_with_a_missing_dependency_is_refused(tmp_path, capsys):
    write_et(tmp_path / "f.0.et", Metadata(), [Node(id=1, name="k", type=NodeType.COMP_NODE, data_deps=[7],
                                                   duration_micros=3)])
    assert lumos_main(["replay", str(tmp_path)]) == 2
    assert "node 1 ('k') depends on node 7, which the file does not hold" in capsys.readouterr().err


def test_bare_export_holds_only_what_astra_sim_reads(tmp_path):
    tables = load_run(SMALL_REAL[1])
    export_run(tables, tmp_path, bare=True)
    meta, nodes = read_et(tmp_path / "trace.0.et")
    assert meta.attr == {} and not any(k.startswith("lumos_") for n in nodes for k in n.attr)
    g = load_chakra_run(tmp_path)[0]
    assert "without Lumos attributes" in g.summary["notes"][0] and g.n_tasks == len(nodes) == 45
