"""The emulator's interleaved 1F1B (parallel.vp) and uneven stages (parallel.first/last_stage_layers), EMULATED.

The emulator follows Megatron-LM's loop (rank.RankProgram._interleaved); the predictor has its own action list
(lumos.transform.schedule.interleaved). They are written apart, so the emulated order of forward and backward
steps checked against the predictor's list is two readings of Megatron agreeing, not one reading with itself.
"""

from __future__ import annotations

import re

import pytest

from lumos.emulator import emulate
from lumos.emulator.settings import SettingsError, pipeline_split
from lumos.transform.schedule import interleaved, stage_chunks

QUIET = ["emulator.comm.jitter_sigma=0", "emulator.compute.jitter_sigma=0", "emulator.rank.slowness_sigma=0",
         "emulator.rank.straggler_prob=0", "emulator.peers.noise_sigma=0"]
EIGHT = ["model=tiny", "model.num_layers=8", "parallel.tp=1", "parallel.dp=1", "model.microbatch_rule=fixed",
         "model.num_microbatches=8", *QUIET]
STEP = re.compile(r"^layer_(\d+)/(forward|backward)/mb(\d+)$")


@pytest.fixture(scope="module")
def v2():
    """tiny at 8 layers, PP 4 with two chunks per stage, 8 micro-batches."""
    return emulate([*EIGHT, "parallel.pp=4", "parallel.vp=2"], progress=False)


def _steps(result, rank: int, split, stage: int, chunks: int) -> list[tuple]:
    """(F|B, micro-batch, chunk) of each step the rank ran, in order, from its layer annotations."""
    chunk_of = {l: c for c, layers in enumerate(stage_chunks(stage, split, chunks)) for l in layers}
    out = []
    for ts, _, cat, name, _, _ in sorted(result.recorders[rank].cpu, key=lambda e: e[0]):
        m = STEP.match(name) if cat == "user_annotation" else None
        if m is None:
            continue
        step = ("F" if m[2] == "forward" else "B", int(m[3]), chunk_of[int(m[1])])
        if not out or out[-1] != step:       # a chunk of two layers is one step
            out.append(step)
    return out


def test_each_stage_runs_the_predictors_interleaved_order(v2):
    assert v2.settings.stage_layers == (2, 2, 2, 2)
    for stage, rank in enumerate(v2.ranks):
        want = [a for a in interleaved(stage, 4, 2, 8) if a[0] != "p2p"]
        assert _steps(v2, rank, (2, 2, 2, 2), stage, 2) == want
    # stage 0 holds layers 0 and 4 (virtual stages 0 and 4); stage 3 layers 3 and 7
    first = {int(STEP.match(n)[1]) for *_, c, n, _, _ in v2.recorders[v2.ranks[0]].cpu if STEP.match(n)}
    last = {int(STEP.match(n)[1]) for *_, c, n, _, _ in v2.recorders[v2.ranks[3]].cpu if STEP.match(n)}
    assert (first, last) == ({0, 4}, {3, 7})


def test_the_ring_wraps_and_the_backward_direction_has_its_own_streams(v2):
    last = v2.recorders[v2.ranks[3]]
    sends = [a for _, _, cat, name, _, a in last.cpu if name == "record_param_comms" and a["Collective name"] == "send"]
    # the last stage feeds the first stage's second chunk: a send over the channel of ranks 0 and 3
    assert {a["Process Group Ranks"] for a in sends} == {"[0, 3]", "[2, 3]"}
    streams = {g[4] for g in v2.recorders[v2.ranks[1]].gpu if g[3].startswith("ncclDevKernel_SendRecv")
               or "Send" in g[3] or "Recv" in g[3]}
    assert {29, 33} <= streams and {28, 32} <= streams
    # every rank lists the wrap channel beside its neighbours' (PyTorch's pg_config)
    wrap = [g for g in v2.topo.pg_config(v2.ranks[0]) if g["ranks"] == [0, 3]]
    assert len(wrap) == 1 and wrap[0]["pg_desc"] == "pp_group"


def test_interleaving_shrinks_the_bubble_of_a_compute_bound_pipeline():
    """GPT-3 15B at TP 2 x PP 4 (8 micro-batches): two chunks per stage run the pipeline's fill and drain
    in half-stage steps. The iteration must shrink, and by less than the ideal bubble saving
    (p - 1)(1 - 1/V) / (m + p - 1) of 1F1B's time: 3/22 = 13.6%."""
    over = ["model=gpt3_15b", "parallel.tp=2", "parallel.pp=4", "parallel.dp=1", *QUIET]
    one = emulate(over, progress=False).iteration_us
    two = emulate([*over, "parallel.vp=2"], progress=False).iteration_us
    assert 0.0 < (one - two) / one < 3 / 22


def test_uneven_first_and_last_stages_hold_their_layers():
    r = emulate(["model=tiny", "model.num_layers=6", "parallel.tp=1", "parallel.pp=3", "parallel.dp=1",
                 "parallel.first_stage_layers=1", "parallel.last_stage_layers=1", *QUIET], progress=False)
    assert r.settings.stage_layers == (1, 4, 1)
    held = [sorted({int(STEP.match(n)[1]) for *_, n, _, _ in r.recorders[rank].cpu if STEP.match(n)})
            for rank in r.ranks]
    assert held == [[0], [1, 2, 3, 4], [5]]


def test_the_split_is_megatrons():
    assert pipeline_split(126, 16, 1, 7, 7) == (7,) + (8,) * 14 + (7,)
    assert pipeline_split(8, 4, 2) == (2, 2, 2, 2)
    assert pipeline_split(10, 3, 1, None, 2) == (4, 4, 2)
    with pytest.raises(SettingsError, match="the 9 left must be a positive multiple of the 2 other stages"):
        pipeline_split(11, 4, 1, 1, 1)
    with pytest.raises(SettingsError, match="pp must divide num_layers"):
        pipeline_split(10, 4)
    with pytest.raises(SettingsError, match="stage 0 holds 7"):
        pipeline_split(126, 16, 2, 7, 7)
    with pytest.raises(SettingsError, match="needs pp > 2"):
        pipeline_split(8, 2, 2)


def test_zero_chunks_or_cp_ranks_are_refused_not_read_as_one():
    with pytest.raises(SettingsError, match="parallel.vp must be >= 1"):
        emulate([*EIGHT, "parallel.pp=4", "parallel.vp=0"], progress=False)
    with pytest.raises(SettingsError, match="parallel.cp must be >= 1"):
        emulate([*EIGHT, "parallel.pp=4", "parallel.cp=0"], progress=False)


def test_megatrons_refusals_are_the_emulators():
    with pytest.raises(SettingsError, match="8 micro-batches per iteration is not a multiple of 3"):
        emulate(["model=tiny", "model.num_layers=6", "parallel.tp=1", "parallel.pp=3", "parallel.dp=1",
                 "parallel.vp=2", "model.microbatch_rule=fixed", "model.num_microbatches=8"], progress=False)
    with pytest.raises(SettingsError, match="not emulated"):
        emulate([*EIGHT, "parallel.pp=4", "parallel.vp=2", "training.dp_sharding=fsdp"], progress=False)
