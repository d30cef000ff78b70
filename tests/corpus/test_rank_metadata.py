"""Multi-rank runs without (or with wrong) rank metadata.

Each test is a way a user's run reads wrong: files without `distributedInfo`, a rank that does
not match the file name, process-group metadata partial or absent. Each asserts the ranks and
groups a user needs, or the exact one-line error naming the files and what is missing.
"""

from __future__ import annotations

import pytest

from lumos.cli import main
from lumos.trace import TraceError, load_run, write_trace
from lumos.trace.collectives import pg_config
from lumos.trace.run import file_rank

STEP = {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 100, "tid": 100, "ts": 0.0,
        "dur": 100.0, "args": {}}
KERNEL = {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 5.0, "dur": 10.0,
          "args": {"stream": 7, "device": 0, "correlation": 1}}
CALL = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": 100, "ts": 1.0,
        "dur": 2.0, "args": {"correlation": 1}}


def _write(path, dist=None):
    write_trace(path, [STEP, CALL, KERNEL], {"distributedInfo": dist} if dist is not None else {})


@pytest.mark.parametrize("name,rank", [("rank3.json", 3), ("rank-3.json", 3), ("rank_3.json.gz", 3),
                                       ("trace_rank12.json", 12), ("Worker3.json", 3),
                                       ("worker0_step_12.1694128201545.pt.trace.json.gz", 0),
                                       ("myrank3.json", None), ("ranks.json", None), ("rank1_worker2.json", None)])
def test_file_rank_pattern(name, rank):
    assert file_rank(name) == rank


def test_ranks_from_file_names_when_no_distributed_info(tmp_path):
    """Files without distributedInfo named worker2 / worker10: ranks 2 and 10 (by number, not by the
    file-name order, which would put worker10 first), world 11, each marked."""
    _write(tmp_path / "worker10.json")
    _write(tmp_path / "worker2.json")
    tables = load_run(tmp_path)
    assert [(t.rank, t.world_size, t.path.rsplit("/", 1)[1]) for t in tables] == \
        [(2, 11, "worker2.json"), (10, 11, "worker10.json")]
    assert all(t.metadata["rank_from_file_name"] for t in tables)


def test_ranks_from_names_take_the_world_of_files_that_say_it(tmp_path):
    """One file has distributedInfo (rank 0 of 4), the other only its name: rank1, world 4."""
    _write(tmp_path / "rank0.json", {"rank": 0, "world_size": 4})
    _write(tmp_path / "rank1.json")
    tables = load_run(tmp_path)
    assert [(t.rank, t.world_size) for t in tables] == [(0, 4), (1, 4)]
    assert "rank_from_file_name" not in tables[0].metadata and tables[1].metadata["rank_from_file_name"]


def test_no_rank_anywhere_is_one_clear_error(tmp_path):
    _write(tmp_path / "a.json")
    _write(tmp_path / "rank1.json")
    with pytest.raises(TraceError) as err:
        load_run(tmp_path)
    assert str(err.value) == (
        f"{tmp_path}: the files are not ranks of one run: a.json carries no rank (no distributedInfo.rank, "
        "and its name says none: rank3, rank-3, rank_3 or worker3); pass --ranks-from-files to take each "
        "file as its own rank, in file-name order")


def test_distributed_info_clash_names_what_the_file_names_say(tmp_path):
    """Every file says rank 0 (a profiler set up before the process group): the error says so and
    that the names say 0 and 1."""
    _write(tmp_path / "rank0.json", {"rank": 0, "world_size": 2})
    _write(tmp_path / "rank1.json", {"rank": 0, "world_size": 2})
    with pytest.raises(TraceError) as err:
        load_run(tmp_path)
    assert str(err.value) == (
        f"{tmp_path}: the files are not ranks of one run: rank0.json and rank1.json both claim rank 0 "
        "(their names say ranks 0, 1); pass --ranks-from-files to take each file as its own rank, "
        "in file-name order")


def test_rank_disagreeing_with_name_is_noted(tmp_path, capsys):
    """distributedInfo is taken over the name, and the replay says where they disagree."""
    _write(tmp_path / "rank0.json", {"rank": 1, "world_size": 2})
    _write(tmp_path / "rank1.json", {"rank": 0, "world_size": 2})
    tables = load_run(tmp_path)
    assert [t.path.rsplit("/", 1)[1] for t in tables] == ["rank1.json", "rank0.json"]
    assert tables[1].metadata["rank_note"] == \
        "rank0.json: distributedInfo says rank 1, its name says rank 0; distributedInfo taken"
    assert main(["replay", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "note: rank0.json: distributedInfo says rank 1, its name says rank 0; distributedInfo taken" in out


def test_replay_says_ranks_came_from_names(tmp_path, capsys):
    _write(tmp_path / "rank0.json")
    _write(tmp_path / "rank1.json")
    assert main(["replay", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "ranks taken from file names (no distributedInfo.rank): rank 0 = rank0.json, rank 1 = rank1.json"


def test_pg_config_absent_or_partial():
    """pg_config names only the groups whose ranks it gives (and whose pg_size agrees with them)."""
    assert pg_config({}) == {}
    assert pg_config({"distributedInfo": {"rank": 0}}) == {}
    conf = [{"pg_name": "0", "pg_size": 4, "ranks": [0, 1, 2, 3]},
            {"pg_name": "1", "pg_size": 2, "ranks": "[0, 2]"},
            {"pg_name": "2", "pg_size": 2},                        # ranks absent
            {"pg_name": "3", "pg_size": 3, "ranks": [1, 3]},       # size and ranks disagree
            {"pg_name": "4", "ranks": []},                         # empty
            {"pg_desc": "no name", "ranks": [0, 1]}]
    assert pg_config({"distributedInfo": {"pg_config": conf}}) == {"0": (0, 1, 2, 3), "1": (0, 2)}
