"""Megatron's overlapped pipeline exchange (training.overlap_p2p, lumos/emulator/pipeline_overlap.py), EMULATED.

What the switch moves: the compute stream's wait for a steady-state receive. Batched, every receive is waited
right after it is posted (then the host synchronizes); overlapped, the receive of the next forward's input is
posted after a forward and waited right before that next forward, with a backward between the two.
"""

from __future__ import annotations

import re

import pytest

from lumos.emulator import emulate
from lumos.emulator.settings import SettingsError

QUIET = ["emulator.comm.jitter_sigma=0", "emulator.compute.jitter_sigma=0", "emulator.rank.slowness_sigma=0",
         "emulator.rank.straggler_prob=0", "emulator.peers.noise_sigma=0"]
V2 = ["model=tiny", "model.num_layers=8", "parallel.tp=1", "parallel.dp=1", "model.microbatch_rule=fixed",
      "model.num_microbatches=8", "parallel.pp=4", "parallel.vp=2", *QUIET]
STEP = re.compile(r"^layer_\d+/(forward|backward)/mb\d+$")
RECV_S, COMPUTE_S = 32, 7     # rank.RECV_S (forward receives), rank.COMPUTE_S


@pytest.fixture(scope="module")
def runs():
    return (emulate(V2, progress=False), emulate([*V2, "training.overlap_p2p=true"], progress=False))


def _recv_waits(result, rank: int) -> list[str]:
    """For each compute-stream wait on a forward receive: the step annotations (F / B) the host entered
    between recording the receive's end and waiting for it."""
    rec = result.recorders[rank]
    record_ts = {corr: ts for ts, _, name, _, corr, _ in rec.rt if name == "cudaEventRecord"}
    steps = sorted((ts, "F" if STEP.match(n)[1] == "forward" else "B")
                   for ts, _, cat, n, _, _ in rec.cpu if cat == "user_annotation" and STEP.match(n))
    out = []
    for ts, _, sid, a in rec.sync:
        if a.get("cuda_sync_kind") == "Stream Wait Event" and sid == COMPUTE_S and a["wait_on_stream"] == RECV_S:
            t0 = record_ts[a["wait_on_cuda_event_record_corr_id"]]
            out.append("".join(k for t, k in steps if t0 < t < ts))
    return out


def test_the_receive_is_waited_before_the_next_forward_not_after_it_is_posted(runs):
    sync, over = runs
    # stage 1: 8 warm-up forwards, 8 steady pairs, 8 cool-down backwards; stage 2: 6, 10, 6
    # batched: each of the 16 forward receives waited right after it is posted, no step in between
    assert _recv_waits(sync, sync.ranks[1]) == [""] * 16
    # overlapped: the first receive and the 8 of warm-up as before; 7 steady ones posted after a forward and
    # waited after the backward that follows it (the last steady step receives nothing)
    assert _recv_waits(over, over.ranks[1]) == [""] * 9 + ["B"] * 7
    assert _recv_waits(over, over.ranks[2]) == [""] * 7 + ["B"] * 9


def test_no_batch_and_no_host_synchronize_on_the_pipeline_streams(runs):
    sync, over = runs
    rank = sync.ranks[1]

    def count(result, what):
        rec = result.recorders[rank]
        if what == "batch":
            return sum(n == "c10d::batch_isend_irecv" for _, _, _, n, _, _ in rec.cpu)
        return sum(a.get("cuda_sync_kind") == "Stream Sync" and sid in (28, 29, 32, 33) for _, _, sid, a in rec.sync)
    # 25 batches (the first receive, 8 warm-up, 8 steady, 8 cool-down), each synchronizing the streams it used
    assert (count(sync, "batch"), count(sync, "sync")) == (25, 64)
    assert (count(over, "batch"), count(over, "sync")) == (0, 0)
    # the same sends and receives, now each its own c10d call (Megatron's _p2p_ops)
    calls = [n for _, _, _, n, _, _ in over.recorders[rank].cpu if n in ("c10d::send", "c10d::recv_")]
    assert (calls.count("c10d::send"), calls.count("c10d::recv_")) == (32, 32)


def test_overlap_shortens_the_iteration_by_the_measured_amount(runs):
    sync, over = runs
    # tiny at 8 layers over PP 4 x V 2, no jitter: 231.6 ms batched, 196.2 ms overlapped (-15.3%), most of it
    # the host no longer held by 25 synchronizes a stage while its receives run beside the backward
    assert sync.iteration_us == pytest.approx(231626.476, abs=0.01)
    assert over.iteration_us == pytest.approx(196159.365, abs=0.01)


def test_the_switch_is_refused_without_the_interleaved_schedule():
    with pytest.raises(SettingsError, match=r"training.overlap_p2p=true needs the interleaved schedule "
                                            r"\(parallel.vp > 1\), got vp=1"):
        emulate([*V2, "parallel.vp=1", "training.overlap_p2p=true"], progress=False)
    with pytest.raises(SettingsError, match="training.overlap_p2p must be true or false"):
        emulate([*V2, "training.overlap_p2p=2"], progress=False)
