"""Transfer on a hand-written two-step trace: a collective whose peers are not in the trace
ends when the source step's peers let it, and untraced host time moves with the durations."""

from __future__ import annotations

import numpy as np

from lumos.analysis.transfer import transfer_pair

from ..tracegen import MAIN, PID, TraceBuilder

NCCL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"


def two_steps():
    t = TraceBuilder(step=(0.0, 1000.0))
    t.events.append({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#2", "pid": PID, "tid": MAIN,
                     "ts": 1000.0, "dur": 1000.0, "args": {}})
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
