"""Two gloo processes under torchrun: one file per rank, ranks from torch's distributedInfo."""

from __future__ import annotations

import os
import subprocess
import sys


def test_torchrun_writes_one_trace_per_rank(tmp_path, tiny_args):
    out = tmp_path / "dp"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    res = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         "-m", "lumos.capture.gpt", *tiny_args, "--device", "cpu", "--out", str(out)],
        capture_output=True, text=True, timeout=180, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == ["rank0.json.gz", "rank1.json.gz"]

    from lumos.trace.run import load_run

    tables = load_run(out)
    assert [t.rank for t in tables] == [0, 1]
    assert all(t.world_size == 2 for t in tables)
    for t in tables:
        assert t.metadata["distributedInfo"]["backend"] == "gloo"
        names = set(t.name.tolist())
        assert {"grad_bucket_0/reduce", "grad_bucket_1/reduce", "grad_bucket_rest/reduce"} <= names
        assert "c10d::allreduce_" in names

    # gloo's all-reduces are host ops: the run is DP 2 (not two pipeline stages), and a prediction,
    # which re-times device collectives only, is refused with the reason rather than made without them
    import pytest

    from lumos.predict.whatif import base_plan, structure_report

    rep = structure_report(tables)
    assert "world 2 = tp 1 x dp 2 x pp 1, but 2 ranks are present" in rep["error"]
    assert rep["data_parallel"]["kind"] == "allreduce"
    with pytest.raises(ValueError, match=r"rank0\.json\.gz: the base's collectives are host ops \(3 in the "
                                         r"iteration, e\.g\. c10d::allreduce_\) and no device collective"):
        base_plan(tables[:1])
