"""`lumos replay RUN_DIR` streams the ranks (`lumos.analysis.run_stream`): the same report, to the
digit, as reading every rank first and replaying them all together (the brute force below is what
`lumos replay` did before it streamed), the same error where a run has several, the same --out
files, and one rank's trace in memory at a time."""

from __future__ import annotations

import gc
import gzip
import json
import shutil
import weakref

import numpy as np
import pytest

from lumos.analysis.ablation import (attach_metrics, reference_for, replay_dpro_tables, replay_variant,
                                     run_metrics)
from lumos.analysis.run_replay import replay_run_graph
from lumos.analysis.run_stream import RankStream
from lumos.cli import main
from lumos.commands.replay import format_table
from lumos.report.merged_timeline import measured_side, replayed_side, write_merged_timeline
from lumos.report.timeline import write_timeline
from lumos.trace import TraceError, load_run
from lumos.graph import EdgeClass
from lumos.graph.run_graph import build_run_graph, rendezvous_links
from lumos.trace.run import stream_order

from ..conftest import DLRM, ROOT

TRACES = ROOT / "resources" / "traces"
# the shipped runs of several ranks (measured on CPUs, or on H100s for DLRM)
SHIPPED = [DLRM, TRACES / "hsdp_cpu" / "hsdp_4rank_r0", TRACES / "moe_cpu" / "ep4_r0",
           TRACES / "fsdp_cpu" / "full_2rank_r0"]


@pytest.fixture(scope="module")
def tiny16(tmp_path_factory):
    """The tiny model at TP 2 x PP 2 x DP 4, all 16 ranks written (EMULATED): names rank0 .. rank15,
    so file-name order (rank0, rank1, rank10, ...) is not rank order."""
    out = tmp_path_factory.mktemp("tiny16") / "run"
    assert main(["emulate", "model=tiny", "parallel.tp=2", "parallel.pp=2", "parallel.dp=4", "ranks=all",
                 "progress=false", f"out={out}", "--quiet"]) == 0
    return out


def brute_force(path, simulator="lumos", **variant):
    """Every rank read, then every rank replayed, then scored: `lumos replay` before it streamed."""
    tables = load_run(path)
    result = replay_dpro_tables(tables) if simulator == "dpro" else replay_variant(tables, **variant)
    graphs = {r.rank: r.graph for r in result.ranks} if simulator == "lumos" else {}
    refs = {t.rank: reference_for(t, None, graphs.get(t.rank)) for t in tables}
    metrics, per_rank = run_metrics(result, refs)
    return tables, result, refs, metrics, attach_metrics(result.as_dict(), metrics, per_rank)


def replay_json(capsys, *argv) -> dict:
    assert main(["replay", *map(str, argv), "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


VARIANTS = {"full": ([], {}), "random": (["--drop-random", "0.05", "--seed", "3"], {"drop_random": 0.05, "seed": 3}),
            "dpro": (["--simulator", "dpro"], {"simulator": "dpro"})}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_streamed_replay_of_an_emulated_run_is_the_brute_force_one(tiny16, capsys, variant):
    flags, kw = VARIANTS[variant]
    *_, metrics, doc = brute_force(tiny16, **kw)
    assert replay_json(capsys, tiny16, *flags) == json.loads(json.dumps(doc))


@pytest.mark.parametrize("run", SHIPPED, ids=lambda p: p.name)
def test_streamed_replay_of_a_shipped_run_is_the_brute_force_one(capsys, run):
    *_, doc = brute_force(run)
    assert len(doc["ranks"]) > 1
    assert replay_json(capsys, run) == json.loads(json.dumps(doc))


def test_printed_table_is_the_brute_force_one_to_the_digit(tiny16, capsys):
    _, result, _, metrics, _ = brute_force(tiny16, drop_random=0.05, seed=3)
    assert main(["replay", str(tiny16), "--drop-random", "0.05", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert out == format_table(result, str(tiny16), metrics) + "\n"
    # the run line and the critical rank's iteration, as printed (EMULATED run, replay ablated)
    assert "run: critical rank 5, iteration error -26.934%, mean |rank error| 32.676%, max 64.571%" in out
    assert "  iteration                 94.050        68.719   -26.93" in out


def test_files_are_read_in_the_order_of_the_ranks_their_names_say(tiny16):
    files = sorted(tiny16.glob("rank*.json.gz"))
    assert [f.name for f in files[:3]] == ["rank0.json.gz", "rank1.json.gz", "rank10.json.gz"]
    assert [files[i].name for i in stream_order(files)][:3] == ["rank0.json.gz", "rank1.json.gz", "rank2.json.gz"]
    assert [t.rank for t, _ in RankStream(str(tiny16), [])] == list(range(16))


def test_one_rank_is_in_memory_at_a_time(tiny16, monkeypatch):
    """Each rank's table (its events) is freed, by reference counting alone, before the next is read."""
    import lumos.analysis.run_stream as rs
    alive = []
    real = rs.load_trace

    def tracked(path):
        t = real(path)
        live = [r() for r in alive if r() is not None]
        assert not [x for x in live if len(x)], f"{path} read while {[x.path for x in live if len(x)]} held"
        alive.append(weakref.ref(t))
        return t

    monkeypatch.setattr(rs, "load_trace", tracked)
    gc.disable()   # freed by reference counting: no cycle to wait for
    try:
        stream = RankStream(str(tiny16), [lambda table, _: len(table)])
        seen = []
        for item in stream:
            seen.append(item[1])
            del item   # as `lumos replay` does: the loop variable would hold the table past the next read
    finally:
        gc.enable()
    assert len(seen) == 16 and min(seen) > 0
    assert [len(t) for t in stream.shells] == [0] * 16   # what is kept of each rank: no events
    assert set(stream.shells[3].metadata) == {"distributedInfo"}


def _copy(src, dst, rename=lambda name: name, ranks=range(16)):
    dst.mkdir()
    for r in ranks:
        shutil.copy(src / f"rank{r}.json.gz", dst / rename(f"rank{r}.json.gz"))
    return dst


def _corrupt(path):
    path.write_bytes(gzip.compress(b"garbage"))


def _error_of(capsys, *argv) -> str:
    assert main(["replay", *map(str, argv)]) == 2
    return capsys.readouterr().err.strip()


def test_a_run_with_several_errors_raises_the_one_reading_it_whole_raises(tiny16, tmp_path, capsys):
    bad = _copy(tiny16, tmp_path / "bad")
    _corrupt(bad / "rank3.json.gz")
    _corrupt(bad / "rank12.json.gz")      # first in file-name order, read after rank 3
    clash = _copy(tiny16, tmp_path / "clash", ranks=range(12))
    shutil.copy(clash / "rank1.json.gz", clash / "rank_1b.json.gz")
    both = _copy(clash, tmp_path / "both", ranks=range(12))
    shutil.copy(clash / "rank_1b.json.gz", both / "rank_1b.json.gz")
    _corrupt(both / "rank9.json.gz")
    for run, says in ((bad, "rank12.json.gz: not valid JSON"), (clash, "rank1.json.gz and rank_1b.json.gz both claim rank 1"),
                      (both, "rank9.json.gz: not valid JSON")):
        with pytest.raises(TraceError) as whole:
            load_run(run)
        assert says in str(whole.value)
        assert _error_of(capsys, run) == f"lumos replay: error: {whole.value}"
    # nothing is written for a run that fails, though its first ranks replayed
    assert _error_of(capsys, clash, "--out", tmp_path / "per_rank").endswith("both claim rank 1; pass --ranks-from-files "
                                                                             "to take each file as its own rank, in file-name order")
    _error_of(capsys, clash, "--out", tmp_path / "merged.json.gz")
    assert not (tmp_path / "per_rank").exists() and not (tmp_path / "merged.json.gz").exists()


def test_a_step_missing_on_every_rank_is_the_first_ranks_error(tiny16, capsys):
    tables = load_run(tiny16)
    with pytest.raises(TraceError) as whole:
        replay_variant(tables, step=999)
    assert "rank0.json.gz" in str(whole.value)
    assert _error_of(capsys, tiny16, "--step", "999") == f"lumos replay: error: {whole.value}"


def test_out_files_are_the_brute_force_ones_when_names_do_not_say_ranks(tiny16, tmp_path, capsys):
    """Ranks 0 to 5 in files named host{7r mod 16}: read in name order, ranks out of order; the merged
    timeline is still written in rank order (a second pass), byte for byte what writing it from every
    rank does."""
    run = _copy(tiny16, tmp_path / "hosts", rename=lambda n: f"host{(7 * int(n[4:-8])) % 16}.json.gz", ranks=range(6))
    assert [t.rank for t, _ in RankStream(str(run), [])] == [0, 4, 2, 5, 3, 1]   # host0, host12, host14, ...
    tables, result, refs, _, doc = brute_force(run)
    by_rank = {t.rank: t for t in tables}
    want = tmp_path / "want.json.gz"
    write_merged_timeline(want, ((measured_side(r.rank, refs[r.rank].graph, refs[r.rank].path, by_rank[r.rank]),
                                  replayed_side(r, by_rank[r.rank])) for r in result.ranks), source=str(run))
    assert replay_json(capsys, run, "--out", tmp_path / "got.json.gz") == json.loads(json.dumps(doc))
    assert (tmp_path / "got.json.gz").read_bytes() == want.read_bytes()
    replay_json(capsys, run, "--out", tmp_path / "per_rank")
    for r in result.ranks:
        write_timeline(tmp_path / "want_rank.json.gz", r.graph, r.schedule.start, r.schedule.end, by_rank[r.rank])
        assert (tmp_path / "per_rank" / f"rank{r.rank}.json.gz").read_bytes() == \
            (tmp_path / "want_rank.json.gz").read_bytes()
    assert sorted(p.name for p in (tmp_path / "per_rank").iterdir()) == sorted(f"rank{r}.json.gz" for r in range(6))


@pytest.mark.parametrize("run", ["tiny16", "hosts", *SHIPPED], ids=lambda p: getattr(p, "name", p))
def test_streamed_joint_replay_is_the_brute_force_one(tiny16, tmp_path, capsys, run):
    """--joint keeps each rank's graph and calls as the ranks stream (JointParts), not their traces;
    the run graph joined from them replays as the one built from every trace held."""
    if run == "hosts":   # names that say no rank: the ranks stream out of order, the run graph is in rank order
        run = _copy(tiny16, tmp_path / "hosts", rename=lambda n: f"host{(7 * int(n[4:-8])) % 16}.json.gz",
                    ranks=range(8))
    elif run == "tiny16":
        run = tiny16
    want = replay_run_graph(load_run(run))
    want.pop("ranks")
    assert replay_json(capsys, run, "--joint")["joint"] == json.loads(json.dumps(want))
    assert (want["rendezvous"] > 0) == ("cpu" not in str(run))   # the CPU captures' gloo calls launch no kernel


def test_rendezvous_links_are_the_rendezvous_tasks_edges(tiny16):
    """Read from the names of the few virtual sources, the same pairs as from every edge's name."""
    g = build_run_graph(load_run(tiny16))
    e = np.flatnonzero(g.cls == EdgeClass.CROSS_RANK)
    names = g.name[g.src[e]].astype(str)
    e = e[(g.event[g.src[e]] < 0) & (names != "") & np.char.startswith(names, "rendezvous")]
    r, k = rendezvous_links(g)
    assert len(r) == len(e) == 800
    assert np.array_equal(r, g.src[e]) and np.array_equal(k, g.dst[e])
