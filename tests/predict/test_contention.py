"""Compute slowed under communication, put back in the replay (lumos.predict.contention): against the
emulator's quiet FSDP runs (every random draw off, EMULATED), whose compute kernels run 12% slower
while an NCCL kernel runs (config/emulator/default.yaml, compute.comm_slowdown)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from lumos.predict.contention import replay_shares
from lumos.predict.options import PredictOptions
from lumos.predict.prediction import predict, simulate_plan
from lumos.cli import main as lumos_main
from lumos.transform.speed import compute_kernels
from lumos.predict.whatif import base_plan


def test_the_base_trace_gives_back_the_emulators_slowdown(quiet_fsdp):
    plan = base_plan(quiet_fsdp[4])
    assert plan.contention.kernels == 18
    assert plan.contention.slowdown == pytest.approx(0.12, abs=1e-4)
    off = base_plan(quiet_fsdp[4], PredictOptions(contention="off"))
    kernels = compute_kernels(plan)
    assert np.all(plan.graph.dur[kernels] <= off.graph.dur[kernels] + 1e-9)
    # 47 ms of the two stage ranks' compute was the slowdown, 12% of their 392 ms alone under communication
    assert float(np.sum(off.graph.dur - plan.graph.dur)) / 1e3 == pytest.approx(47.0, abs=0.5)


def test_the_base_replayed_gets_its_measured_time_back_and_its_kernels_their_overlap(quiet_fsdp):
    plan = base_plan(quiet_fsdp[4])
    graph, sched, bd = simulate_plan(plan)
    doc = predict(quiet_fsdp[4], {}, plan=plan, actual_tables=quiet_fsdp[4])
    assert doc["error_pct"] == pytest.approx(0.0, abs=0.01)
    assert doc["contention"]["settled"] and doc["contention"]["added_ms"] == pytest.approx(47.0, abs=0.5)
    tasks = np.flatnonzero(compute_kernels(plan))
    share = replay_shares(graph, sched.start, sched.end, tasks)
    # to the fixed point's half a microsecond: the last replay moved no duration by more
    assert np.allclose(graph.dur[tasks], plan.graph.dur[tasks] * (1 + 0.12 * share), atol=0.5, rtol=0)


def test_fsdp_dp16_reads_within_half_a_percent_with_the_slowdown_and_1_3_percent_short_without(quiet_fsdp):
    on = predict(quiet_fsdp[4], {"dp": 16}, actual_tables=quiet_fsdp[16])
    off = predict(quiet_fsdp[4], {"dp": 16}, PredictOptions(contention="off"), actual_tables=quiet_fsdp[16])
    assert on["error_pct"] == pytest.approx(0.19, abs=0.3)
    assert off["error_pct"] == pytest.approx(-1.30, abs=0.3)
    # the longer gathers and reduce-scatters at DP 16 hold more of the compute
    assert on["contention"]["added_ms"] > 85.0 and on["contention"]["replays"] == 6
    assert on["nic_sharing"]["replays"] == 6 and on["nic_sharing"]["settled"]
    assert any(n.startswith("compute under communication: the base's kernels ran 12.0% slower") for n in on["notes"])
    assert off["contention"] == {"mode": "off", "slowdown": 0.0, "kernels": 0, "ratio_p10_p50_p90": []}
    assert not any(n.startswith("compute under communication") for n in off["notes"])


def test_the_cli_flag_turns_it_off_and_the_document_says_what_was_fitted(quiet_fsdp, capsys):
    base = str(Path(quiet_fsdp[4][0].path).parent)
    docs = {}
    for mode in ("fit", "off"):
        assert lumos_main(["predict", base, "--dp", "16", "--contention", mode, "--format", "json"]) == 0
        docs[mode] = json.loads(capsys.readouterr().out)
    assert docs["fit"]["contention"]["slowdown"] == pytest.approx(0.12, abs=1e-4)
    assert docs["fit"]["contention"]["kernels"] == 18 and docs["fit"]["contention"]["settled"]
    assert docs["off"]["contention"]["mode"] == "off" and "added_ms" not in docs["off"]["contention"]
    # the slowdown put back makes the DP 16 iteration 12.3 ms longer
    longer = docs["fit"]["predicted"]["iteration_us"] - docs["off"]["predicted"]["iteration_us"]
    assert longer == pytest.approx(12_319, abs=500)
    with pytest.raises(SystemExit):
        lumos_main(["predict", base, "--dp", "16", "--contention", "always"])
    assert "invalid choice: 'always'" in capsys.readouterr().err
