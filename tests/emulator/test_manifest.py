from __future__ import annotations

import orjson
import pytest

from lumos.emulator import emulate
from lumos.emulator.emulate import write_result
from lumos.emulator.settings import SettingsError


def test_manifest_content(tiny_run):
    out, result = tiny_run
    m = orjson.loads((out / "manifest.json").read_bytes())
    assert m["emulated"] is True
    assert m["seed"] == 3
    assert m["config"]["model"]["name"] == "tiny"
    assert m["config"]["parallel"] == {"tp": 2, "pp": 2, "dp": 4, "vp": 1, "first_stage_layers": None,
                                       "last_stage_layers": None, "embedding_in_split": False,
                                       "loss_in_split": False, "cp": 1, "ep": 1}
    assert m["parallel"] == {"tp": 2, "pp": 2, "dp": 4, "vp": 1, "stage_layers": [2, 2]}
    assert m["ranks"] == [0, 8]                     # tp=0, dp=0 of each stage
    assert m["stage_of_rank"] == {"0": 0, "8": 1}
    assert m["iteration_us"] > 0 and m["wall_s"] >= 0
    assert m["global_batch_size"] == m["num_microbatches"] * 4
    assert m["granularity"] == "fine"               # what emulator.granularity=auto resolved to
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "rank0.json.gz", "rank8.json.gz"]


def test_one_rank_per_stage_by_default():
    r = emulate(["model=tiny", "parallel.tp=1", "parallel.pp=4", "parallel.dp=2"], progress=False)
    assert r.ranks == [0, 2, 4, 6]
    assert r.stage_of_rank == {0: 0, 2: 1, 4: 2, 6: 3}


def test_all_ranks_on_request():
    r = emulate(["model=tiny", "parallel.tp=2", "parallel.pp=2", "parallel.dp=2", "ranks=all"], progress=False)
    assert r.ranks == list(range(8))
    # TP peers emulated in full end their collectives together
    ends = {}
    for rank in (0, 1):
        ends[rank] = sorted(e for s, e, _c, n, sid, *_ in r.recorders[rank].gpu if sid == 20)
    assert len(ends[0]) == len(ends[1])
    assert max(abs(a - b) for a, b in zip(ends[0], ends[1])) < 1e-6



def test_every_rank_emulated_writes_the_stage_ranks_with_their_real_peers(tmp_path):
    """ranks=all write_ranks=stage: the same emulation as ranks=all (rank 0's and rank 4's events and
    the iteration alike), only the stage ranks kept; an FSDP run, whose gathers wait for real peers."""
    args = ["model=tiny", "parallel.tp=2", "parallel.pp=2", "parallel.dp=2", "training.dp_sharding=fsdp",
            "seed=2", "ranks=all"]
    every = emulate(args, progress=False)
    kept = emulate(args + ["write_ranks=stage"], progress=False)
    assert kept.ranks == [0, 4] and sorted(kept.recorders) == [0, 4]
    assert kept.stage_of_rank == {0: 0, 4: 1}
    assert kept.iteration_us == every.iteration_us
    for r in (0, 4):
        assert kept.events(r) == every.events(r)
    stand_ins = emulate(args[:-1], progress=False)
    assert stand_ins.ranks == [0, 4] and stand_ins.events(0) != kept.events(0)
    write_result(kept, tmp_path)
    m = orjson.loads((tmp_path / "manifest.json").read_bytes())
    assert m["ranks"] == [0, 4] and m["config"]["write_ranks"] == "stage" and m["config"]["ranks"] == "all"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json", "rank0.json.gz", "rank4.json.gz"]
    with pytest.raises(SettingsError, match="write_ranks must be 'emulated' or 'stage', got 'some'"):
        emulate(args + ["write_ranks=some"], progress=False)


def test_metadata(tiny_docs):
    doc = tiny_docs[8]
    di = doc["distributedInfo"]
    assert di["rank"] == 8 and di["world_size"] == 16 and di["backend"] == "nccl"
    assert any(pg["ranks"] == [0, 8] for pg in di["pg_config"])
    assert doc["deviceProperties"][0]["name"] == "NVIDIA H100 80GB HBM3"
    assert doc["emulated"] is True and "traceName" in doc
