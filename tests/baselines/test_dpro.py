"""The dPRO-style baseline: exact queues, gaps, priorities, dependencies and replay."""

from __future__ import annotations

import json

import numpy as np
import pytest

from lumos.baselines.dpro import Priority, QueueKind, build_dpro, replay_dpro
from lumos.baselines.phases import Phase, gpu_op_phases
from lumos.cli import main
from lumos.graph import build_graph
from lumos.sim import simulate
from lumos.trace import load_trace

from ..conftest import REAL, SYNC_FIXTURES
from ..tracegen import BWD, TraceBuilder

MULTI_STREAM = SYNC_FIXTURES / "critical_path__cuda_event_sync_multi_stream__event_sync_trace.json.gz"
ONE_STREAM = SYNC_FIXTURES / "critical_path__cuda_event_sync__event_sync_trace.json.gz"
NCCL = REAL / "hta" / "nccl_parser_config__nccl_data.json.gz"


def training_step() -> TraceBuilder:
    """Forward GEMM, two backward kernels on two streams (overlapping), an all-reduce, an SGD update."""
    b = TraceBuilder(step=(0.0, 200.0))
    b.cpu("aten::mm", 10, 10)
    b.launch("gemm_fwd", 12, 3, 20, 30)                                    # 20-50
    b.cpu("autograd::engine::evaluate_function: MmBackward0", 30, 42, tid=BWD)  # DDP hook inside
    b.launch("gemm_bwd", 32, 3, 50, 40, tid=BWD)                           # 50-90
    b.launch("reduce_bwd", 40, 2, 60, 10, stream=13, tid=BWD)              # 60-70, beside gemm_bwd
    b.cpu("c10d::allreduce_", 62, 8, tid=BWD)
    b.launch("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 64, 2, 95, 45, stream=20, tid=BWD)  # 95-140
    b.cpu("Optimizer.step#SGD.step", 150, 40)
    b.cpu("aten::_foreach_add_", 152, 18)
    b.launch("sgd_update", 155, 3, 160, 15)                                # 160-175
    return b


def test_queues_gaps_priorities_and_producer_on_a_training_step():
    d = build_dpro(training_step().table())
    assert list(d.queue_kind) == [QueueKind.COMPUTE, QueueKind.COMMUNICATION]
    assert [list(d.name[d.queue_nodes(q)]) for q in range(2)] == [
        ["gemm_fwd", "gemm_bwd", "reduce_bwd", "sgd_update"], ["ncclDevKernel_AllReduce_Sum_f32_RING_LL"]]
    assert d.priority.tolist() == [Priority.FORWARD, Priority.BACKWARD, Priority.BACKWARD, Priority.UPDATE,
                                   Priority.COMMUNICATION]
    # device idle time after each op; reduce_bwd ran inside gemm_bwd, so no gap after gemm_bwd,
    # and the gap after reduce_bwd runs from gemm_bwd's end (90) to sgd_update (160)
    assert d.gap.tolist() == [0.0, 0.0, 70.0, 0.0, 0.0]
    # the all-reduce waits for the compute op that ended last before it started: gemm_bwd (ends 90)
    assert d.dep.tolist() == [-1, -1, -1, -1, 1] and d.dep_gap.tolist() == [0.0, 0.0, 0.0, 0.0, 5.0]
    assert d.release.tolist() == [20.0, -np.inf, -np.inf, -np.inf, 95.0]
    assert d.summary["serialized_overlap_us"] == 10.0
    assert d.summary["priorities"] == {"forward": 1, "backward": 2, "update": 1, "communication": 1}


def test_replay_serializes_the_compute_queue():
    d = build_dpro(training_step().table())
    s = replay_dpro(d)
    assert s.start.tolist() == [20.0, 50.0, 90.0, 170.0, 95.0]
    assert s.end.tolist() == [50.0, 90.0, 100.0, 185.0, 140.0]


def test_queue_discipline_equals_algorithm_1_on_the_same_graph():
    for table in (training_step().table(), load_trace(NCCL)):
        d = build_dpro(table)
        ours, alg1 = replay_dpro(d), simulate(d.to_graph(), engine="reference")
        assert np.array_equal(ours.start, alg1.start) and np.array_equal(ours.end, alg1.end)


def test_nodes_are_the_lumos_gpu_tasks():
    table = load_trace(NCCL)
    d, g = build_dpro(table), build_graph(table)
    assert np.array_equal(g.event[d.task], d.event)
    assert sorted(d.task.tolist()) == np.flatnonzero(g.kind == 1).tolist()
    assert np.array_equal(g.dur[d.task], d.dur) and np.array_equal(g.ts[d.task], d.ts)


def test_multi_stream_fixture_is_one_compute_queue_in_measured_order():
    d = build_dpro(load_trace(MULTI_STREAM))
    assert d.queues() == {"compute (GPU 0)": [12, 15, 27, 30, 45, 48]}
    assert list(d.name) == ["Memset (Device)", "ampere_sgemm_128x64_nn"] * 3
    assert (d.ts - d.ts[0]).tolist() == [0.0, 33.0, 414.0, 430.0, 19367.0, 19383.0]
    assert d.gap.tolist() == [32.0, 258.0, 15.0, 18814.0, 15.0, 0.0]
    assert d.dep.tolist() == [-1] * 6
    s = replay_dpro(d)
    assert np.array_equal(s.start, d.ts)  # nothing overlapped, so the gaps give back the timeline


def test_one_stream_fixture():
    d = build_dpro(load_trace(ONE_STREAM))
    assert d.queues() == {"compute (GPU 0)": [11, 13, 15, 17, 22]}
    assert d.gap.tolist() == [48.0, 30.0, 34.0, 100.0, 0.0]
    assert d.summary["step"] == 100 and d.summary["gpu_tasks"] == 5 and d.summary["cpu_tasks"] == 0


def test_collectives_wait_for_the_last_compute_op_before_them():
    d = build_dpro(load_trace(NCCL))
    comm = np.flatnonzero(d.comm)
    assert len(comm) == 7 and np.all(d.dep[comm] >= 0) and np.all(d.dep[~d.comm] == -1)
    compute = np.flatnonzero(~d.comm)
    end = d.end
    for c in comm:
        before = compute[end[compute] <= d.ts[c]]
        assert end[d.dep[c]] == end[before].max()
        assert d.dep_gap[c] == d.ts[c] - end[d.dep[c]]


def test_phases_from_launch_context():
    b = training_step()
    b.cpu("## backward ##", 300, 50)
    b.launch("late_bwd", 310, 2, 320, 5)      # inside a backward annotation on the main thread
    t = b.table()
    rows = np.flatnonzero(t.is_gpu())
    got = dict(zip(t.name[rows], gpu_op_phases(t, rows).tolist()))
    assert got == {"gemm_fwd": Phase.FORWARD, "gemm_bwd": Phase.BACKWARD, "reduce_bwd": Phase.BACKWARD,
                   "ncclDevKernel_AllReduce_Sum_f32_RING_LL": Phase.BACKWARD, "sgd_update": Phase.UPDATE,
                   "late_bwd": Phase.BACKWARD}


def test_cli_simulator_dpro_json(tmp_path, capsys):
    path = training_step().write(tmp_path / "step.json")
    assert main(["replay", str(path), "--simulator", "dpro", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    # the baseline has no CPU side: its iteration is the GPU span
    assert doc["measured"] == {"iteration_us": 155.0, "exposed_compute_us": 85.0, "overlapped_us": 0.0,
                               "exposed_comm_us": 45.0, "other_us": 25.0, "gpu_span_us": 155.0}
    assert doc["replayed"] == {"iteration_us": 165.0, "exposed_compute_us": 90.0, "overlapped_us": 5.0,
                               "exposed_comm_us": 40.0, "other_us": 30.0, "gpu_span_us": 165.0}
    assert doc["error_pct"] == pytest.approx(6.4516)
    assert doc["graph"]["simulator"] == "dpro" and doc["graph"]["cpu_tasks"] == 0
    assert doc["metrics"]["component_l1_us"] == 20.0


def test_cli_dpro_refuses_lumos_ablation_flags(tmp_path):
    path = training_step().write(tmp_path / "step.json")
    assert main(["replay", str(path), "--simulator", "dpro", "--drop", "launch"]) == 2
