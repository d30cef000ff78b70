"""Collectives whatever their name: one reading of NCCL/RCCL/Gloo calls.

Each test is a way a user's trace went wrong in a peer tool (HTA, Chakra, ASTRA-sim): a kernel
name NCCL changed across versions, a coalesced call with no size or group, an all-to-all whose
kernel says SendRecv, a group given only by name. Each asserts the exact kinds, sizes, groups and
rendezvous a user needs, or the one line that says why an op found no peers.
"""

from __future__ import annotations

import numpy as np
import pytest

from lumos.cli import main
from lumos.graph.build import build_graph
from lumos.graph.run_graph import build_run_graph, comm_calls, rendezvous_links, unmatched_lines
from lumos.trace import load_run, load_trace, write_trace
from lumos.trace.collectives import KINDS, classify, classify_name, pg_config
from lumos.trace.schema import is_comm_kernel
from lumos.model.dp_flavour import collective_kind

from ..conftest import DLRM, REAL

HTA_NCCL = REAL / "hta" / "nccl_parser_config__nccl_data.json.gz"

# Real names, each from a trace or from the source that writes it, with the kind it must read as.
NAMES = [
    # NCCL < 2.19 kernels (DLRM run on V100, resources/traces/real/param/dlrm_8rank; HTA nccl_data)
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "sendrecv"),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "all_reduce"),
    ("ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "broadcast"),
    # NCCL >= 2.19 kernels: ncclDevKernel_<Coll>_<op>_<type>_<algo>_<proto>, SendRecv, Generic (coalesced)
    ("ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "all_gather"),
    ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "reduce_scatter"),
    ("ncclDevKernel_AllReduce_Sum_f32_NVLS_SIMPLE(ncclDevComm*, unsigned long, ncclWork*)", "all_reduce"),
    ("ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)", "sendrecv"),
    ("ncclDevKernel_Generic(ncclDevComm*, unsigned long, ncclWork*)", "coalesced"),
    ("ncclDevKernel_Generic_4(ncclDevComm*, unsigned long, ncclWork*)", "coalesced"),
    ("void ncclKernel_Reduce_RING_LL_Sum_half(ncclDevComm*, unsigned long, ncclWork*)", "reduce"),
    # NCCL >= 2.27 symmetric kernels (src/device/symmetric/generate.py): ncclSymkDevKernel_<Coll>_<algo>_<op>_<type>
    ("ncclSymkDevKernel_AllReduce_AGxLL_R_sum_f32(ncclSymkDevWorkArgs4K)", "all_reduce"),
    ("ncclSymkDevKernel_ReduceScatter_LL_sum_f32(ncclSymkDevWorkArgs4K)", "reduce_scatter"),
    # record_function ranges ProcessGroupNCCL / Gloo open around each call
    ("nccl:all_reduce", "all_reduce"), ("nccl:all_to_all", "all_to_all"), ("nccl:broadcast", "broadcast"),
    ("nccl:send", "send"), ("nccl:recv", "recv"), ("nccl:_all_gather_base", "all_gather"),
    ("nccl:_reduce_scatter_base", "reduce_scatter"), ("nccl:coalesced", "coalesced"),
    ("nccl:_coalesced", "coalesced"), ("nccl:all_gather_into_tensor_coalesced", "all_gather"),
    ("gloo:all_reduce", "all_reduce"), ("gloo:barrier", "barrier"), ("rccl:all_gather", "all_gather"),
    # c10d dispatcher ops
    ("c10d::allreduce_", "all_reduce"), ("c10d::alltoall_base_", "all_to_all"),
    ("c10d::_allgather_base_", "all_gather"), ("c10d::reduce_scatter_tensor_coalesced_", "reduce_scatter"),
    ("c10d::broadcast_", "broadcast"), ("c10d::send", "send"), ("c10d::recv_", "recv"),
    ("c10d::barrier", "barrier"), ("c10d::gather_", "gather"), ("c10d::scatter_", "scatter"),
    # not communication
    ("aten::scatter_", None), ("aten::broadcast_tensors", None), ("gather_kernel", None),
    ("FSDP::all_gather (layers.0)", None), ("record_param_comms", None),
]
# `Collective name` values PyTorch writes in record_param_comms (bare, no prefix)
ARG_NAMES = [("allreduce", "all_reduce"), ("_allgather_base", "all_gather"),
             ("allgather_into_tensor_coalesced", "all_gather"), ("_reduce_scatter_base", "reduce_scatter"),
             ("all_to_all", "all_to_all"), ("all_to_allv", "all_to_all"), ("alltoall_base", "all_to_all"),
             ("broadcast", "broadcast"), ("send", "send"), ("recv", "recv"), ("recvAnySource", "recv"),
             ("barrier", "barrier"), ("coalesced", "coalesced"), ("allreduce_coalesced", "all_reduce")]


@pytest.mark.parametrize("name,kind", NAMES)
def test_classify_real_names(name, kind):
    assert classify_name(name) == kind
    assert kind is None or kind in KINDS


@pytest.mark.parametrize("value,kind", ARG_NAMES)
def test_classify_collective_name_args(value, kind):
    assert classify_name(value, bare=True) == kind
    assert classify_name(value) is None          # bare only where the field says it is a collective


@pytest.mark.parametrize("name", [n for n, k in NAMES if n[0] in "nv" and "(" in n]
                         + ["mscclKernel_Sum_bf16_LL128(ncclDevComm*, unsigned long, ncclWork*)"])
def test_every_nccl_kernel_is_communication(name):
    """ncclDevKernel_Generic (NCCL >= 2.19 coalesced) and MSCCL's kernels included."""
    assert is_comm_kernel(name)


def test_dp_collective_kind_reads_through_the_classifier():
    """dp_flavour answers the three DP kinds only, for every spelling of them."""
    assert collective_kind("nccl:_all_gather_base") == "all_gather"
    assert collective_kind("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL") == "reduce_scatter"
    assert collective_kind("allreduce") == "all_reduce"
    assert collective_kind("nccl:all_to_all") is None and collective_kind("ncclDevKernel_Generic") is None


def test_hta_kernel_args_give_kind_size_dtype_group():
    """HTA's nccl_data trace (resources/traces/real/hta/PROVENANCE.md): NCCL 2.17 kernels carrying
    record_param_comms args; the default group named in distributedInfo.pg_config."""
    t = load_trace(HTA_NCCL)
    assert pg_config(t.metadata) == {"0": (0, 1)}
    rows = np.flatnonzero(np.char.startswith(t.name.astype(str), "ncclKernel_Broadcast"))
    c = classify(t, int(rows[0]))
    assert (c.kind, c.kind_from, c.nelems, c.size_from, c.dtype, c.group, c.group_from, c.group_size) == \
        ("broadcast", "args", 53120, "args", "Float", (0, 1), "args", 2)


def _ev(cat, name, ts, dur, tid=100, **args):
    pid = 0 if cat == "kernel" else 100
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _kernel(name, ts, dur, corr, **args):
    return _ev("kernel", name, ts, dur, tid=28, stream=28, device=0, correlation=corr, **args)


def _call(ts, corr):
    return _ev("cuda_runtime", "cudaLaunchKernel", ts, 1.0, correlation=corr)


def _write_run(tmp_path, per_rank, pg_conf=None):
    for r, events in enumerate(per_rank):
        step = _ev("user_annotation", "ProfilerStep#1", 0.0, 200.0)
        dist = {"rank": r, "world_size": len(per_rank), "backend": "nccl"}
        if pg_conf is not None:
            dist["pg_config"] = pg_conf
        write_trace(tmp_path / f"rank{r}.json", [step] + events, {"distributedInfo": dist})
    return load_run(tmp_path)


def _rendezvous(graph) -> list[list[tuple[int, str]]]:
    """Each rendezvous as its members' (rank, name), sorted."""
    r, k = rendezvous_links(graph)
    out = {}
    for a, b in zip(r.tolist(), k.tolist()):
        out.setdefault(a, []).append((int(graph.rank[b]), str(graph.name[b]).split("(")[0]))
    return [sorted(v) for _, v in sorted(out.items())]


def _coalesced_rank(t0, n_kernels):
    """A NeMo-style coalesced reduce-scatter: the members are recorded on the CPU, then one range
    `nccl:coalesced` (record_param_comms: Collective name 'coalesced', no size, no group) launches
    the NCCL >= 2.19 Generic kernel(s)."""
    ev = [_ev("cpu_op", "c10d::_reduce_scatter_base_", t0, 2.0, **{"Input Dims": [[64], [128]]}),
          _ev("cpu_op", "c10d::_reduce_scatter_base_", t0 + 3, 2.0, **{"Input Dims": [[64], [128]]}),
          _ev("user_annotation", "nccl:coalesced", t0 + 6, 10.0),
          _ev("cpu_op", "record_param_comms", t0 + 6.5, 9.0, **{"Collective name": "coalesced",
                                                               "Input Dims": [[], [], []]})]
    for i in range(n_kernels):
        ev += [_call(t0 + 7 + 2 * i, 10 + i),
               _kernel("ncclDevKernel_Generic(ncclDevComm*, unsigned long, ncclWork*)", t0 + 20 + 10 * i, 8.0,
                       10 + i)]
    return ev


def test_coalesced_without_size_or_group_is_one_collective(tmp_path):
    """NeMo GPT-3 175B failure: `nccl:coalesced` with no message size and no process group. The ranks'
    calls are the same, the whole world is loaded: the world is the group; a coalesced call that
    launches two Generic kernels on rank 1 is still one collective; its size stays unknown (None),
    not 0."""
    tables = _write_run(tmp_path, [_coalesced_rank(10.0, 1), _coalesced_rank(12.0, 2)])
    calls = comm_calls(build_graph(tables[1]), tables[1])
    assert [(c.kind, c.kind_from, c.nelems, c.group) for _, c in calls] == [("coalesced", "args", None, None)]
    g = build_run_graph(tables)
    assert _rendezvous(g) == [[(0, "ncclDevKernel_Generic"), (1, "ncclDevKernel_Generic")]]
    assert g.summary["unmatched_comm"] == {}


def _a2a_rank(t0, kernel, op="c10d::alltoall_base_", rng="nccl:all_to_all", **kargs):
    return [_ev("cpu_op", op, t0, 12.0, **{"Input Dims": [[6144], [6144], [], [], [], []]}),
            _ev("user_annotation", rng, t0 + 1, 10.0),
            _call(t0 + 2, 5), _kernel(kernel, t0 + 20, 30.0, 5, **kargs)]


@pytest.mark.parametrize("kernel", ["ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
                                    "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"])
def test_all_to_all_on_sendrecv_kernel_is_one_collective(tmp_path, kernel):
    """PyTorch runs NCCL all_to_all as grouped send/recv: the kernel says SendRecv, the op and range
    say all_to_all. Three ranks must meet at ONE rendezvous over the group (0, 1, 2), not as p2p
    pairs; the size comes from the op's Input Dims."""
    pg = {"Process Group Ranks": "[0, 1, 2]"}
    tables = _write_run(tmp_path, [_a2a_rank(10.0 + r, kernel, **pg) for r in range(3)])
    (_, c), = comm_calls(build_graph(tables[0]), tables[0])
    assert (c.kind, c.kind_from, c.nelems, c.size_from, c.group) == ("all_to_all", "op", 6144, "input_dims", (0, 1, 2))
    g = build_run_graph(tables)
    name = kernel.split("(")[0]
    assert _rendezvous(g) == [[(0, name), (1, name), (2, name)]]


def test_send_recv_ranges_pair_point_to_point(tmp_path):
    """`nccl:send` / `nccl:recv` around SendRecv kernels (Megatron pipeline stages): one p2p pair."""
    k = "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"
    pg = {"Process Group Ranks": "[0, 1]"}
    tables = _write_run(tmp_path, [_a2a_rank(10.0, k, op="c10d::send", rng="nccl:send", **pg),
                                   _a2a_rank(11.0, k, op="c10d::recv_", rng="nccl:recv", **pg)])
    assert [c.kind for _, c in comm_calls(build_graph(tables[1]), tables[1])] == ["recv"]
    assert _rendezvous(build_run_graph(tables)) == [[(0, "ncclDevKernel_SendRecv"), (1, "ncclDevKernel_SendRecv")]]


def test_group_by_name_from_pg_config(tmp_path):
    """Only `Process Group Name` on the call; distributedInfo.pg_config says group '5' is ranks (0, 2).
    Rank 1 (not in the group) has no such call: ranks 0 and 2 meet, nothing is left unmatched."""
    conf = [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": 3, "ranks": [0, 1, 2]},
            {"pg_name": "5", "pg_desc": "dp", "pg_size": 2, "ranks": [0, 2]},
            {"pg_name": "6", "pg_desc": "partial", "pg_size": 2}]          # ranks absent: left out
    k = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
    ranks = [_a2a_rank(10.0, k, op="c10d::allreduce_", rng="nccl:all_reduce", **{"Process Group Name": "5"}),
             [], _a2a_rank(11.0, k, op="c10d::allreduce_", rng="nccl:all_reduce", **{"Process Group Name": "5"})]
    tables = _write_run(tmp_path, ranks, pg_conf=conf)
    assert pg_config(tables[0].metadata) == {"0": (0, 1, 2), "5": (0, 2)}
    (_, c), = comm_calls(build_graph(tables[0]), tables[0])
    assert (c.kind, c.group, c.group_from) == ("all_reduce", (0, 2), "pg_config")
    g = build_run_graph(tables)
    assert _rendezvous(g) == [[(0, "ncclDevKernel_AllReduce_Sum_f32_RING_LL"),
                               (2, "ncclDevKernel_AllReduce_Sum_f32_RING_LL")]]
    assert g.summary["unmatched_comm"] == {}


def _no_group_run(tmp_path):
    k = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
    ag = "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
    r0 = [_call(1.0, 1), _kernel(k, 5.0, 5.0, 1), _call(2.0, 2), _kernel(ag, 20.0, 5.0, 2)]
    r1 = [_call(1.0, 1), _kernel(k, 5.0, 5.0, 1)]
    return _write_run(tmp_path, [r0, r1])


def test_no_group_and_calls_differ_is_said_not_guessed(tmp_path):
    """No group anywhere, and rank 0 issues an all-gather rank 1 does not: which ranks share a call
    cannot be told, so nothing is paired and each file gets one line saying so."""
    tables = _no_group_run(tmp_path)
    g = build_run_graph(tables)
    assert _rendezvous(g) == []
    assert g.summary["unmatched_comm"] == {0: {"no_group": 2}, 1: {"no_group": 1}}
    why = ("no process group (no Process Group Ranks, no Process Group Name in distributedInfo.pg_config, "
           "and the ranks' calls without a group differ, so none can be inferred)")
    assert unmatched_lines(g.summary["unmatched_comm"], {0: "rank0.json"}) == [
        f"rank0.json: 2 communication ops not matched to peers: 2 {why}",
        f"rank 1: 1 communication op not matched to peers: 1 {why}"]


def test_replay_joint_prints_and_counts_unmatched(tmp_path, capsys):
    tables = _no_group_run(tmp_path)
    assert main(["replay", str(tmp_path), "--joint"]) == 0
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if "not matched" in ln]
    assert [ln.split(": ", 2)[1] for ln in lines] == [tables[0].path, tables[1].path]
    assert lines[0].endswith("2 communication ops not matched to peers: 2 no process group (no Process Group "
                             "Ranks, no Process Group Name in distributedInfo.pg_config, and the ranks' calls "
                             "without a group differ, so none can be inferred)")
    assert main(["replay", str(tmp_path), "--joint", "--format", "json"]) == 0
    import json
    doc = json.loads(capsys.readouterr().out)
    assert doc["joint"]["unmatched_comm"] == {"0": {"no_group": 2}, "1": {"no_group": 1}}
    assert doc["joint"]["comm_ops"] == {"0": 2, "1": 1}


def test_sendrecv_kernel_alone_names_no_peer(tmp_path):
    """A SendRecv kernel with no op or args around it: direction and peer unknown, said as such."""
    k = "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"
    tables = _write_run(tmp_path, [[_call(1.0, 1), _kernel(k, 5.0, 5.0, 1)]] * 2)
    g = build_run_graph(tables)
    assert _rendezvous(g) == [] and g.summary["unmatched_comm"] == {0: {"no_peer": 1}, 1: {"no_peer": 1}}


def test_dlrm_all_to_all_without_metadata_meets_over_the_world():
    """param DLRM, 8 ranks on V100 (resources/traces/real/param/PROVENANCE.md): PyTorch 2.0 wrote no
    Collective name and no group; kernels are ncclKernel_SendRecv under nccl:all_to_all and
    ncclKernel_AllReduce under nccl:all_reduce. The eight ranks issue the same 8 calls, so the world
    is each call's group: 8 rendezvous of all 8 ranks; the all-to-alls' sizes from Input Dims, the
    all-reduces' unknown (their TensorList dims are not recorded)."""
    tables = load_run(DLRM)
    calls = comm_calls(build_graph(tables[0]), tables[0])
    assert [(c.kind, c.nelems) for _, c in calls] == [
        ("all_to_all", 6144), ("all_to_all", 24), ("all_to_all", 384), ("all_to_all", 768), ("all_reduce", None),
        ("all_to_all", 6144), ("all_reduce", None), ("all_reduce", None)]
    g = build_run_graph(tables)
    rv = _rendezvous(g)
    assert len(rv) == 8 and all([r for r, _ in m] == list(range(8)) for m in rv)
    assert g.summary["unmatched_comm"] == {}
