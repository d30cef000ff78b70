"""Transfer on a hand-written two-step trace: a collective whose peers are not in the trace
ends when the source step's peers let it, and untraced host time moves with the durations."""

from __future__ import annotations

import numpy as np
import pytest

from lumos.analysis.transfer import transfer_pair
from lumos.graph.model import EdgeClass

from ..tracegen import MAIN, PID, TraceBuilder

NCCL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"


def steps_of(period: float) -> TraceBuilder:
    """Two profiled steps of `period` us each, back to back."""
    t = TraceBuilder(step=(0.0, period))
    t.events.append({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#2", "pid": PID, "tid": MAIN,
                     "ts": period, "dur": period, "args": {}})
    return t


def two_steps():
    t = steps_of(1000.0)
    # step 1: 50 us of Python between a and b; the all-reduce waits long for its peers (110-410)
    t.cpu("a", 0, 10)
    t.cpu("b", 60, 10)
    t.launch(NCCL, 100, 5, 110, 300)
    t.launch("k", 420, 5, 430, 50)
    # step 2: 20 us of Python; the peers come sooner (1080-1330), the loop goes on sooner
    t.cpu("a", 1000, 10)
    t.cpu("b", 1030, 10)
    t.launch(NCCL, 1070, 5, 1080, 250)
    t.launch("k", 1340, 5, 1350, 50)
    return t.table()


def test_peers_and_host_gaps_come_from_the_source_step():
    table = two_steps()
    r = transfer_pair(table, 1, table, 2, iteration="gpu")
    assert (r.measured_us, r.actual_us) == (370.0, 320.0)
    assert r.matched_share == 1.0
    # b at 30 (gap 20), the all-reduce from 80 to the peers' 330, k from 350 to 400
    assert r.predicted_us == 320.0
    nccl = int(np.flatnonzero(r.graph.name == NCCL)[0])
    assert r.graph.dur[nccl] == 250.0 and r.graph.finish_floor[nccl] == 330.0
    # the step period: the last task ("k"'s launch call, 340-345 predicted) plus step 2's 655 us tail
    assert transfer_pair(table, 1, table, 2).predicted_us == 1000.0


def test_gpu_durations_alone_keep_step_k_host_gaps():
    table = two_steps()
    r = transfer_pair(table, 1, table, 2, durations="gpu", iteration="gpu")
    # b at 60, the all-reduce from 110 to max(110 + 250, 330) = 360; k's call keeps its
    # 315 us gap after the all-reduce call (ends 425): k runs 430-480
    assert r.predicted_us == 370.0


def pause_in_one_step_only():
    t = steps_of(3000.0)
    # step 1: a 1990 us pause after "a", then an op step 2 does not run ("gc"), then "b"
    t.cpu("a", 0, 10)
    t.cpu("gc", 2000, 10)
    t.cpu("b", 2020, 10)
    t.launch("k", 2040, 5, 2050, 50)
    # step 2: 20 us of Python between "a" and "b"
    t.cpu("a", 3000, 10)
    t.cpu("b", 3030, 10)
    t.launch("k", 3050, 5, 3060, 50)
    return t.table()


def test_host_gaps_are_bridged_over_an_op_of_one_step_only():
    table = pause_in_one_step_only()
    r = transfer_pair(table, 1, table, 2)
    assert r.matched == {"cpu": "3/4", "gpu": "1/1"}
    # Step 2 spends 20 us between "a" and "b"; step 1's 2,000 us there (1,990 + 10 around "gc")
    # become 20, in proportion (19.9 + 0.1): "gc" 29.9-39.9, "b" 40-50, k's call 60-65, plus
    # step 2's 2,945 us after its last task. Kept, the pause would have counted in full (4,990).
    assert r.predicted_us == pytest.approx(3010.0)
    assert r.actual_us == 3000.0
    g = r.graph
    gc = int(np.flatnonzero(g.name == "gc")[0])
    assert g.lag[(g.dst == gc) & (g.cls == EdgeClass.INTRA_THREAD)].tolist() == pytest.approx([19.9])


def pause_before_a_last_op_of_one_step_only():
    t = steps_of(3000.0)
    # step 1 ends its thread in a 1900 us pause, then a device sync step 2 does not run
    t.cpu("a", 0, 10)
    t.launch("k", 20, 5, 30, 50)
    t.cpu("cudaDeviceSynchronize", 1925, 10)
    # step 2: the same work, no sync at its end
    t.cpu("a", 3000, 10)
    t.launch("k", 3020, 5, 3030, 50)
    return t.table()


def test_a_pause_before_an_op_at_the_end_of_one_step_only_is_the_source_steps():
    # the thread of step 1 ends in tasks step 2 did not run: step 2's own time after the last task with a
    # partner (none: its thread ends there) replaces step 1's 1900 us pause, as between two partners;
    # kept, every transfer from step 1 would have carried the pause (resnet_1gpu's step 29 ends in 1.76 s
    # of it before a device sync: 29 -> 28 read +1118% with it, +71% without)
    table = pause_before_a_last_op_of_one_step_only()
    r = transfer_pair(table, 1, table, 2)
    g = r.graph
    sync = int(np.flatnonzero(g.name == "cudaDeviceSynchronize")[0])
    assert g.lag[(g.dst == sync) & (g.cls == EdgeClass.INTRA_THREAD)].tolist() == [0.0]
    base = transfer_pair(table, 1, table, 1)   # the same step's own durations and gaps: unchanged
    sync_own = int(np.flatnonzero(base.graph.name == "cudaDeviceSynchronize")[0])
    assert base.graph.lag[(base.graph.dst == sync_own) & (base.graph.cls == EdgeClass.INTRA_THREAD)].tolist() == \
        [1900.0]


def test_the_source_steps_time_after_its_last_shared_op_is_added_at_the_end():
    # the other direction: step 2's graph (no sync) with step 1's durations. Step 1 spent 1,900 us and a
    # 10 us sync after the partner of step 2's last task ("k"'s launch call); they go on step 2's tail
    # (1,065 us, its own) as time the source thread spent, so the step reads step 1's 3,000 us
    table = pause_before_a_last_op_of_one_step_only()
    r = transfer_pair(table, 2, table, 1)
    assert r.actual_us == 3000.0
    assert r.graph.summary["step_thread"]["tail_us"] == 1065.0 + 1910.0
    assert r.predicted_us == pytest.approx(3000.0)


def loader_in_one_step_only():
    t = steps_of(3000.0)
    # step 1 opens with a data loader's two ops and a 1,500 us stall between them, then the step
    t.cpu("load", 5, 10)
    t.cpu("load", 1515, 10)
    t.cpu("a", 1530, 10)
    t.cpu("b", 1550, 10)
    t.launch("k", 1570, 5, 1580, 50)
    # step 2 has its batch already: it opens with "a"
    t.cpu("a", 3005, 10)
    t.cpu("b", 3025, 10)
    t.launch("k", 3045, 5, 3055, 50)
    return t.table()


def test_ops_of_one_step_only_at_the_head_of_its_thread_are_bridged():
    # step 1 with step 2's durations: the loader's ops keep their 10 us each, but the gaps from the thread's
    # first task to the first shared op ("a") become step 2's from its first task to "a" (none): "a" at 25,
    # "k"'s call 65-70, then step 2's 2,950 us tail. Kept, the stall would have counted in full (4,525 us).
    # resnet_1gpu's step 23 opens this way (a 262 ms loader stall step 24 did not have: 23 -> 24 read +132%)
    table = loader_in_one_step_only()
    r = transfer_pair(table, 1, table, 2)
    assert r.matched == {"cpu": "3/5", "gpu": "1/1"}
    g = r.graph
    second_load, a = np.flatnonzero(g.name == "load")[1], np.flatnonzero(g.name == "a")[0]
    into = [float(g.lag[(g.dst == d) & (g.cls == EdgeClass.INTRA_THREAD)][0]) for d in (second_load, a)]
    assert into == [0.0, 0.0]
    assert r.predicted_us == pytest.approx(3020.0) and r.actual_us == 3000.0


def test_the_source_steps_time_before_its_first_shared_op_is_added_at_the_head():
    # step 2 with step 1's durations: step 1 spent 1,525 us on the loader (10 + 1,500 + 10 + 5 to "a") before
    # the partner of step 2's first task; it joins step 1's 5 us head, so "a" starts at 1,530 as in step 1
    table = loader_in_one_step_only()
    r = transfer_pair(table, 2, table, 1)
    assert r.graph.summary["step_thread"]["head_us"] == 5.0 + 1525.0
    assert r.predicted_us == pytest.approx(3000.0) and r.actual_us == 3000.0
