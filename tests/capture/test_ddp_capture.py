"""`lumos capture gpt --ddp`: torch's DistributedDataParallel on CPU with gloo, one process (a one-rank
group) and two under torchrun; what the traces hold and how the predictor reads them (MEASURED ON THIS
MACHINE)."""

from __future__ import annotations

import os
import subprocess
import sys

from lumos.cli import main as lumos_main
from lumos.model.dp_flavour import find_dp_flavour, host_dp_degree
from lumos.model.dp_hooks import dp_ranges
from lumos.trace import find_steps, load_run

# the tiny model (hidden 32, FFN 128, seq 16, vocab 128): 34,176 parameters, 29 tensors; DDP's 0.1 MiB
# buckets (26,214 float32 elements) close once past the cap, in reverse parameter order: the head and
# the blocks' last tensors first (26,336 elements), then the rest (7,840)
BUCKETS = [26336, 7840]


def _step_names(t, s) -> list[str]:
    inside = (t.ts >= s.start) & (t.ts < s.end)
    return [str(n) for n in t.name[inside]]


def test_one_process_all_reduces_every_bucket_over_a_group_of_one(tmp_path, tiny_args):
    """DDP has no path of its own for a group of one: its reducer still issues one all-reduce per
    bucket, from the backward, and copies the buckets back; with two micro-batches only the last
    one (outside no_sync) reduces."""
    out = tmp_path / "ddp1"
    assert lumos_main(["capture", "gpt", *tiny_args, "--micro-batches", "2", "--device", "cpu", "--ddp",
                       "--out", str(out)]) == 0
    (t,) = load_run(out)
    assert t.metadata["lumosCapture"]["ddp_bucket_cap_mb"] == 0.1
    assert t.metadata["distributedInfo"]["world_size"] == 1
    f = find_dp_flavour(t)
    assert f.kind == "allreduce" and f.ddp
    assert [(c.elements, c.phase) for c in f.collectives] == [(b, "backward") for b in BUCKETS]
    assert f.reason.startswith("torch's DistributedDataParallel ranges (DistributedDataParallel.forward, its "
                               "reducer's copy_bucket_to_grad); 2 all-reduces of gradient buckets (7840-26336 "
                               "elements), 2 issued during the backward by the reducer's autograd hooks, run on ")
    assert host_dp_degree([t]) == 1
    for s in find_steps(t):
        names = _step_names(t, s)
        assert names.count("DistributedDataParallel.forward") == 2          # both micro-batches
        assert names.count("torch::distributed::reducer::mul_out") == 29     # the last one's 29 gradients
        assert names.count("torch.distributed.ddp.reducer::copy_bucket_to_grad") == 29
        assert names.count("c10d::allreduce_") == 2
        r = dp_ranges(t, s)
        assert r.kind == "ddp"
        # one hook range: the finalize after the last issuing op, holding both buckets
        (fin,) = r.hooks
        assert (fin.what, fin.unit, fin.parts, fin.row) == ("finalize_backward", "buckets", 2, -1)
        last = max(float(t.ts[i] + t.dur[i]) for i in range(len(t.name))
                   if s.start <= t.ts[i] < s.end and t.name[i] == "c10d::allreduce_")
        assert fin.start == last and fin.end > fin.start
        assert r.elements == {"bucket_0": 26336, "bucket_1": 7840, "buckets": 34176}
    assert "grad_bucket_0/reduce" not in set(t.name.tolist())      # not our own buckets


def test_two_ranks_under_torchrun_read_as_ddp_over_gloo(tmp_path, tiny_args):
    out = tmp_path / "ddp2"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    res = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         "-m", "lumos.capture.gpt", *tiny_args, "--device", "cpu", "--ddp", "--pin-core", "--out", str(out)],
        capture_output=True, text=True, timeout=180, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    tables = load_run(out)
    assert [t.rank for t in tables] == [0, 1] and host_dp_degree(tables) == 2
    for t in tables:
        f = find_dp_flavour(t)
        assert f.kind == "allreduce" and f.ddp and [c.elements for c in f.collectives] == BUCKETS
        # issued on the thread that runs the backward; gloo runs them on worker threads of its own
        s = find_steps(t)[-1]
        inside = (t.ts >= s.start) & (t.ts < s.end)
        issuing = {int(x) for x in t.tid[inside & (t.name == "c10d::allreduce_")]}
        workers = {int(x) for x in t.tid[inside & (t.name == "gloo:all_reduce")]}
        assert len(issuing) == 1 and workers and not workers & issuing


def test_ddp_and_fsdp_are_one_wrapper_at_a_time(tmp_path, tiny_args, capsys):
    assert lumos_main(["capture", "gpt", *tiny_args, "--device", "cpu", "--ddp", "--fsdp", "full",
                       "--out", str(tmp_path / "both")]) == 2
    assert "--ddp and --fsdp full: one data-parallel wrapper at a time" in capsys.readouterr().err
