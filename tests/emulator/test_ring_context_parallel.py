"""Context parallelism's ring form in the emulator (training.cp_form=ring, Transformer Engine's AttnFuncWithCPAndKVP2P),
EMULATED: the steps, the exchanges and their bytes, the waits between them, and that the switch moves nothing off."""

from __future__ import annotations

import pytest

from lumos.emulator import emulate
from lumos.emulator.settings import SettingsError

QUIET = ["emulator.comm.jitter_sigma=0", "emulator.compute.jitter_sigma=0", "emulator.rank.slowness_sigma=0",
         "emulator.rank.straggler_prob=0", "emulator.peers.noise_sigma=0", "emulator.compute.comm_slowdown=0"]
BASE = ["model=llama3_8b", "model.num_layers=2", "parallel.tp=2", "parallel.pp=1", "parallel.dp=1",
        "model.microbatch_rule=fixed", "model.num_microbatches=1", "emulator.granularity=fine", *QUIET]
FLASH_FWD, FLASH_BWD = "void flash_fwd_kernel", "void flash_bwd_dq_dk_dv"


@pytest.fixture(scope="module")
def runs():
    out = {cp: emulate([*BASE, f"parallel.cp={cp}", "training.cp_form=ring"], progress=False) for cp in (2, 4)}
    out["allgather"] = emulate([*BASE, "parallel.cp=2"], progress=False)
    out["all"] = emulate([*BASE, "parallel.cp=2", "training.cp_form=ring", "ranks=all"], progress=False)
    return out


def _gpu(result, rank=None):
    rec = result.recorders[result.ranks[0] if rank is None else rank]
    return sorted(rec.gpu)


def _ops(result, name, rank=None):
    rec = result.recorders[result.ranks[0] if rank is None else rank]
    return [a for _, _, _, n, _, a in sorted(rec.cpu, key=lambda c: c[0]) if n == name]


def _cp_comms(result):
    return [a for a in _ops(result, "record_param_comms") if a["Process Group Description"] == "cp_group"]


def test_attention_runs_as_cp_steps_with_an_exchange_beside_each(runs):
    for cp in (2, 4):
        gpu = _gpu(runs[cp])
        # 2 layers x 1 micro-batch: CP flash kernels per layer and direction, on the compute stream
        assert sum(g[3].startswith(FLASH_FWD) and g[4] == 7 for g in gpu) == 2 * cp
        assert sum(g[3].startswith(FLASH_BWD) and g[4] == 7 for g in gpu) == 2 * cp
        sends = [g for g in gpu if g[4] == 44]
        recvs = [g for g in gpu if g[4] == 46]
        # forward CP - 1 exchanges, backward CP (the gradients' last hop), each a send and a receive
        assert len(sends) == len(recvs) == 2 * (cp - 1 + cp)
        assert all(g[3].startswith("ncclDevKernel_SendRecv") for g in sends + recvs)
    # no all-gather, no reduce-scatter: the ring exchanges the chunks instead
    assert {a["Collective name"] for a in _cp_comms(runs[2])} == {"send", "recv"}


def test_exchange_bytes_and_group(runs):
    kinds = [(a["Collective name"], a["In msg nelems"]) for a in _cp_comms(runs[4]) if a["Collective name"] == "send"]
    # K and V of the rank's s / CP = 2,048 tokens x 4 KV heads (8 / TP 2) x 128: 2 x 2,048 x 4 x 128 = 2,097,152;
    # forward 3 sends of it per layer (2 layers); backward the chunk, then chunk + gradients twice, then the gradients
    one = 2 * 2048 * 4 * 128
    assert [n for _, n in kinds[:10]] == [one] * 6 + [one, 2 * one, 2 * one, one]
    groups = {(a["Process Group Ranks"], a["Group size"]) for a in _cp_comms(runs[4])}
    assert groups == {("[0, 2, 4, 6]", 4)}          # the CP group: ranks TP apart
    # CP 2 batches the send and the receive (TE's batch_p2p_comm on Hopper at cp_size 2); CP 4 does not
    assert len(_ops(runs[2], "c10d::batch_isend_irecv")) == 2 * (1 + 2)
    assert not _ops(runs[4], "c10d::batch_isend_irecv")


def test_each_step_costs_one_cp_squared_of_the_whole(runs):
    """Load-balanced causal steps: each step is half of a 2c x 2c tile (c = s / 2CP), so CP steps together do what
    the all-gather form's one kernel does, each paying the kernel's fixed cost."""
    fixed = runs[2].settings.knobs.compute.gemm_fixed_us
    for kernel in (FLASH_FWD, FLASH_BWD):
        whole = [g[1] - g[0] for g in _gpu(runs["allgather"]) if g[3].startswith(kernel)][0]
        for cp in (2, 4):
            steps = [g[1] - g[0] for g in _gpu(runs[cp]) if g[3].startswith(kernel)][:cp]
            for d in steps:   # whole = (s^2 work) / 2 + fixed at CP 2; a step is (s^2 work) / CP^2 + fixed
                assert d == pytest.approx((whole - fixed) * 2 / cp ** 2 + fixed, rel=1e-9)


def test_sections_follow_the_ranks_place_in_the_ring(runs):
    """Rank 0 (first in its CP group of 2): forward the diagonal, then the upper triangle (its second chunk's
    queries on all keys); rank 2: the diagonal, then the lower triangle (all queries on the first chunk)."""
    def dims(rank, op):
        return [(a["Input Dims"][0][1], a["Input Dims"][1 if op.endswith("forward") else 2][1])
                for a in _ops(runs["all"], op, rank)][:2]
    assert dims(0, "aten::_flash_attention_forward") == [(4096, 4096), (2048, 4096)]
    assert dims(2, "aten::_flash_attention_forward") == [(4096, 4096), (4096, 2048)]
    # backward the keys come back the other way: the diagonal last
    assert dims(0, "aten::_flash_attention_backward") == [(2048, 4096), (4096, 4096)]
    assert dims(2, "aten::_flash_attention_backward") == [(4096, 2048), (4096, 4096)]


def test_step_waits_for_the_chunk_it_uses(runs):
    """Edges: step i's kernel starts after the receive of step i - 1 ends; the exchange of step i runs beside the
    kernel of step i (TE posts it before the kernel)."""
    gpu = _gpu(runs[4])
    fwd = [g for g in gpu if g[3].startswith(FLASH_FWD)][:4]
    recvs = [g for g in gpu if g[4] == 46][:3]
    sends = [g for g in gpu if g[4] == 44][:3]
    for i in range(3):
        assert fwd[i + 1][0] >= recvs[i][1]
        assert sends[i][0] < fwd[i][1] and recvs[i][0] < fwd[i][1]


def test_stage_granularity_repeats_each_exchange():
    r = emulate([*BASE, "parallel.cp=2", "training.cp_form=ring", "emulator.granularity=stage"], progress=False)
    repeats = {a.get("Repeat") for a in _cp_comms(r)}
    assert repeats == {2}       # a stage's 2 layers' rings as one
    assert sum(g[3].startswith(FLASH_FWD) for g in _gpu(r)) == 2


def test_off_the_traces_are_unchanged():
    """cp_form=ring at CP 1 is the run without context parallelism, byte for byte; allgather is the default."""
    tiny = ["model=tiny", "parallel.pp=2", "parallel.dp=2"]
    def digest(extra):
        r = emulate([*tiny, *extra], progress=False)
        return b"".join(r.encode(k).tobytes() for k in r.ranks)
    assert digest(["training.cp_form=ring"]) == digest([])
    cp2 = ["model=llama3_8b", "model.num_layers=2", "parallel.tp=2", "parallel.pp=1", "parallel.cp=2"]
    assert digest([*cp2[1:], "model=llama3_8b", "training.cp_form=allgather"]) == digest(cp2)


def test_what_is_refused():
    with pytest.raises(SettingsError, match="cp_form must be one of allgather, ring"):
        emulate([*BASE, "parallel.cp=2", "training.cp_form=ulysses"], progress=False)
    with pytest.raises(SettingsError, match="needs training.attention=flash"):
        emulate([*BASE, "parallel.cp=2", "training.cp_form=ring", "training.attention=unfused"], progress=False)
