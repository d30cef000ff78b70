"""Transfer: one step's graph with another step's durations, on real traces (exact values).

The predicted values below were computed once with `lumos replay --durations-from`, checked
against the measured steps (errors of a fraction of a percent to a few percent, the matched
tasks counted by hand from the `matched` field) and hard-coded: a change in the graph or the
matching that moves them must be seen.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lumos.analysis.transfer import (NotSameJobError, TaskKeys, diff_attribution, match_tasks, transfer_pair,
                                     transfer_steps)
from lumos.graph import build_graph
from lumos.graph.model import EdgeClass, TaskKind
from lumos.report.tables import transfer_real_table
from lumos.trace import load_trace

from ..conftest import REAL, ROOT

H200 = ROOT / "resources" / "traces" / "h200" / "base_r0" / "rank0.json.gz"        # steps 2, 3, 4
H200_R1 = ROOT / "resources" / "traces" / "h200" / "base_r1" / "rank0.json.gz"     # the same job, run again
NCCL = REAL / "hta" / "nccl_parser_config__nccl_data.json.gz"                        # steps 4, 5, 6
TRACE_DIFF = REAL / "hta" / "trace_diff__control__control.json.gz"                   # steps 1009-1014


@pytest.fixture(scope="module")
def h200():
    return load_trace(H200)


@pytest.fixture(scope="module")
def nccl():
    return load_trace(NCCL)


def keys(kind, proc, name, carry=None):
    n = len(name)
    return TaskKeys(kind=np.array(kind, np.int8), proc_key=np.array(proc, np.int64),
                    carry=np.zeros(n, bool) if carry is None else np.array(carry, bool),
                    name=np.array(name, dtype=object), ts=np.arange(n, dtype=float), event=np.arange(n))


def test_match_aligns_each_processor_like_a_diff():
    # Thread 7 of the target is thread 7 of the source. The target ran one "x" the source did
    # not (after "a"): it finds no partner and shifts nothing after it (pairing the n-th "x"
    # with the n-th "x" would give the target's "x" after "b" the source's "x" after "c").
    # "relu" has no partner on the source's thread.
    t = keys([0] * 7, [7] * 7, ["a", "x", "b", "x", "c", "x", "relu"])
    s = keys([0] * 5, [7] * 5, ["a", "b", "x", "c", "x"])
    assert match_tasks(t, s).tolist() == [0, -1, 1, 2, 3, 4, -1]


def test_ops_that_changed_places_still_pair_by_name():
    # Inside a stretch where the two steps differ, and for an op that moved past others, the
    # n-th "mm" left over takes the n-th "mm" left over.
    t = keys([0, 0, 0, 0], [7, 7, 7, 7], ["mm", "add", "mm", "relu"])
    s = keys([0, 0, 0], [7, 7, 7], ["mm", "mm", "add"])
    assert match_tasks(t, s).tolist() == [1, 2, 0, -1]
    t = keys([0, 0, 0], [7, 7, 7], ["copy", "a", "b"])
    s = keys([0, 0, 0], [7, 7, 7], ["a", "b", "copy"])
    assert match_tasks(t, s).tolist() == [2, 0, 1]


def test_a_stretch_of_common_names_is_aligned_again_inside():
    # 283 ops of a thread where "e" and "L" fill all but two: difflib's first pass takes them as junk
    # (each over 1% of a sequence of 200+), anchors on "x" and "y", extends from there up to the
    # first and last difference (an extra "e" early in the target, late in the source) and returns
    # the 240 ops between as one difference. Paired by occurrence there, every "e" took the source's
    # next "e" and every "L" its previous "L": 120 pairs crossing over their neighbours' (and their
    # gaps carried over with them). Aligned again inside, the pairs keep their order but for the
    # two extra "e", left over and paired with each other: one crossing, every other op of the
    # target within one place of its own.
    t = ["x"] + ["e", "L"] * 10 + ["e"] + ["e", "L"] * 130 + ["y"]
    s = ["x"] + ["e", "L"] * 130 + ["e"] + ["e", "L"] * 10 + ["y"]
    m = match_tasks(keys([0] * len(t), [7] * len(t), t), keys([0] * len(s), [7] * len(s), s)).tolist()
    assert sorted(m) == list(range(len(s)))
    assert sum(a > b for a, b in zip(m, m[1:])) == 1
    assert [i for i, j in enumerate(m) if abs(i - j) > 1] == [261]


def test_processors_without_a_common_id_match_by_order():
    # Another run: thread ids differ (100, 200 vs 300, 400), so they pair in id order; stream 7
    # exists on both sides and keeps its id.
    t = keys([0, 0, 1], [100, 200, 7], ["a", "b", "k"])
    s = keys([1, 0, 0], [7, 400, 300], ["k", "b", "a"])
    assert match_tasks(t, s).tolist() == [2, 1, 0]


def test_carried_in_ops_match_only_carried_in_ops():
    # The source's stream starts with a backlog op "k" carried in; the target's first "k" was
    # launched in its own step, so it matches the source's first launched "k", not the backlog.
    t = keys([1, 1], [7, 7], ["k", "k"])
    s = keys([1, 1, 1], [7, 7, 7], ["k", "k", "k"], carry=[True, False, False])
    assert match_tasks(t, s).tolist() == [1, 2]


def test_own_durations_reproduce_the_step_exactly(h200, nccl):
    for table, step in ((h200, 3), (nccl, 5)):
        r = transfer_pair(table, step, table, step)
        assert r.matched_share == 1.0
        assert r.predicted_us == r.measured_us == r.actual_us == r.replayed_us
        assert r.baselines["kernel_ratio"] == r.measured_us
    # The dPRO-style baseline with its own durations is its unchanged replay (not exact: it
    # serializes a device's streams), and on this trace it happens to be exact: its GPU span,
    # plus step 5's measured time outside the GPU span, is the measured step period.
    assert transfer_pair(nccl, 5, nccl, 5).baselines["dpro"] == 219726.9052734375
    assert transfer_pair(nccl, 5, nccl, 5, iteration="gpu").baselines["dpro"] == 213532.75


def test_next_step_durations_h200(h200):
    r = transfer_pair(h200, 3, h200, 4)
    assert r.matched == {"cpu": "5718/5718", "gpu": "1901/1901"} and r.matched_share == 1.0
    assert (r.measured_us, r.actual_us) == (130775.3505859375, 132074.8857421875)   # step periods
    assert r.predicted_us == 133259.060546875                    # +0.90% (same as step 3: -0.98%)
    assert r.baselines["kernel_ratio"] == pytest.approx(131915.56804271875)
    assert r.baselines["dpro"] == 135497.7744140625
    assert transfer_pair(h200, 3, h200, 4, durations="gpu", baselines=False).predicted_us == 132078.0712890625
    assert transfer_pair(h200, 3, h200, 4, durations="cpu", baselines=False).predicted_us == 131865.9404296875


def test_other_run_of_the_same_job(h200):
    r = transfer_pair(h200, 3, load_trace(H200_R1), 3)
    assert r.matched_share == 1.0
    assert (r.predicted_us, r.actual_us) == (127224.8994140625, 127270.98046875)


def test_next_step_durations_nccl(nccl):
    r = transfer_pair(nccl, 5, nccl, 6)
    assert r.matched == {"cpu": "4911/4913", "gpu": "1258/1258"}
    assert r.matched_share == pytest.approx(6169 / 6171)
    assert (r.predicted_us, r.actual_us) == (224757.60546875, 224936.2431640625)


def test_trace_diff_ops_of_one_step_only_shift_nothing():
    # Step 1012 runs 27 CPU ops step 1011 does not (an extra aten::empty_strided after the
    # forward's last launch, behind a 2.3 ms pause that step 1011 takes on the backward thread).
    # Paired by occurrence, every later op of those names took the wrong partner and the pause
    # counted twice: +6.15% against 1011 as measured. Aligned and bridged: +3.30%, -0.96% back;
    # with the stream-20 op after each SendRecv waiting for it, not for a stream-7 op that ended
    # 1 us before it by chance (test_trace_diff_stream_20_waits_for_the_send_recv): +0.94%, -0.13%;
    # with the stretches where the steps differ aligned again (test_a_stretch_of_common_names_...):
    # +1.09%, -0.14%.
    table = load_trace(TRACE_DIFF)
    r = transfer_pair(table, 1012, table, 1011)
    assert r.matched == {"cpu": "6239/6266", "gpu": "1575/1575"}
    assert (r.predicted_us, r.actual_us) == (77040.0, 76212.0)
    assert transfer_pair(table, 1011, table, 1012, baselines=False).predicted_us == 76622.0
    # the transfer bars on this trace: no worse than "same as step k" by more than 0.3 points (the
    # first), at most half its error (the later one): 0.78% against 1.80%
    df = transfer_steps(table)
    assert len(df) == 8
    lumos, same = df["lumos_err_pct"].abs().mean(), df["same_as_k_err_pct"].abs().mean()
    assert lumos <= 0.5 * same
    assert round(lumos, 3) == 0.782 and round(same, 3) == 1.798


def test_trace_diff_stream_20_waits_for_the_send_recv():
    # Step 1011: the thread launches a SendRecv on NCCL stream 21 (corr 1809924), calls
    # cudaStreamWaitEvent and launches a fill kernel on stream 20 (corr 1809965). The fill
    # starts 2 us after the SendRecv ends and 1 us after a stream-7 kernel (corr 1809008) ends;
    # stream 7 runs a 9.5 ms backlog: that kernel was launched 7.5 ms before the wait, with 48
    # more stream-7 ops launched behind it before the wait: a coincidence. Tied to stream 7, the fill (and the
    # cudaStreamSynchronize after it) kept step 1011's timing when step 1010's SendRecv ran
    # 1.7 ms longer: -3.19% against 1010 as measured; tied to the SendRecv, +1.38%.
    table = load_trace(TRACE_DIFF)
    g = build_graph(table, step=1011)
    corr = table.corr[g.event]
    inter = {(int(corr[s]), int(corr[d])) for s, d, c in zip(g.src, g.dst, g.cls) if c == EdgeClass.INTER_STREAM}
    assert (1809924, 1809965) in inter
    assert not any(d == 1809965 and s != 1809924 for s, d in inter)


def test_diff_of_a_step_with_itself_is_zero(nccl):
    d = diff_attribution(nccl, 5, nccl, 5)
    assert d["parts_us"] == {"gpu": 0.0, "cpu": 0.0, "interaction": 0.0, "unexplained": 0.0}
    assert d["difference_us"] == 0.0 and d["matched_share"] == 1.0
    assert all(op["change_us"] == 0.0 for op in d["top_gpu_ops"])


def test_diff_parts_add_up(nccl, h200):
    d = diff_attribution(nccl, 5, nccl, 6)
    x = d["_exact"]
    assert x["gpu"] + x["cpu"] + x["interaction"] + x["unexplained"] == pytest.approx(x["t_b"] - x["t_a"], abs=1e-9)
    # the step period is host-bound: B's GPU durations change nothing, its CPU side nearly all
    assert d["parts_us"] == {"gpu": 0.0, "cpu": 5030.7, "interaction": 0.0, "unexplained": 178.638}
    d = diff_attribution(h200, 3, load_trace(H200_R1), 4)
    x = d["_exact"]
    assert x["gpu"] + x["cpu"] + x["interaction"] + x["unexplained"] == pytest.approx(x["t_b"] - x["t_a"], abs=1e-9)
    assert len(d["top_gpu_ops"]) == 5


def test_unrelated_traces_are_refused(nccl, h200):
    with pytest.raises(NotSameJobError, match="do not look like iterations of one job"):
        transfer_pair(nccl, 5, h200, 3)


def test_transfer_steps_and_table(nccl):
    df = transfer_steps(nccl)   # steps 4, 5, 6: warm-up 4 left out
    assert df[["step_from", "step_to"]].values.tolist() == [[5, 6], [6, 5]]
    rows, summary = transfer_real_table({"nccl": df, "one_step": df.iloc[:0]})
    assert summary["trace"].tolist() == ["nccl", "one_step", "all", "mean of traces"]
    assert summary.loc[1, "predictions"] == 0
    lumos = df["lumos_err_pct"].abs()
    assert summary.loc[2, "lumos_mean_abs_pct"] == pytest.approx(lumos.mean())
    assert summary.loc[2, "same_as_k_median_abs_pct"] == pytest.approx(df["same_as_k_err_pct"].abs().median())
    assert isinstance(rows, pd.DataFrame) and len(rows) == 2
    assert TaskKind.CPU == 0  # matching keys rely on the enum values
