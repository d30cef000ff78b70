"""Which data parallelism a trace trains with (`lumos.model.dp_flavour`): FSDP2 captures
MEASURED ON THIS MACHINE (CPU, gloo; resources/traces/fsdp_cpu), hand-made traces for the patterns
without FSDP ranges, and the shipped Megatron-style, real and H200 traces, which must stay what
they are."""

from __future__ import annotations

from pathlib import Path

import pytest

from lumos.capture.gpt import GPTConfig
from lumos.cli import main as lumos_main
from lumos.trace import load_run
from lumos.model.dp_flavour import collective_kind, find_dp_flavour, host_dp_degree
from lumos.predict.whatif import base_plan, structure_report
from tests.tracegen import MAIN, TraceBuilder

ROOT = Path(__file__).resolve().parents[2]
FSDP = ROOT / "resources" / "traces" / "fsdp_cpu"
REAL = ROOT / "resources" / "traces" / "real"
# the shipped captures' model (record.sh): what each FSDP unit must carry, by the model's arithmetic
CFG = GPTConfig(layers=2, hidden=64, ffn=256, heads=2, seq=32, micro_batch=2, vocab=256)
BLOCK = (CFG.parameter_count() - CFG.vocab * CFG.hidden * 2 - CFG.seq * CFG.hidden - 2 * CFG.hidden) // CFG.layers
ROOT_UNIT = CFG.parameter_count() - CFG.layers * BLOCK


@pytest.mark.parametrize("name,kind", [
    ("c10d::_allgather_base_", "all_gather"), ("c10d::allgather_into_tensor_coalesced_", "all_gather"),
    ("nccl:_all_gather_base", "all_gather"), ("gloo:all_gather", "all_gather"),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "all_gather"),
    ("c10d::_reduce_scatter_base_", "reduce_scatter"), ("nccl:reduce_scatter", "reduce_scatter"),
    ("ncclKernel_ReduceScatter_RING_SIMPLE_Sum_bf16", "reduce_scatter"),
    ("c10d::reduce_scatter_tensor_coalesced_", "reduce_scatter"),
    ("c10d::allreduce_", "all_reduce"), ("nccl:all_reduce", "all_reduce"), ("gloo:all_reduce", "all_reduce"),
    ("ncclKernel_AllReduce_RING_LL_Sum_float", "all_reduce"),
    ("c10d::alltoall_base_", None), ("nccl:send", None), ("ncclDevKernel_SendRecv", None), ("aten::mm", None),
])
def test_collective_kind_by_name(name, kind):
    assert collective_kind(name) == kind


def _order(f):
    return [(c.kind, f.unit_layers[c.unit], c.phase, c.prefetch) for c in f.collectives]


FWD = [("all_gather", u, "forward", False) for u in ("embedding", "layer_0", "layer_1")]


def test_full_shard_capture_every_unit_gathered_twice_per_micro_batch_and_reduce_scattered_once():
    tables = load_run(FSDP / "full_2rank_r0")
    assert [t.rank for t in tables] == [0, 1]
    for t in tables:
        f = find_dp_flavour(t)
        assert f.kind == "fsdp_full" and f.sharded
        assert f.units == ["root", "blocks.0", "blocks.1"]
        assert f.unit_layers == {"root": "embedding", "blocks.0": "layer_0", "blocks.1": "layer_1"}
        assert f.unit_elements == {"root": ROOT_UNIT, "blocks.0": BLOCK, "blocks.1": BLOCK} \
            == {"root": 34944, "blocks.0": 49984, "blocks.1": 49984}
        # per micro-batch (2, gradient accumulation): gather forward, gather again for the backward
        # (layers prefetched by FSDP::backward_prefetch); gradients reduce-scattered in the last only
        bwd = [("all_gather", "embedding", "backward", False), ("all_gather", "layer_1", "backward", True),
               ("all_gather", "layer_0", "backward", True)]
        rs = [("reduce_scatter", u, "backward", False) for u in ("layer_1", "layer_0", "embedding")]
        assert _order(f) == FWD + bwd + FWD + bwd + rs
        assert {c.group for c in f.collectives} == {2}
        assert f.counts() == {"all_gather": 12, "reduce_scatter": 3}


def test_shard_grad_op_capture_gathers_in_the_forward_only():
    f = find_dp_flavour(load_run(FSDP / "grad_op_2rank_r0")[0])
    assert f.kind == "fsdp_grad_op"
    rs = [("reduce_scatter", u, "backward", False) for u in ("layer_1", "layer_0", "embedding")]
    assert _order(f) == FWD + FWD + rs
    assert f.line().startswith("data parallel: FSDP, parameters kept from forward to backward (SHARD_GRAD_OP")


def test_a_real_hsdp_capture_is_read_as_hsdp():
    """MEASURED ON THIS MACHINE (resources/traces/hsdp_cpu): 4 ranks on gloo, sharded within pairs and
    replicated across them. Per iteration each rank gathers 12 times within its pair, and after each
    unit's reduce-scatter in the last micro-batch all-reduces the shard across the pairs."""
    tables = load_run(ROOT / "resources" / "traces" / "hsdp_cpu" / "hsdp_4rank_r0")
    assert [t.rank for t in tables] == [0, 1, 2, 3]
    for t in tables:
        f = find_dp_flavour(t)
        assert f.kind == "hsdp" and f.units == ["root", "blocks.0", "blocks.1"]
        assert f.counts() == {"all_gather": 12, "reduce_scatter": 3, "all_reduce": 3}
        assert {c.group for c in f.collectives if c.kind != "all_reduce"} == {2}
        tail = [(c.kind, c.unit) for c in f.collectives][-6:]
        assert tail == [("reduce_scatter", "blocks.1"), ("all_reduce", "blocks.1"), ("reduce_scatter", "blocks.0"),
                        ("all_reduce", "blocks.0"), ("reduce_scatter", "root"), ("all_reduce", "root")]
        assert f.unit_elements == {"root": ROOT_UNIT, "blocks.0": BLOCK, "blocks.1": BLOCK}
    assert host_dp_degree(tables) == 4    # 2 ranks a shard group x 2 replicas


def test_one_rank_fsdp_has_no_collective_but_its_units_and_sizes():
    f = find_dp_flavour(load_run(FSDP / "full_1rank_r0")[0])
    assert f.kind == "fsdp" and f.sharded and f.collectives == []
    assert f.unit_elements == {"root": ROOT_UNIT, "blocks.0": BLOCK, "blocks.1": BLOCK}
    assert f.reason.endswith("the group has one rank (the capture's metadata says fsdp=full)")


def test_dp_degree_from_host_collectives():
    assert host_dp_degree(load_run(FSDP / "full_2rank_r0")) == 2
    assert host_dp_degree(load_run(FSDP / "full_1rank_r0")) == 1
    # read as DP 2 (not as two pipeline stages), so the one-rank-per-stage rule names it
    rep = structure_report(load_run(FSDP / "grad_op_2rank_r0"))
    assert "world 2 = tp 1 x dp 2 x pp 1, but 2 ranks are present" in rep["error"]
    assert rep["data_parallel"]["kind"] == "fsdp_grad_op" and rep["data_parallel"]["ranks"] == [0, 1]


def test_replay_structure_names_the_flavour_and_the_issue_order(capsys):
    assert lumos_main(["replay", str(FSDP / "full_2rank_r0" / "rank0.json.gz"), "--structure"]) == 0
    out = capsys.readouterr().out.splitlines()
    k = out.index("data parallel: FSDP, resharding after forward (FULL_SHARD, ZeRO-3)")
    assert out[k + 1] == ("  why: FSDP2 ranges name 3 sharded units (root, blocks.0, blocks.1); 12 all-gathers, "
                          "3 reduce-scatters per iteration, group of 2: 6 all-gathers again in the backward")
    assert out[k + 2].startswith("  issue order (rank 0): all-gather(embedding) all-gather(layer_0) "
                                 "all-gather(layer_1) all-gather(embedding) all-gather(layer_1, prefetch) ")
    assert out[k + 2].endswith("reduce-scatter(layer_1) reduce-scatter(layer_0) reduce-scatter(embedding)")


def test_predict_refuses_a_sharded_base_with_the_reason(capsys):
    assert lumos_main(["predict", str(FSDP / "full_1rank_r0"), "--layers", "4"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("lumos predict: error: ") and "full_1rank_r0/rank0.json.gz: the base trains with FSDP" in err
    # FSDP over a group of one has no collective to resize; 2 ranks on gloo have host collectives only
    assert "(a group of one: no collective to tell whether it reshards after forward)" in err
    assert "with their collectives in the trace" in err
    assert err.endswith("From a one-rank FSDP2 capture on CPU, --dp N alone is predicted, with --dp-calibration "
                        "RUN_AT_N RUN_AT_ONE (docs/prediction.md, \"From a one-rank CPU capture\")")
    with pytest.raises(ValueError, match=r"rank0\.json\.gz: the base's collectives are host ops \(15 in the "
                                         r"iteration, e\.g\. c10d::_allgather_base_\)"):
        base_plan(load_run(FSDP / "full_2rank_r0"))


def test_megatron_style_real_and_single_gpu_traces_keep_their_flavour(tiny_runs):
    for t in load_run(tiny_runs["base"]):          # EMULATED Megatron-LM: TP and DP all-reduces
        assert find_dp_flavour(t).kind == "allreduce"
    dlrm = load_run(REAL / "param" / "dlrm_8rank" / "kineto")
    assert {find_dp_flavour(t).kind for t in dlrm} == {"allreduce"}
    # all-to-all embeddings with reduce-scatters in the forward: no DP pattern, and it says so
    torchrec = find_dp_flavour(load_run(REAL / "hta" / "negative_queue_length_values_check__rank0.json.gz")[0])
    assert torchrec.kind == "unrecognised" and not torchrec.sharded
    h200 = find_dp_flavour(load_run(ROOT / "resources" / "traces" / "h200" / "base_r0")[0])
    assert h200.kind == "none" and h200.collectives == []


def _ann(b, name, ts, dur, tid=MAIN):
    b.events.append({"ph": "X", "cat": "user_annotation", "name": name, "pid": 100, "tid": tid,
                     "ts": ts, "dur": dur, "args": {}})


def _coll(b, op, ts, full, shard):
    dims = [[full], [shard]] if "allgather" in op else [[shard], [full]]
    b.cpu(op, ts, 5, **{"Input Dims": dims + [[], []]})


def _layers(b, gather_in_forward: bool, rs_in_backward: bool):
    """Two layers, forward then backward; collectives placed as the pattern under test says."""
    _ann(b, "forward", 0, 200)
    for i in range(2):
        _ann(b, f"layer_{i}/forward/mb0", 10 + 100 * i, 80)
        if gather_in_forward:
            _coll(b, "c10d::_allgather_base_", 12 + 100 * i, 4000, 1000)
    _ann(b, "backward", 300, 300)
    for i in (1, 0):
        start = 310 + 100 * (1 - i)
        _ann(b, f"layer_{i}/backward/mb0", start, 80)
        if rs_in_backward:
            _coll(b, "c10d::_reduce_scatter_base_", start + 60, 4000, 1000)


def test_zero3_pattern_without_fsdp_ranges():
    b = TraceBuilder(step=(0.0, 1000.0))
    _layers(b, gather_in_forward=True, rs_in_backward=True)
    f = find_dp_flavour(b.table())
    assert f.kind == "zero3"
    assert [(c.kind, c.unit, c.phase, c.group) for c in f.collectives] == [
        ("all_gather", "layer_0", "forward", 4), ("all_gather", "layer_1", "forward", 4),
        ("reduce_scatter", "layer_1", "backward", 4), ("reduce_scatter", "layer_0", "backward", 4)]


def test_sharded_optimizer_pattern_gathers_after_the_backward():
    b = TraceBuilder(step=(0.0, 1000.0))
    _layers(b, gather_in_forward=False, rs_in_backward=True)
    _ann(b, "optimizer", 700, 100)
    _coll(b, "c10d::_allgather_base_", 750, 8000, 2000)
    f = find_dp_flavour(b.table())
    assert f.kind == "zero12"
    assert f.collectives[-1].phase == "after_backward" and f.collectives[-1].group == 4


def test_reduce_scatter_in_the_forward_is_model_parallelism():
    b = TraceBuilder(step=(0.0, 1000.0))
    _layers(b, gather_in_forward=True, rs_in_backward=True)
    _coll(b, "c10d::_reduce_scatter_base_", 95, 4000, 1000)   # Megatron sequence parallelism's pattern
    assert find_dp_flavour(b.table()).kind == "unrecognised"


def _fsdp2_units(b, replicate_all_reduce: bool):
    """Two FSDP2 units on one thread: each gathered in its pre_forward (group of 4: output 4x the
    input), reduce-scattered in its post_backward_reduce, and under HSDP the reduced shard then
    all-reduced across the replicas (torch `_fsdp_collectives.py` `foreach_reduce`: the
    `all_reduce` over the replicate group after the reduce-scatter over the shard group)."""
    _ann(b, "forward", 0, 250)
    for i in range(2):
        _ann(b, f"FSDP::pre_forward (layers.{i})", 10 + 100 * i, 40)
        _ann(b, f"FSDP::all_gather (layers.{i})", 12 + 100 * i, 20)
        _coll(b, "c10d::_allgather_base_", 14 + 100 * i, 4000, 1000)
    _ann(b, "backward", 300, 300)
    for i in (1, 0):
        start = 310 + 100 * (1 - i)
        _ann(b, f"FSDP::post_backward_reduce (layers.{i})", start + 50, 40)
        _coll(b, "c10d::_reduce_scatter_base_", start + 52, 4000, 1000)
        if replicate_all_reduce:
            b.cpu("c10d::allreduce_", start + 70, 5, **{"Input Dims": [[1000]]})


def test_hsdp_pattern_all_reduces_each_units_reduced_shard():
    b = TraceBuilder(step=(0.0, 1000.0))
    _fsdp2_units(b, replicate_all_reduce=True)
    f = find_dp_flavour(b.table())
    assert f.kind == "hsdp" and f.sharded
    assert f.units == ["layers.0", "layers.1"]
    assert [(c.kind, c.unit, c.phase, c.elements) for c in f.collectives] == [
        ("all_gather", "layers.0", "forward", 4000), ("all_gather", "layers.1", "forward", 4000),
        ("reduce_scatter", "layers.1", "backward", 4000), ("all_reduce", "layers.1", "backward", 1000),
        ("reduce_scatter", "layers.0", "backward", 4000), ("all_reduce", "layers.0", "backward", 1000)]
    assert "an all-reduce follows the reduce-scatters" in f.reason
    # the same units without the replicas' all-reduce: FSDP that gathers in the forward only
    b = TraceBuilder(step=(0.0, 1000.0))
    _fsdp2_units(b, replicate_all_reduce=False)
    assert find_dp_flavour(b.table()).kind == "fsdp_grad_op"
