"""Mixture-of-experts in the emulator (model.moe_*, parallel.ep, training.moe_*), EMULATED: what each switch moves."""

from __future__ import annotations

import ast

import numpy as np
import pytest

from lumos.emulator import emulate
from lumos.emulator.engine import EP_STREAM
from lumos.emulator.program import GROUPED_GEMM
from lumos.emulator.settings import SettingsError

QUIET = ["emulator.comm.jitter_sigma=0", "emulator.compute.jitter_sigma=0", "emulator.rank.slowness_sigma=0",
         "emulator.rank.straggler_prob=0", "emulator.peers.noise_sigma=0"]
# tiny: 4 layers, hidden 512, sequence 512 x micro-batch 1; 4 SwiGLU experts of 2,048, top-2, EP 2 of DP 4
BASE = ["model=tiny", "model.moe_num_experts=4", "model.moe_top_k=2", "model.ffn_activation=swiglu",
        "parallel.tp=1", "parallel.pp=1", "parallel.dp=4", "parallel.ep=2", "model.microbatch_rule=fixed",
        "model.num_microbatches=2", "emulator.granularity=fine", *QUIET]
LAYERS, MB, TOKENS, H = 4, 2, 512, 512


def _run(*extra):
    return emulate([*BASE, *extra], progress=False)


@pytest.fixture(scope="module")
def every_rank():
    return _run("ranks=all")


def _ops(result, name, rank=None):
    rec = result.recorders[result.ranks[0] if rank is None else rank]
    return [a for _, _, _, n, _, a in rec.cpu if n == name]


def _comms(result, desc, rank=None):
    return [a for a in _ops(result, "record_param_comms", rank) if a["Process Group Description"] == desc]


def _kernels(result, stream, rank=None):
    return [g for g in result.recorders[result.ranks[0] if rank is None else rank].gpu if g[4] == stream]


def test_router_and_experts_replace_the_mlp(every_rank):
    r = every_rank
    # the router: the rank's 512 tokens to one logit per expert, then top-k
    assert [[512, 512], [512, 4]] in [a["Input Dims"] for a in _ops(r, "aten::mm")]
    assert len(_ops(r, "aten::topk")) == LAYERS * MB
    # experts as grouped GEMMs: FC1 and FC2 forward, dgrad and wgrad of each backward, per layer and micro-batch;
    # no dense FC1 (512 x 512 -> 4,096 gate-and-up) is left
    assert len(_ops(r, "grouped_gemm::gmm")) == LAYERS * MB * 6
    assert sum(g[3] == GROUPED_GEMM for g in _kernels(r, 7)) == LAYERS * MB * 6
    assert [[512, 512], [512, 4096]] not in [a["Input Dims"] for a in _ops(r, "aten::mm")]
    fc1 = [a["Input Dims"] for a in _ops(r, "grouped_gemm::gmm")][0]
    assert fc1[1] == [2, 512, 4096]   # the rank's 2 of 4 experts, hidden 512 -> gate and up of 2,048


def test_every_expert_op_records_its_own_shapes():
    """Ops built per layer and micro-batch (sized by the routing) never take another op's cached args (a freed
    op's id is reused): each forward FC1's rows are what the all-to-all just before it brought in, each
    permutation's one input is [rows, hidden]. Mixtral's layers over two stages, 8 micro-batches: the case
    that showed it."""
    r = emulate(["model=mixtral_8x7b", "model.num_layers=4", "parallel.tp=1", "parallel.pp=2", "parallel.dp=8",
                 "parallel.ep=4", "model.microbatch_rule=fixed", "model.num_microbatches=8",
                 "emulator.granularity=coarse"], progress=False)
    checked = 0
    for rank in r.ranks:
        got = None
        for _, name, args in sorted(((ts, n, a) for ts, _, _, n, _, a in r.recorders[rank].cpu), key=lambda x: x[0]):
            if name == "record_param_comms" and args.get("Collective name") == "all_to_allv":
                got = sum(ast.literal_eval(args["Out split size"]))
            elif name == "grouped_gemm::gmm" and args["Input Dims"][1] == [2, 4096, 28672]:
                assert args["Input Dims"][0] == [got, 4096]
                checked += 1
            elif name.startswith(("aten::_moe_permute", "aten::_moe_unpermute")):
                assert len(args["Input Dims"]) == 1 and args["Input Dims"][0][1] == 4096
    assert checked == 4 * 8   # every layer forward of both stages, every micro-batch


def test_all_to_all_splits_agree_between_ranks(every_rank):
    r = every_rank
    a2a = {q: [a for a in _comms(r, "ep_group", q) if a["Collective name"] == "all_to_allv"] for q in (0, 1)}
    # dispatch and combine, forward and backward, per layer and micro-batch
    assert len(a2a[0]) == len(a2a[1]) == LAYERS * MB * 4
    for d0, d1 in zip(a2a[0], a2a[1]):
        out0, in0 = ast.literal_eval(d0["In split size"]), ast.literal_eval(d0["Out split size"])
        out1, in1 = ast.literal_eval(d1["In split size"]), ast.literal_eval(d1["Out split size"])
        assert out0[1] == in1[0] and out1[0] == in0[1]   # what 0 sends 1 is what 1 receives from 0
        assert d0["Process Group Ranks"] == "[0, 1]" and d0["Group size"] == 2
    first = a2a[0][0]   # the first dispatch: all the rank's tokens x top-2, none dropped
    assert sum(ast.literal_eval(first["In split size"])) == TOKENS * 2
    assert first["In msg nelems"] == TOKENS * 2 * H
    names = {g[3] for g in _kernels(r, EP_STREAM)}
    assert names == {"ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)",
                     "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"}


def test_counts_reach_the_host_before_each_dispatch(every_rank):
    r = every_rank
    rec = r.recorders[0]
    syncs = [x for x in rec.rt if x[2] == "cudaStreamSynchronize"]
    # one per MoE layer forward, plus the two .item() of the optimizer
    assert len(syncs) == LAYERS * MB + 2
    gathers = [a for a in _comms(r, "ep_group") if a["Collective name"] == "_allgather_base"]
    assert len(gathers) == LAYERS * MB and gathers[0]["Out msg nelems"] == 4 * 2
    padded = _run("model.moe_capacity_factor=1.0", "model.moe_pad_to_capacity=true")
    assert sum(x[2] == "cudaStreamSynchronize" for x in padded.recorders[0].rt) == 2
    assert not [a for a in _comms(padded, "ep_group") if a["Collective name"] == "_allgather_base"]


def test_expert_gradients_reduce_over_the_expert_data_parallel_group(every_rank):
    r = every_rank
    groups = {g["pg_desc"]: g["ranks"] for g in r.metadata(0)["distributedInfo"]["pg_config"]}
    assert groups["ep_group"] == [0, 1] and groups["edp_group"] == [0, 2] and groups["dp_group"] == [0, 1, 2, 3]
    edp = _comms(r, "edp_group")
    # the rank's 2 experts x 4 layers x 3 x 512 x 2,048 parameters, one bucket (40 M)
    assert [a["In msg nelems"] for a in edp] == [2 * LAYERS * 3 * 512 * 2048]
    full = _run("parallel.ep=4")   # every rank of the stage holds its own experts: nothing to reduce them over
    assert not _comms(full, "edp_group")


def test_sequential_experts_show_each_experts_tokens():
    r = _run("training.moe_grouped_gemm=false", "ranks=all")
    fc1 = [a["Input Dims"] for a in _ops(r, "aten::mm") if a["Input Dims"][1] == [512, 4096]]
    a2a = [a for a in _comms(r, "ep_group") if a["Collective name"] == "all_to_allv"]
    # the first layer's two experts (forward FC1): their rows are what the first dispatch brought in
    got = sum(ast.literal_eval(a2a[0]["Out split size"]))
    assert fc1[0][0][0] + fc1[1][0][0] == got


def test_imbalance_moves_the_experts_and_the_exchange():
    flat = _run("model.moe_imbalance=uniform")
    skew = _run("model.moe_imbalance=zipf", "model.moe_imbalance_param=2.0")
    first = {k: [a for a in _comms(x, "ep_group") if a["Collective name"] == "all_to_allv"][0]
             for k, x in (("flat", flat), ("skew", skew))}
    assert ast.literal_eval(first["flat"]["In split size"]) == [512, 512]   # 1,024 choices, evenly
    assert ast.literal_eval(first["skew"]["In split size"]) != [512, 512]

    def busiest_a2a(x):
        return max(g[1] - g[0] for g in _kernels(x, EP_STREAM) if "SendRecv" in g[3])
    assert busiest_a2a(skew) > busiest_a2a(flat)
    big = ["model.hidden=4096", "model.ffn_hidden=8192", "model.num_heads=32", "model.seq_length=2048"]
    # a GPU-bound size: the group waits for the rank whose experts got the most tokens
    assert _run(*big, "model.moe_imbalance=zipf", "model.moe_imbalance_param=2.0").iteration_us \
        > 1.02 * _run(*big, "model.moe_imbalance=uniform").iteration_us


def test_routing_varies_the_iteration_from_seed_to_seed():
    host = ["emulator.host.jitter_sigma=0", "emulator.host.block_jitter_sigma=0", "emulator.host.stall_prob=0"]

    def spread(*extra):
        its = [emulate([*BASE, *host, *extra, f"seed={s}"], progress=False).iteration_us for s in range(4)]
        return np.std(its)
    assert spread("model.moe_imbalance=dirichlet", "model.moe_imbalance_param=1.0") > 0
    assert spread("model.moe_imbalance=uniform") == 0   # noise-free, balanced: every seed the same


def test_allgather_dispatcher_gathers_and_scatters():
    r = _run("training.moe_dispatcher=allgather")
    kinds = sorted({(a["Collective name"], a["Out msg nelems"]) for a in _comms(r, "ep_group")})
    # every rank's 512 tokens x 512 gathered over EP 2; the reduce-scatter returns the rank's half
    assert ("allgather", 2 * 512 * 512) in kinds and ("reduce_scatter", 512 * 512) in kinds
    assert not any(a["Collective name"] == "all_to_allv" for a in _comms(r, "ep_group"))


def test_deepep_kernels_run_outside_c10d():
    r = _run("training.moe_dispatcher=deepep")
    names = [g[3] for g in _kernels(r, EP_STREAM)]
    assert sum(n.startswith("void deep_ep::intranode::dispatch<") for n in names) == LAYERS * MB * 2
    assert sum(n.startswith("void deep_ep::intranode::combine<") for n in names) == LAYERS * MB * 2
    assert sum(n.startswith("void deep_ep::intranode::notify_dispatch<") for n in names) == LAYERS * MB
    assert not [a for a in _comms(r, "ep_group")]   # no collective op: DeepEP is not a c10d call
    assert len(_ops(r, "deep_ep::Buffer::intranode_dispatch")) == LAYERS * MB * 3
    cross = emulate([*BASE, "parallel.dp=16", "parallel.ep=16", "model.moe_num_experts=16",
                     "training.moe_dispatcher=deepep"], progress=False)   # 16 ranks span two 8-GPU hosts
    assert any(g[3].startswith("void deep_ep::internode::dispatch<") for g in _kernels(cross, EP_STREAM))


def test_capacity_factor_drops_and_pads():
    capacity = int(np.ceil(TOKENS * 2 * 1.0 / 4))   # Megatron-Core: tokens x top-k x factor / experts
    skew = ["model.moe_imbalance=zipf", "model.moe_imbalance_param=2.0"]
    dropped = _run(*skew, "model.moe_capacity_factor=1.0")
    sent = sum(ast.literal_eval([a for a in _comms(dropped, "ep_group")
                                 if a["Collective name"] == "all_to_allv"][0]["In split size"]))
    assert sent < TOKENS * 2   # the popular experts' overflow is dropped before the exchange
    padded = _run(*skew, "model.moe_capacity_factor=1.0", "model.moe_pad_to_capacity=true")
    first = [a for a in _comms(padded, "ep_group") if a["Collective name"] == "all_to_allv"][0]
    assert ast.literal_eval(first["In split size"]) == [2 * capacity, 2 * capacity]


@pytest.mark.parametrize("extra", [
    ["parallel.tp=2", "parallel.pp=2", "parallel.dp=2", "parallel.ep=4", "ranks=all"],
    ["parallel.pp=4", "parallel.dp=2", "parallel.vp=2", "model.num_layers=8", "model.num_microbatches=4"],
    ["parallel.pp=2", "parallel.dp=4", "parallel.ep=4", "emulator.granularity=stage"],
    ["parallel.pp=2", "parallel.dp=4", "parallel.ep=4", "emulator.granularity=coarse", "training.recompute=full"],
])
def test_composes_with_the_other_parallelisms(extra):
    r = _run(*extra)
    assert r.iteration_us > 0
    assert any("SendRecv" in g[3] for g in _kernels(r, EP_STREAM))


def test_tensor_parallel_ranks_route_their_sequence_shard():
    r = _run("parallel.tp=2", "parallel.dp=2", "parallel.ep=4")
    # sequence parallelism: each TP rank's MoE takes 512 / 2 tokens; the EP group spans TP x DP ranks
    assert [[256, 512], [512, 4]] in [a["Input Dims"] for a in _ops(r, "aten::mm")]
    assert {a["Process Group Ranks"] for a in _comms(r, "ep_group")} == {"[0, 1, 2, 3]"}


def test_mixtral_and_deepseek_layouts_emulate():
    mix = emulate(["model=mixtral_8x7b", "model.num_layers=2", "parallel.tp=1", "parallel.pp=1", "parallel.dp=8",
                   "parallel.ep=8", "emulator.granularity=coarse"], progress=False)
    assert [[4096, 4096], [4096, 8]] in [a["Input Dims"] for a in _ops(mix, "aten::mm")]
    v3 = emulate(["model=deepseek_v3", "model.num_layers=2", "parallel.tp=1", "parallel.pp=1", "parallel.dp=64",
                  "parallel.ep=64", "emulator.granularity=coarse"], progress=False)
    fc1 = [a["Input Dims"] for a in _ops(v3, "grouped_gemm::gmm")][0]
    assert fc1[1] == [4, 7168, 4096]   # 256 / 64 experts per rank, gate and up of 2,048 each
    # the shared expert: every one of the 4,096 tokens through a 2,048-wide SwiGLU MLP
    assert [[4096, 7168], [7168, 4096]] in [a["Input Dims"] for a in _ops(v3, "aten::mm")]


@pytest.mark.parametrize("extra, message", [
    (["parallel.ep=3"], "must divide tp x dp"),
    (["model.moe_num_experts=null", "parallel.ep=2"], "needs a mixture-of-experts model"),
    (["model.moe_top_k=5"], "1 <= top-k <= experts"),
    (["model.moe_pad_to_capacity=true"], "needs a model.moe_capacity_factor"),
    (["model.moe_imbalance=pareto"], "moe_imbalance must be one of"),
    (["training.moe_dispatcher=nccl"], "moe_dispatcher must be one of"),
    (["parallel.ep=0"], "parallel.ep must be >= 1"),
    (["training.dp_sharding=zero1"], "not emulated"),
])
def test_impossible_settings_are_refused(extra, message):
    with pytest.raises(SettingsError, match=message):
        _run(*extra)
