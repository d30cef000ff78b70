"""Context parallelism in the emulator (parallel.cp, Llama 3's all-gather form), EMULATED: what each switch moves."""

from __future__ import annotations

import pytest

from lumos.emulator import emulate
from lumos.emulator.settings import SettingsError

QUIET = ["emulator.comm.jitter_sigma=0", "emulator.compute.jitter_sigma=0", "emulator.rank.slowness_sigma=0",
         "emulator.rank.straggler_prob=0", "emulator.peers.noise_sigma=0"]
BASE = ["model=llama3_8b", "model.num_layers=4", "parallel.tp=2", "parallel.pp=1", "parallel.dp=2",
        "model.microbatch_rule=fixed", "model.num_microbatches=2", "emulator.granularity=fine", *QUIET]


@pytest.fixture(scope="module")
def runs():
    return {cp: emulate([*BASE, f"parallel.cp={cp}"], progress=False) for cp in (1, 2)}


def _kernels(result, stream):
    return [g for g in result.recorders[result.ranks[0]].gpu if g[4] == stream]


def _ops(result, name):
    return [a for _, _, cat, n, _, a in result.recorders[result.ranks[0]].cpu if n == name]


def test_each_rank_holds_half_of_each_sequence(runs):
    one, two = runs[1], runs[2]
    assert (one.settings.world_size, two.settings.world_size) == (4, 8)
    # the QKV projection's tokens: 8,192 x 1, halved; the flash op's queries halved, its keys the whole sequence
    dims = {r: [a["Input Dims"] for a in _ops(runs[r], "aten::_flash_attention_forward")][0] for r in (1, 2)}
    assert dims[1][0] == [1, 8192, 16, 128] and dims[1][1] == [1, 8192, 4, 128]
    assert dims[2][0] == [1, 4096, 16, 128] and dims[2][1] == [1, 8192, 4, 128]
    qkv = {r: _ops(runs[r], "aten::mm")[0]["Input Dims"] for r in (1, 2)}   # the first layer's QKV projection
    assert qkv[1][0] == [8192, 4096] and qkv[2][0] == [4096, 4096]


def test_keys_and_values_are_gathered_and_their_gradients_scattered(runs):
    two = runs[2]
    gathers = [a for a in _ops(two, "record_param_comms") if a["Process Group Description"] == "cp_group"]
    kinds = sorted({(a["Collective name"], a["Process Group Ranks"], a["Out msg nelems"]) for a in gathers})
    # K and V of the rank's 4 KV heads x 128, the whole 8,192 tokens: 2 x 8,192 x 4 x 128; ranks 0 and 2 (TP 2 apart)
    assert kinds == [("allgather", "[0, 2]", 8388608), ("reduce_scatter", "[0, 2]", 4194304)]
    # one gather per layer forward, two collectives per layer backward, 4 layers x 2 micro-batches
    names = [g[3] for g in _kernels(two, 44)]
    assert sum(n.startswith("ncclDevKernel_AllGather") for n in names) == 4 * 2 * 2
    assert sum(n.startswith("ncclDevKernel_ReduceScatter") for n in names) == 4 * 2
    assert not _kernels(runs[1], 44)
    # the gradients are all-reduced over DP x CP: 4 ranks, TP apart
    dp = {a["Process Group Ranks"] for a in _ops(two, "record_param_comms") if a["Process Group Description"] == "dp_group"}
    assert dp == {"[0, 2, 4, 6]"}


def test_attention_work_halves(runs):
    fwd = {r: [g[1] - g[0] for g in _kernels(runs[r], 7) if g[3].startswith("void flash_fwd")] for r in (1, 2)}
    assert len(fwd[1]) == len(fwd[2]) == 8
    assert 0.45 < fwd[2][0] / fwd[1][0] < 0.55


def test_what_is_refused():
    with pytest.raises(SettingsError, match="not a multiple of 6"):
        emulate([*BASE, "parallel.cp=3"], progress=False)
    with pytest.raises(SettingsError, match="needs training.attention=flash"):
        emulate([*BASE, "parallel.cp=2", "training.attention=unfused"], progress=False)
