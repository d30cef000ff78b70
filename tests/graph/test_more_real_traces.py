"""Three real HTA traces that replayed as "0 tasks" before: ROCm, CPU-only, Triton.

Each is replayed with the work it holds, and the values are read off the trace
(resources/traces/real/hta/more/PROVENANCE.md gives each event):
- AMD MI250, ROCm 6.2: ProfilerStep#1 launches 14 kernels and 2 HtoD copies on
  stream 0 through hipLaunchKernel, hipExtModuleLaunchKernel and
  hipMemcpyWithStream; ProfilerStep#2 is a 49 us stub holding nothing.
- CPU-only rank 34: ProfilerStep#551 (210.109162 ms) on the main thread, one
  gloo:all_reduce starting inside it on each of the two gloo threads.
- Triton: one kernel launched by cuLaunchKernel (cuda_driver, correlation 35);
  the step annotation is on pid 3100453, the work on pid 1670242.
"""

from __future__ import annotations

import numpy as np
import pytest

from lumos.analysis.replay import replay_graph
from lumos.graph import EdgeClass, WaitKind, build_graph
from lumos.trace import select_step

from ..conftest import AMD, CPU_ONLY, TRITON


def _replay(real_tables, path):
    g = build_graph(real_tables[path])
    return g, replay_graph(g, engine="reference", iteration="gpu")  # the GPU work, as HTA reports it


def _edges_by_corr(table, g, cls):
    corr = table.corr[g.event]
    return sorted((int(corr[s]), int(corr[d])) for s, d, c in zip(g.src, g.dst, g.cls) if c == cls)


def test_amd_default_step_is_the_one_holding_the_work(real_tables):
    step = select_step(real_tables[AMD])
    assert step.number == 1
    assert step.note == ("default step ProfilerStep#1 taken: ProfilerStep#2 (0.049 ms) holds no CPU op, "
                         "runtime call or annotation")


def test_amd_rocm_trace_replays_its_gpu_work_exactly(real_tables):
    table = real_tables[AMD]
    g, r = _replay(real_tables, AMD)
    s = g.summary
    assert (s["step"], s["cpu_tasks"], s["gpu_tasks"], s["carry_in_gpu_ops"]) == (1, 40, 16, 0)
    assert sorted(g.name[g.kind == 1]).count("Memcpy HtoD (Host -> Device)") == 2
    assert s["violations"] == 0
    # every GPU op has its launch edge from the HIP call with its correlation id (117 .. 136)
    no_op = (119, 120, 130, 131)  # hipGetDevicePropertiesR0600: launches nothing
    assert _edges_by_corr(table, g, EdgeClass.LAUNCH) == [(c, c) for c in range(117, 137) if c not in no_op]
    assert s["edges"] == {"intra_thread": 38, "inter_thread": 2, "launch": 16, "sync": 2, "intra_stream": 15,
                          "inter_stream": 0, "cross_rank": 0}
    # measured GPU span: the first HtoD copy starts at 4203669603454.206, the SGD multi_tensor_apply
    # kernel ends at 4203669612357.612 + 8.481 (float64 rounding of the large timestamps: 1e-3 us)
    assert r.measured.iteration_us == pytest.approx(8911.887, abs=2e-3)
    assert r.replayed.iteration_us == r.measured.iteration_us
    assert r.error_pct == 0.0
    # busy: 14 kernels + 2 copies, one stream, no overlap: their durations sum to 149.042 us
    assert r.measured.exposed_compute_us == pytest.approx(149.042, abs=2e-3)


def test_amd_blocking_copy_gates_the_next_op_on_its_thread(real_tables):
    # hipMemcpyWithStream returns after its copy: each HtoD copy (corr 117, 123) is a
    # sync edge into the next leaf on the main thread (aten::as_strided, aten::broadcast_tensors)
    table = real_tables[AMD]
    g = build_graph(table)
    corr = table.corr[g.event]
    sync = sorted((int(corr[s]), str(g.name[d])) for s, d, c in zip(g.src, g.dst, g.cls) if c == EdgeClass.SYNC)
    assert sync == [(117, "aten::as_strided"), (123, "aten::broadcast_tensors")]


def test_cpu_only_rank_replays_its_cpu_span(real_tables):
    g, r = _replay(real_tables, CPU_ONLY)
    s = g.summary
    assert (s["step"], s["tasks"], s["cpu_tasks"], s["gpu_tasks"]) == (551, 3, 3, 0)
    assert sorted(g.name.tolist()) == ["ProfilerStep#551", "gloo:all_reduce", "gloo:all_reduce"]
    assert r.measured.iteration_us == pytest.approx(210109.162, abs=2e-3)  # the step's span
    assert r.measured.other_us == r.measured.iteration_us
    assert r.replayed.iteration_us == r.measured.iteration_us
    assert s["notes"][0].startswith("CPU-only trace")


def test_triton_kernel_is_a_task_launched_by_cuLaunchKernel(real_tables):
    table = real_tables[TRITON]
    g, r = _replay(real_tables, TRITON)
    s = g.summary
    assert (s["step"], s["cpu_tasks"], s["gpu_tasks"]) == (1, 3, 1)
    launch = [(str(g.name[a]), str(g.name[b])) for a, b, c in zip(g.src, g.dst, g.cls) if c == EdgeClass.LAUNCH]
    assert launch == [("cuLaunchKernel", "triton_poi_fused_add_cos_sin_0")]
    assert _edges_by_corr(table, g, EdgeClass.LAUNCH) == [(35, 35)]
    sync = int(np.flatnonzero(g.name == "cudaDeviceSynchronize")[0])
    assert g.wait_kind[sync] == WaitKind.DEVICE
    assert r.measured.iteration_us == pytest.approx(1.76, abs=1e-3)  # the kernel's duration
    assert r.error_pct == 0.0
    assert s["notes"] == ["ProfilerStep#1 is annotated on pid 3100453, which has no CPU op or runtime call in it; "
                          "CPU tasks taken from pid 1670242"]
