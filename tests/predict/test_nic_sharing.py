"""A transfer that newly crosses hosts shares its GPU's NIC (lumos.predict.nic_sharing): exact shares on
hand-made timelines, invariants on random ones, and the FSDP scale-out it was built for, against the
emulator's quiet runs (every random draw off, EMULATED)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import lumos.predict.prediction as predict_module
from lumos.predict.nic_sharing import crossing, shared_durations
from lumos.predict.options import PredictOptions
from lumos.predict.prediction import predict
from lumos.predict.whatif import base_plan, transform


def _shared(starts, durs, transfers, slowed, streams):
    return shared_durations(np.array(starts, float), np.array(durs, float), np.array(transfers, float),
                            np.array(slowed, bool), np.array(streams))


def test_two_transfers_in_flight_together_each_get_half_the_nic():
    assert _shared([0, 0], [10, 10], [10, 10], [True, True], [1, 2]).tolist() == [20, 20]
    # the second joins halfway: 5 us alone, 10 us shared (5 each), its last 5 us alone
    assert _shared([0, 5], [10, 10], [10, 10], [True, True], [1, 2]).tolist() == [15, 15]
    # apart, nothing is shared
    assert _shared([0, 20], [10, 10], [10, 10], [True, True], [1, 2]).tolist() == [10, 10]


def test_a_transfer_that_crossed_hosts_in_the_base_keeps_its_time_and_takes_its_share():
    # the first keeps 10 us; the second shares its first 5 us with it (2.5 done), then 7.5 alone
    assert _shared([0, 5], [10, 10], [10, 10], [False, True], [1, 2]).tolist() == [10, 12.5]


def test_only_the_transfer_shares_and_a_held_up_transfer_delays_the_next_on_its_stream():
    # 4 us of latency / waiting first, then 6 us of transfer: the two transfers overlap from 4 to 10
    assert _shared([0, 4], [10, 6], [6, 6], [True, True], [1, 2]).tolist() == [16, 12]
    # the third waits for the first, which sharing held up until 20, and then runs alone
    assert _shared([0, 0, 10], [10, 10, 10], [10, 10, 10], [True] * 3, [1, 2, 1]).tolist() == [20, 20, 10]


@settings(max_examples=200, deadline=None)
@given(hs.lists(hs.tuples(hs.floats(0, 100), hs.floats(0.5, 30), hs.floats(0, 1), hs.booleans(),
                          hs.integers(0, 2)), min_size=1, max_size=12))
def test_sharing_only_lengthens_the_slowed_ones_and_one_stream_shares_nothing(rows):
    start, dur, frac, slowed, stream = (np.array(c) for c in zip(*rows))
    transfer = frac * dur
    out = shared_durations(start, dur, transfer, slowed, stream)
    assert np.all(out >= dur - 1e-9)
    assert np.allclose(out[~slowed], dur[~slowed])
    alone = shared_durations(start, dur, transfer, slowed, np.zeros(len(start), dtype=int))
    assert np.allclose(alone, dur)
    # n transfers in flight at once never take longer than all of them one after the other
    assert np.all(out <= dur + transfer.sum() + 1e-6)


def test_the_gathers_and_reduce_scatters_newly_cross_hosts_and_the_pipeline_sends_do_not(quiet_fsdp):
    plan = base_plan(quiet_fsdp[4])
    assert plan.base_crossing == {("pp", "send"), ("pp", "recv")}
    out = transform(plan, dp=16)
    tasks, transfer, slowed = crossing(out)
    kinds = {(out.role[t], out.st.coll[t]): bool(s) for t, s in zip(tasks.tolist(), slowed)}
    assert kinds == {("dp", "allgather"): True, ("dp", "reduce_scatter"): True, ("dp", "allreduce"): True,
                     ("pp", "send"): False, ("pp", "recv"): False}
    # a layer's 302 MB gather over 16 ranks, 4 GPUs a host on 4 NICs
    big = tasks[(out.st.coll[tasks] == "allgather") & (out.st.nbytes[tasks] == 302094336.0)]
    assert transfer[np.searchsorted(tasks, big[0])] == pytest.approx(
        15 / 16 * 302094336.0 / (4 * out.collectives.beta_bytes_per_us["inter_host"]))


def test_fsdp_dp16_from_a_quiet_base_within_2_percent_with_the_nic_shared_and_7_percent_short_without(
        quiet_fsdp, monkeypatch):
    plan = base_plan(quiet_fsdp[4], PredictOptions(contention="off"))   # NIC sharing alone: tests/predict/test_contention.py
    shared = predict(quiet_fsdp[4], {"dp": 16}, plan=plan, actual_tables=quiet_fsdp[16])
    monkeypatch.setattr(predict_module, "nic_effect", lambda plan, graph: None)
    alone = predict(quiet_fsdp[4], {"dp": 16}, plan=plan, actual_tables=quiet_fsdp[16])
    assert alone["error_pct"] == pytest.approx(-7.0, abs=0.5)
    assert shared["error_pct"] == pytest.approx(-1.5, abs=0.5)
    assert shared["predicted"]["exposed_comm_us"] > alone["predicted"]["exposed_comm_us"] + 25_000
    assert shared["nic_sharing"]["settled"] and shared["nic_sharing"]["replays"] == 3
    assert any(n.startswith("NIC sharing: ") for n in shared["notes"])
    assert "nic_sharing" not in alone


def test_the_base_itself_shares_nothing(quiet_fsdp):
    doc = predict(quiet_fsdp[4], {}, actual_tables=quiet_fsdp[4])
    assert "nic_sharing" not in doc
    assert doc["error_pct"] == pytest.approx(0.0, abs=0.5)
