"""`lumos capture gpt --fsdp`: FSDP2 on CPU with gloo, one process (a one-rank group) and two under
torchrun; the traces show the sharded structure the predictor reads (MEASURED ON THIS MACHINE)."""

from __future__ import annotations

import os
import subprocess
import sys

from lumos.cli import main as lumos_main
from lumos.trace import load_run
from lumos.model.dp_flavour import find_dp_flavour


def test_one_process_joins_a_group_of_one_and_writes_fsdp_ranges(tmp_path, tiny_args):
    out = tmp_path / "fsdp1"
    assert lumos_main(["capture", "gpt", *tiny_args, "--device", "cpu", "--fsdp", "grad_op", "--out", str(out)]) == 0
    (t,) = load_run(out)
    assert t.metadata["lumosCapture"]["fsdp"] == "grad_op"
    assert t.metadata["distributedInfo"]["world_size"] == 1
    assert t.metadata["lumosCapture"]["cpus"] == sorted(os.sched_getaffinity(0))   # not pinned: every core
    f = find_dp_flavour(t)
    assert f.kind == "fsdp" and f.units == ["root", "blocks.0", "blocks.1"]
    assert f.unit_layers == {"root": "embedding", "blocks.0": "layer_0", "blocks.1": "layer_1"}
    # the tiny model: hidden 32, FFN 128, seq 16, vocab 128 -> per block 4h + 4h^2+4h + 2hf+f+h
    assert f.unit_elements == {"root": 2 * 128 * 32 + 16 * 32 + 2 * 32, "blocks.0": 12704, "blocks.1": 12704}
    # the embedding's backward range closes on the sharded parameters' gradients, not at step end
    names = set(t.name.tolist())
    assert "embedding/backward/mb0" in names and "grad_bucket_0/reduce" not in names


def test_two_ranks_under_torchrun_all_gather_and_reduce_scatter(tmp_path, tiny_args):
    out = tmp_path / "fsdp2"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    res = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         "-m", "lumos.capture.gpt", *tiny_args, "--device", "cpu", "--fsdp", "full", "--pin-core",
         "--out", str(out)],
        capture_output=True, text=True, timeout=180, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "returned a view tensor" not in res.stderr
    tables = load_run(out)
    assert [t.rank for t in tables] == [0, 1]
    # --pin-core: each process on the LOCAL_RANK-th core it may use
    cores = sorted(os.sched_getaffinity(0))
    assert [t.metadata["lumosCapture"]["cpus"] for t in tables] == [[cores[0]], [cores[1 % len(cores)]]]
    for t in tables:
        f = find_dp_flavour(t)
        assert f.kind == "fsdp_full"
        assert f.counts() == {"all_gather": 6, "reduce_scatter": 3}
        assert {c.group for c in f.collectives} == {2}
        assert [c.kind for c in f.collectives][-3:] == ["reduce_scatter"] * 3


def test_hsdp_needs_two_shard_groups(tmp_path, tiny_args, capsys):
    assert lumos_main(["capture", "gpt", *tiny_args, "--device", "cpu", "--fsdp", "hsdp",
                       "--out", str(tmp_path / "hsdp1")]) == 2
    assert "--fsdp hsdp needs a multiple of 2 ranks, at least 4; got 1" in capsys.readouterr().err
