"""Failure 5: GPU ops with no launch in the trace (AMD/ROCm traces above all).

roctracer writes correlation id 0 for some kernels (ROCm/roctracer#100: every NCCL kernel
on an MI300X, ROCm 6.1), tracers drop launch records, and a kernel launched before the
profiler started has a correlation id no runtime call in the trace carries. Such an op
cannot be tied to the host. Lumos keeps it on its stream from its measured start (it
follows the op ahead of it only when it was queued right behind another such op), takes
one that starts inside the step as the step's work, and says how many there are and why
in one line of `lumos replay` (key `graph.unlaunched_gpu_ops` in JSON).

Before: a step's op without a launch was kept only if it started before the last launched
op ended, and dropped unseen otherwise (the GPU span and the breakdown then missed it);
an op with correlation 0 would have been tied to any runtime call that carried 0.

Real traces: the AMD MI250 / ROCm 6.2 trace of HTA (resources/traces/real/hta/more/,
PROVENANCE.md there) has none, so it is altered here as roctracer and a lost record
would leave it; PARAM's DLRM rank 1 (resources/traces/real/param/, PROVENANCE.md) has 64
optimizer kernels launched before the profiler started.
"""

from __future__ import annotations

import numpy as np
import pytest

from lumos.cli import main
from lumos.graph import EdgeClass, build_graph
from lumos.sim import simulate
from lumos.trace import load_trace, parse_document

from ..conftest import AMD, DLRM
from ..tracegen import TraceBuilder
from .helpers import read_events, replay_exact, task

RANK1 = DLRM / "worker1_step_12.1694128201556.pt.trace.json.gz"
TENSILE = (121, 132)   # the two Cijk_* GEMMs, launched by hipExtModuleLaunchKernel
LAST = 136             # multi_tensor_apply (SGD), the step's last GPU op


def _amd_as_roctracer_left_it():
    """The AMD trace with the two GEMMs' correlation ids 0 and the last kernel's launch record lost."""
    doc = read_events(AMD)
    events = []
    for e in doc["traceEvents"]:
        args = e.get("args") or {}
        corr = args.get("correlation")
        if e.get("cat") == "kernel" and corr in TENSILE:
            e = dict(e, args=dict(args, correlation=0))
        if e.get("cat") == "cuda_runtime" and corr == LAST:
            continue
        events.append(e)
    return parse_document(dict(doc, traceEvents=events), "amd_roctracer.json")


def test_the_shipped_amd_trace_has_no_op_without_a_launch():
    g = build_graph(load_trace(AMD))
    assert g.summary["unlaunched_gpu_ops"] == {} and "unlaunched_note" not in g.summary


def test_amd_kernels_without_correlation_or_launch_record_are_kept_and_named():
    original = replay_exact(build_graph(load_trace(AMD)))
    table = _amd_as_roctracer_left_it()
    g = build_graph(table)
    s = g.summary
    assert s["unlaunched_gpu_ops"] == {"no_correlation": 2, "launch_not_in_trace": 1}
    assert s["unlaunched_note"] == (
        "3 GPU ops with no launch call in the trace (2 without a correlation id, 1 whose launch record is missing; "
        "first: 'Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16...' on stream 0, correlation 0, "
        "at +0.661 ms from the window's start): kept on their streams from their measured start, not tied to the host")
    assert (s["gpu_tasks"], s["carry_in_gpu_ops"]) == (16, 0)     # all 16 still the step's work
    corr = table.corr[g.event]
    launch = sorted(int(corr[d]) for d in g.dst[g.cls == EdgeClass.LAUNCH])
    assert launch == [117, 118, 122, 123, 124, 125, 126, 127, 128, 129, 133, 134, 135]
    r = replay_exact(g)
    # the GPU span (first copy to the SGD kernel) and the busy time are the trace's, as before
    assert r.measured.iteration_us == original.measured.iteration_us == pytest.approx(8911.887, abs=2e-3)
    assert r.measured.exposed_compute_us == original.measured.exposed_compute_us


def test_a_step_whose_comm_kernels_have_correlation_0_counts_their_time():
    """The roctracer#100 shape: the NCCL kernel of the step has correlation 0 and runs after
    the last launched kernel ended. Before, it was dropped: exposed communication 0."""
    t = TraceBuilder(step=(0.0, 200.0))
    t.launch("gemm", 10, 5, 20, 50)                                       # 20..70
    t.runtime("hipExtLaunchKernel", 30, 5, corr=2)                        # launched the NCCL kernel ...
    t.gpu("ncclDevKernel_Generic(ncclDevComm*, channelMasks, ncclWork*)", 80, 40, stream=9, corr=0)  # ... 80..120
    g = build_graph(t.table())
    assert g.summary["unlaunched_gpu_ops"] == {"no_correlation": 1}
    nccl = task(g, "ncclDevKernel_Generic(ncclDevComm*, channelMasks, ncclWork*)")
    assert g.in_step[nccl] and g.comm[nccl] and g.release[nccl] == 80.0
    r = replay_exact(g)
    assert (r.measured.iteration_us, r.measured.exposed_compute_us, r.measured.exposed_comm_us) == (100.0, 50.0, 40.0)


def test_an_op_without_a_launch_stays_at_its_measured_start_in_a_what_if():
    t = TraceBuilder()
    t.launch("ours", 10, 5, 20, 50)               # 20..70 on stream 7
    t.gpu("orphan", 80, 10, corr=0)               # 80..90, after a 10 us idle gap: pinned at 80
    t.gpu("behind_it", 90, 10, corr=0)            # queued right behind the orphan: follows it
    g = build_graph(t.table())
    assert g.summary["carry_in_anchored"] == 0 and g.release[task(g, "orphan")] == 80.0
    assert g.release[task(g, "behind_it")] == -np.inf
    replay_exact(g)
    g.dur[task(g, "ours")] += 30.0                # ours now ends at 100: the orphan waits for it
    s = simulate(g, engine="reference")
    assert (s.start[task(g, "orphan")], s.start[task(g, "behind_it")]) == (100.0, 110.0)
    g.dur[task(g, "ours")] -= 60.0                # ours ends at 40: the orphan still starts at 80
    s = simulate(g, engine="reference")
    assert (s.start[task(g, "orphan")], s.start[task(g, "behind_it")]) == (80.0, 90.0)


def test_kernels_launched_before_the_profiler_started_on_a_real_rank():
    table = load_trace(RANK1)
    g = build_graph(table)
    s = g.summary
    assert s["unlaunched_gpu_ops"] == {"before_profiler": 64} and s["carry_in_gpu_ops"] == 64
    early = g.event[(g.kind == 1) & ~g.in_step]
    first_call = int(table.corr[(table.cat == 2)].min())
    assert first_call == 41615 and (table.corr[early] < first_call).all()
    assert s["carry_in_anchored"] == 1              # the first; the other 63 queued behind it
    replay_exact(g)


def test_replay_prints_the_line_and_the_json_key(tmp_path, capsys):
    t = TraceBuilder()
    t.launch("k", 10, 5, 20, 30)
    t.gpu("lost", 60, 5, corr=4242)                # an id no runtime call carries
    path = t.write(tmp_path / "t.json")
    assert main(["replay", str(path)]) == 0
    assert ("  unlaunched: 1 GPU ops with no launch call in the trace (1 whose launch record is missing; first: "
            "'lost' on stream 7, correlation 4242, at +0.060 ms from the window's start): kept on their streams "
            "from their measured start, not tied to the host") in capsys.readouterr().out.splitlines()
    assert main(["replay", str(path), "--format", "json"]) == 0
    import json
    assert json.loads(capsys.readouterr().out)["graph"]["unlaunched_gpu_ops"] == {"launch_not_in_trace": 1}
