"""The merged timeline of a multi-rank run (`lumos.report.merged_timeline`), read back the way
Perfetto's JSON importer reads it: names by tid, slices that nest, flows in time order.

The run is EMULATED (`model=tiny seed=3`: two pipeline-stage ranks, 0 and 8, step 5).
"""

from __future__ import annotations

import gzip
import itertools
import json
from collections import defaultdict
from types import SimpleNamespace

import numpy as np
import pytest

from lumos.analysis.ablation import reference_for, replay_variant
from lumos.analysis.critical_path import critical_path
from lumos.cli import main
from lumos.emulator import emulate, write_result
from lumos.report.merged_timeline import (
    TIDS_PER_PROCESS,
    measured_side,
    replayed_side,
    write_merged_timeline,
)
from lumos.trace import load_run

RANKS = (0, 8)
PIDS = {1: "rank 0 measured", 2: "rank 0 replayed", 17: "rank 8 measured", 18: "rank 8 replayed"}


def read(path):
    with gzip.open(path, "rb") as fh:   # gzip, and JSON as a whole: json.load fails on a torn array
        return json.load(fh)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny_seed3")
    write_result(emulate(["model=tiny", "seed=3"], progress=False), out)
    tables = load_run(out)
    result = replay_variant(tables)
    refs = {t.rank: reference_for(t, None, r.graph) for r, t in zip(result.ranks, tables)}
    by_rank = {t.rank: t for t in tables}
    pairs = ((measured_side(r.rank, refs[r.rank].graph, refs[r.rank].path, by_rank[r.rank]),
              replayed_side(r, by_rank[r.rank])) for r in result.ranks)
    path = tmp_path_factory.mktemp("merged") / "merged.json.gz"   # not in the run: it would be read as a rank
    count = write_merged_timeline(path, pairs, source=str(out))
    return SimpleNamespace(dir=out, tables=by_rank, replays={r.rank: r for r in result.ranks}, refs=refs,
                           doc=read(path), count=count)


def tracks_of(doc, pid):
    """tid -> the X events on it, in file order."""
    out = defaultdict(list)
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and e["pid"] == pid:
            out[e["tid"]].append(e)
    return out


def task_events(doc, pid):
    """The events of a process's thread and stream tracks (the critical-path track left out), in file
    order: task i of the graph, then the step annotation."""
    return [e for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] == pid and e["tid"] % TIDS_PER_PROCESS]


def test_two_processes_per_rank_named_and_sorted(run):
    meta = [e for e in run.doc["traceEvents"] if e["ph"] == "M"]
    assert {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"} == PIDS
    assert {e["pid"]: e["args"]["sort_index"] for e in meta if e["name"] == "process_sort_index"} == {p: p for p in PIDS}
    names = {e["tid"]: e["args"]["name"] for e in meta if e["name"] == "thread_name" and e["pid"] == 2}
    assert names[20000] == "critical path"
    assert names[20001] == "thread 10000 (pid 10000)" and names[20003] == "stream 7 (GPU 0)"
    assert run.doc["lumos"] == {"timeline": "merged", "source": str(run.dir), "sides": ["measured", "replayed"]}


def test_every_event_has_what_perfetto_reads_and_tids_are_unique(run):
    events = run.doc["traceEvents"]
    assert len(events) == run.count
    assert all({"ph", "ts", "pid", "tid"} <= e.keys() for e in events)
    assert {e["ph"] for e in events} == {"M", "X", "s", "f"}
    owner = {}
    for e in events:   # Perfetto names a thread by its tid alone: one tid, one process
        assert owner.setdefault(e["tid"], e["pid"]) == e["pid"]
    named = {e["tid"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {e["tid"] for e in events if e["ph"] == "X"} <= named


def test_slices_nest_on_every_track(run):
    """Perfetto draws only perfectly nested slices on a track; a partial overlap would vanish."""
    for pid in PIDS:
        for tid, xs in tracks_of(run.doc, pid).items():
            stack = []
            for e in sorted(xs, key=lambda e: (e["ts"], -e["dur"])):
                end = e["ts"] + e["dur"]
                while stack and stack[-1] <= e["ts"] + 1e-6:
                    stack.pop()
                assert not stack or end <= stack[-1] + 1e-6, (pid, tid, e["name"], e["ts"])
                stack.append(end)


@pytest.mark.parametrize("rank", RANKS)
def test_replayed_events_are_the_graphs_tasks_at_their_replayed_times(run, rank):
    r = run.replays[rank]
    evs = task_events(run.doc, 2 * rank + 2)
    assert len(evs) == r.graph.n_tasks + 1 == {0: 791, 8: 871}[rank]
    assert evs[-1]["name"] == "ProfilerStep#5"
    tasks = evs[:-1]
    assert [e["name"] for e in tasks] == [str(n) for n in r.graph.name]
    np.testing.assert_allclose([e["ts"] for e in tasks], r.schedule.start, atol=1e-3)
    np.testing.assert_allclose([e["ts"] + e["dur"] for e in tasks], r.schedule.end, atol=2e-3)


@pytest.mark.parametrize("rank", RANKS)
def test_measured_events_are_the_traces(run, rank):
    """Each task at its trace event's ts and dur: a sync call keeps the wait the replay models apart."""
    g, t = run.refs[rank].graph, run.tables[rank]
    tasks = task_events(run.doc, 2 * rank + 1)[:-1]
    assert len(tasks) == g.n_tasks and (g.event >= 0).all()
    assert [e["name"] for e in tasks] == [str(t.name[i]) for i in g.event]
    np.testing.assert_allclose([e["ts"] for e in tasks], t.ts[g.event], atol=1e-3)
    np.testing.assert_allclose([e["dur"] for e in tasks], t.dur[g.event], atol=1e-3)
    waits = [e["dur"] for e in tasks if e["name"] == "cudaStreamSynchronize"]
    assert max(waits) > 1000.0
    assert max(g.dur[g.name == "cudaStreamSynchronize"]) < 10.0   # the replay's: the call's own cost


@pytest.mark.parametrize("rank", RANKS)
@pytest.mark.parametrize("side", ("measured", "replayed"))
def test_critical_path_is_marked_tiled_and_linked_in_order(run, rank, side):
    pid = 2 * rank + (1 if side == "measured" else 2)
    if side == "measured":
        path = run.refs[rank].path
    else:
        r = run.replays[rank]
        path = critical_path(r.graph, r.schedule.start, r.schedule.end)
    assert len(path) > 100
    tasks = task_events(run.doc, pid)
    marked = [e for e in tasks if e["args"].get("critical")]
    assert sorted(e["args"]["critical_step"] for e in marked) == list(range(len(path)))
    assert [tasks[i]["args"]["critical_step"] for i in path] == list(range(len(path)))

    track = tracks_of(run.doc, pid)[pid * TIDS_PER_PROCESS]
    assert [c["args"]["critical_step"] for c in track] == list(range(len(path)))
    for c, i in zip(track, path):   # each copy is the tail of its task, after the previous copies
        task = tasks[i]
        assert c["name"] == task["name"] and c["args"]["track_tid"] == task["tid"]
        assert task["ts"] - 1e-3 <= c["ts"] and c["ts"] + c["dur"] == pytest.approx(task["ts"] + task["dur"], abs=2e-3)
    tiles = [c for c in track if c["dur"] > 0]
    assert len(tiles) > 0.9 * len(track)
    assert all(b["ts"] >= a["ts"] + a["dur"] - 1e-3 for a, b in itertools.pairwise(tiles))

    flows = defaultdict(dict)
    for e in run.doc["traceEvents"]:
        if e["ph"] in "sf" and e["pid"] == pid:
            flows[e["id"]][e["ph"]] = e
    assert len(flows) == len(path) - 1
    for k, (fid, pair) in enumerate(sorted(flows.items())):
        s, f = pair["s"], pair["f"]
        assert f["bp"] == "e" and s["ts"] <= f["ts"]   # Perfetto reads an f before its s as a stray end
        for e, i in ((s, path[k]), (f, path[k + 1])):   # each end inside the slice it links
            task = tasks[i]
            assert e["tid"] == task["tid"] and task["ts"] <= e["ts"] <= task["ts"] + task["dur"]


def test_replay_cli_writes_the_merged_file_and_still_a_directory(run, tmp_path, capsys):
    merged = tmp_path / "merged.json.gz"
    assert main(["replay", str(run.dir), "--out", str(merged)]) == 0
    doc = read(merged)
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name"}
    assert names == PIDS
    assert len(doc["traceEvents"]) == run.count
    plain = tmp_path / "merged.json"
    assert main(["replay", str(run.dir), "--out", str(plain)]) == 0
    assert json.loads(plain.read_text())["traceEvents"] == doc["traceEvents"]
    inside = run.dir / "merged.json.gz"
    assert main(["replay", str(run.dir), "--out", str(inside)]) == 2
    assert "outside the run directory" in capsys.readouterr().err and not inside.exists()
    (tmp_path / "taken.json.gz").mkdir()
    assert main(["replay", str(run.dir), "--out", str(tmp_path / "taken.json.gz")]) == 2
    assert capsys.readouterr().err.endswith("taken.json.gz: is a directory; a .json or .json.gz --out names the file to write\n")
    per_rank = tmp_path / "ranks"
    assert main(["replay", str(run.dir), "--out", str(per_rank)]) == 0
    assert sorted(p.name for p in per_rank.iterdir()) == ["rank0.json.gz", "rank8.json.gz"]
    assert {e["pid"] for e in read(per_rank / "rank8.json.gz")["traceEvents"]} == {0, 10008}
    capsys.readouterr()
