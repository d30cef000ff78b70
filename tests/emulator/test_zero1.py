"""The emulator's distributed-optimizer mode (`training.dp_sharding=zero1`, EMULATED), after Megatron-LM's
`megatron/core/distributed/param_and_grad_buffer.py`: every gradient bucket reduce-scattered on the DP
stream in the last micro-batch, Adam over the rank's shard, then every bucket's parameters all-gathered
before the step ends; the recogniser reads it as a sharded optimizer."""

from __future__ import annotations

import numpy as np
import pytest

from lumos.emulator import emulate, write_result
from lumos.trace import load_run, schema
from lumos.model.dp_flavour import find_dp_flavour

SETUP = ["model=gpt3_15b", "model.num_layers=4", "parallel.tp=2", "parallel.pp=1", "parallel.dp=4", "seed=0"]
DP_STREAM = 24


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = {}
    for name, extra in (("zero1", ["training.dp_sharding=zero1"]), ("buckets", [])):
        d = tmp_path_factory.mktemp(name)
        write_result(emulate(SETUP + extra, progress=False), d)
        out[name] = load_run(d)[0]
    return out


def _dp_kernels(t):
    k = np.flatnonzero((t.cat == schema.KERNEL) & (t.stream == DP_STREAM))
    return k[np.argsort(t.ts[k])]


def test_buckets_are_reduce_scattered_and_gathered_back_after_the_sharded_adam(runs):
    t, plain = runs["zero1"], runs["buckets"]
    names = [str(t.name[k]) for k in _dp_kernels(t)]
    n = sum("AllReduce" in x for x in (str(plain.name[k]) for k in _dp_kernels(plain)))
    # one reduce-scatter per bucket where the all-reduce run had one all-reduce, then as many all-gathers
    assert [x.split("_")[1] for x in names] == ["ReduceScatter"] * n + ["AllReduce"] + ["AllGather"] * n
    adam_rows = np.flatnonzero(t.name.astype(str) == "Optimizer.step#FusedAdam.step")
    plain_adam = np.flatnonzero(plain.name.astype(str) == "Optimizer.step#FusedAdam.step")
    assert t.input_dims[adam_rows[0]][0][0] * 4 == plain.input_dims[plain_adam[0]][0][0]
    gathers = [k for k in _dp_kernels(t) if "AllGather" in str(t.name[k])]
    assert min(t.ts[gathers]) > t.ts[adam_rows[0]]      # the updated shards, after the step's Adam
    f = find_dp_flavour(t)
    assert f.kind == "zero12" and f.sharded
    assert {c.phase for c in f.collectives if c.kind == "reduce_scatter"} <= {"backward", "after_backward"}
    assert {c.phase for c in f.collectives if c.kind == "all_gather"} == {"after_backward"}
    assert find_dp_flavour(plain).kind == "allreduce"
