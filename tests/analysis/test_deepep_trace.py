"""A DeepEP expert-parallel step: its dispatch and combine kernels are communication.

One rank, GEMMs on the compute stream, DeepEP's kernels on a stream of their own launched from
DeepEP's host calls (no c10d op, no record_param_comms), as in DeepSeek-V3's public expert-parallel
traces. Before the `deepep` rule, the DeepEP kernels counted as compute: the step below read as
800 us of exposed compute and no communication at all.

    us      0   100  250 300  400  500       800  900  1000
    GEMMs        [=========)     [==========)                  stream 7
    DeepEP            [n)[=dispatch=)        [combine)          stream 20
                      ^^^^^^^^^ overlapped 150
                                ^^^ exposed 100    ^^^ exposed 100
"""

from __future__ import annotations

import numpy as np
import pytest

from lumos.analysis.replay import measured_breakdown
from lumos.cli import main
from lumos.graph.build import build_graph
from lumos.graph.run_graph import comm_calls, resolve_ops, unmatched_lines
from lumos.trace.collectives import classify

from ..tracegen import TraceBuilder

GEMM = ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off"
        "_kernel__5x_cublas")
# as a public vLLM + DeepEP trace names them (deepseek-ai/DeepEP csrc/kernels/intranode.cu, V1)
NOTIFY = ("void deep_ep::intranode::notify_dispatch<8>(int const*, int*, int, int const*, int*, int, int, "
          "bool const*, int*, int*, int, int, void**, int**, int)")
DISPATCH = ("void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*, float*, int*, int*, "
            "int4 const*, float const*, long const*, float const*, bool const*, int const*, int, int, int, int, "
            "int, int, int, int, void**, int, int, int)")
COMBINE = ("void deep_ep::intranode::combine<__nv_bfloat16, 8, 768, 4096>(__nv_bfloat16*, float*, "
           "__nv_bfloat16 const*, float const*, int const*, int const*, int const*, int const*, int, int, int, "
           "void**, int, int, int)")
EP_STREAM = 20


def deepep_step(enclosing_op: str | None = None) -> TraceBuilder:
    """The step of the module docstring. `enclosing_op`: a CPU op around the dispatch's launch that
    names a collective (a c10d op), which the DeepEP host call itself never is."""
    b = TraceBuilder(step=(0.0, 1000.0))
    b.cpu("aten::mm", 10, 20)
    b.launch(GEMM, 15, 5, 100, 300)
    b.cpu("deep_ep::Buffer::intranode_dispatch", 40, 40)
    b.launch(NOTIFY, 45, 5, 250, 50, stream=EP_STREAM, call="cudaLaunchKernelExC")
    if enclosing_op:
        b.cpu(enclosing_op, 52, 20)
    b.launch(DISPATCH, 55, 5, 300, 200, stream=EP_STREAM, call="cudaLaunchCooperativeKernel")
    b.cpu("aten::mm", 480, 20)
    b.launch(GEMM, 490, 5, 500, 300)
    b.cpu("deep_ep::Buffer::intranode_combine", 780, 30)
    b.launch(COMBINE, 790, 5, 800, 100, stream=EP_STREAM, call="cudaLaunchKernelExC")
    return b


def test_deepep_kernels_are_communication_by_rule_deepep():
    g = build_graph(deepep_step().table())
    names = g.name.astype(str)
    comm = set(names[g.comm].tolist())
    assert comm == {NOTIFY, DISPATCH, COMBINE}
    assert not np.any(g.comm[names == GEMM])
    assert g.summary["comm_kernels"] == {"deepep": 3}


def test_their_time_is_communication_in_the_breakdown():
    """GEMMs [100,400) and [500,800): 600 us of compute. DeepEP [250,500) and [800,900): 350 us of
    communication, 150 of it under the first GEMM. Over the step period [0,1000): exposed compute
    600 - 150, overlapped 150, exposed communication 350 - 150, and 200 us with the GPU idle."""
    g = build_graph(deepep_step().table())
    b = measured_breakdown(g)
    assert (b.iteration_us, b.exposed_compute_us, b.overlapped_us, b.exposed_comm_us, b.other_us) == \
        (1000.0, 450.0, 150.0, 200.0, 200.0)


def test_replay_names_the_rule(tmp_path, capsys):
    path = deepep_step().write(tmp_path / "deepep.json")
    assert main(["replay", str(path)]) == 0
    out = capsys.readouterr().out
    assert "  communication kernels: 3 by rule deepep\n" in out
    rows = {" ".join(w[:-3]): w[-3:-1] for w in map(str.split, out.splitlines()) if len(w) > 3 and w[-1] == "+0.00"}
    assert rows == {"iteration": ["1.000", "1.000"], "exposed compute": ["0.450", "0.450"],   # measured, replayed ms
                    "overlapped": ["0.150", "0.150"], "exposed comm": ["0.200", "0.200"],
                    "other": ["0.200", "0.200"], "gpu span": ["0.800", "0.800"]}


def test_not_matched_across_ranks_without_an_op_naming_the_collective():
    """DeepEP synchronises its peers itself (NVLink flags): its kernels are no calls issued in order on
    every rank, so none is paired with peers, and the reason says so."""
    t = deepep_step().table()
    calls = comm_calls(build_graph(t), t)
    assert [(c.kind, c.rule) for _, c in calls] == [(None, "deepep")] * 3
    ops, why = resolve_ops({0: calls}, world=1)
    assert ops == [] and why == {0: {"own_protocol": 3}}
    line, = unmatched_lines(why, {0: "deepep.json"})
    assert line.startswith("deepep.json: 3 communication ops not matched to peers: 3 kernels of a library that "
                           "synchronises its peers inside them (DeepEP")


def test_an_enclosing_op_naming_a_collective_is_taken():
    t = deepep_step(enclosing_op="c10d::alltoall_base_").table()
    row = int(np.flatnonzero(t.name == DISPATCH)[0])
    from lumos.trace.collectives import comm_launchers
    c = classify(t, row, comm_launchers(t, np.array([row]))[row])
    assert (c.kind, c.kind_from, c.rule) == ("all_to_all", "op", "deepep")
    calls = comm_calls(build_graph(t), t)
    ops, why = resolve_ops({0: calls}, world=1)
    assert why == {0: {"own_protocol": 2, "no_group": 1}}   # the all-to-all is a call now; its group unknown
    assert ops == []


@pytest.mark.parametrize("kernel", [NOTIFY, DISPATCH, COMBINE])
def test_emulator_breakdown_reads_the_same_rule(kernel):
    from lumos.emulator.breakdown import breakdown_events
    events = [{"ph": "X", "cat": "kernel", "name": GEMM, "ts": 0.0, "dur": 10.0},
              {"ph": "X", "cat": "kernel", "name": kernel, "ts": 5.0, "dur": 10.0}]
    assert breakdown_events(events) == {"exposed_compute": 5.0, "overlapped": 5.0, "exposed_comm": 5.0,
                                        "other": 0.0, "total": 15.0}
