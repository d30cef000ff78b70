"""The emulator's switchable physics each change what they should."""

from __future__ import annotations

import pytest

from lumos.emulator import emulate
from lumos.emulator.costs import CommCosts
from lumos.emulator.program import is_gemm_kernel
from lumos.emulator.settings import SettingsError, from_config
from lumos.emulator.topology import Topology

COMPUTE_S, TP_S, DP_S = 7, 20, 24
TINY = ["model=tiny", "seed=0"]   # 4 layers, 2x2x4, 4 micro-batches: 2 layers per stage


def _ranges(rec, needle):
    return sorted((s, e, n) for s, e, cat, n, *_ in rec.cpu if cat == "user_annotation" and needle in n)


def _gpu(rec, sid):
    return sorted((s, e, n) for s, e, _c, n, st, *_ in rec.gpu if st == sid)


@pytest.fixture(scope="module")
def plain():
    return emulate(TINY, progress=False)


@pytest.fixture(scope="module")
def recompute():
    return emulate(TINY + ["training.recompute=full"], progress=False)


def test_recompute_reruns_each_layers_forward_inside_its_backward(plain, recompute):
    rec0, rec1 = plain.recorders[0], recompute.recorders[0]
    gemms = lambda rec: sum(1 for g in rec.gpu if is_gemm_kernel(g[3]))  # noqa: E731
    # 2 layers per stage x 4 micro-batches x 4 forward GEMMs (QKV, proj, FC1, FC2) more
    assert gemms(rec1) - gemms(rec0) == 2 * 4 * 4
    # and 2 more TP all-reduces per layer forward
    assert len(_gpu(rec1, TP_S)) - len(_gpu(rec0, TP_S)) == 2 * 4 * 2
    rec_ranges = _ranges(rec1, "/recompute/")
    assert [n for *_x, n in rec_ranges if n.endswith("mb0")] == ["layer_1/recompute/mb0", "layer_0/recompute/mb0"]
    assert len(rec_ranges) == 2 * 4 and not _ranges(rec0, "/recompute/")
    for s, e, n in rec_ranges:   # inside the backward range of the same layer and micro-batch, at its start
        bwd = [b for b in _ranges(rec1, n.replace("recompute", "backward"))]
        assert len(bwd) == 1 and bwd[0][0] <= s and e <= bwd[0][1]
    assert recompute.iteration_us > plain.iteration_us


def test_dp_allreduce_after_backward_starts_after_the_last_backward_kernel():
    small = ["emulator.comm.bucket_mparams=0.5"]   # tiny stages hold ~3M parameters: several buckets
    bucketed = emulate(TINY + small, progress=False)
    after = emulate(TINY + small + ["training.dp_allreduce=after_backward", "training.after_backward_bucket_mparams=0.5"],
                    progress=False)
    for run, overlapped in ((bucketed, True), (after, False)):
        rec = run.recorders[0]
        compute = _gpu(rec, COMPUTE_S)
        norm_start = min(s for s, _e, n in compute if "L2NormFunctor" in n)   # the optimizer's first kernel
        last_bwd_end = max(e for s, e, _n in compute if s < norm_start)
        dp = _gpu(rec, DP_S)
        assert len(dp) >= 2, "rank 0 (dp=4) all-reduces its gradients in several buckets"
        if overlapped:   # buckets launched as backward produces them overlap its kernels
            assert dp[0][0] < last_bwd_end
        else:
            assert dp[0][0] >= last_bwd_end
            assert _ranges(rec, "allreduce_gradients")


def test_tp_group_spanning_two_hosts_uses_the_network():
    topo = Topology(16, 1, 2, 8)
    g = topo.tp_group(0)
    assert (g.hosts, g.per_host, g.ranks) == (2, 8, tuple(range(16)))
    s = from_config(_compose(["model=gpt3_175b", "parallel.tp=16", "parallel.pp=1", "parallel.dp=2"]))
    costs = CommCosts(s.cluster, s.knobs.comm, job_hosts=4)
    nbytes = 2048 * 12288 * 2
    one_host = costs.collective("allreduce", nbytes, 8, 1, 8, 0)
    two_hosts = costs.collective("allreduce", nbytes, 16, 2, 8, 0)
    # plus, on each GPU's own NIC, a 2-host ring over an 8th of the message
    inter = 2 * s.cluster.net_step_latency_us + (nbytes / 8) / costs.nic_bw(0)
    assert two_hosts == pytest.approx(one_host + inter, rel=1e-12)
    r = emulate(["model=gpt3_175b", "model.num_layers=2", "parallel.tp=16", "parallel.pp=1", "parallel.dp=1",
                 "model.num_microbatches=1"], progress=False)
    names = {n for *_x, n in _gpu(r.recorders[0], TP_S)}
    assert any("TREE" in n for n in names), names   # small all-reduces across hosts take the tree


def _compose(overrides):
    from lumos.config import compose

    return compose("emulate", overrides)


@pytest.mark.parametrize("overrides,message", [
    (["parallel.tp=3", "model=tiny"], "tp=3 must divide gpus_per_host=8 or be a multiple"),
    (["training.recompute=selective"],
     "training.recompute must be one of none, full, selective_op, selective_layer, got 'selective'"),
    (["training.dp_allreduce=sometimes"], "training.dp_allreduce must be"),
    (["++cluster.emulator.comm.nic_efff=0.5"], "cluster.emulator.comm.nic_efff is not an emulator knob"),
    (["emulator.comm.algorithm=magic"], "emulator.comm.algorithm must be one of hier_ring, nccl"),
    (["emulator.comm.placement=pooled"], "emulator.comm.placement must be one of rail, shared"),
    (["emulator.comm.ring_form=parallel"], "emulator.comm.ring_form must be one of serial, pipelined"),
    (["emulator.schedule.grad_norm_group=dp"], "emulator.schedule.grad_norm_group must be one of tp, model_parallel"),
])
def test_bad_settings_name_what_is_wrong(overrides, message):
    with pytest.raises(SettingsError, match=message.replace("(", r"\(").replace(")", r"\)")):
        from_config(_compose(overrides))


def test_knob_overrides_apply_emulator_then_cluster_then_training():
    s = from_config(_compose(["++cluster.emulator.host.op_gap_us=11", "++training.emulator.host.op_gap_us=22",
                              "++cluster.emulator.comm.nic_eff=0.5"]))
    assert (s.knobs.host.op_gap_us, s.knobs.comm.nic_eff) == (22, 0.5)
    s = from_config(_compose(["cluster=a100_vtrain", "training=vtrain", "model.hidden=1024"]))
    assert (s.training.recompute, s.training.dp_allreduce, s.model.ffn_hidden) == ("full", "after_backward", 4096)
    assert s.cluster.peak_bf16_tflops == 312.0 and s.cluster.nic_gbps * s.cluster.nics_per_host == 800.0


def test_unfused_attention_materialises_the_score_matrix(plain):
    unfused = emulate(TINY + ["training.attention=unfused"], progress=False)
    names = lambda r: [g[3] for g in r.recorders[0].gpu]  # noqa: E731
    assert sum("flash_fwd_kernel" in n for n in names(plain)) == 2 * 4    # 2 layers x 4 micro-batches
    assert not any("flash" in n for n in names(unfused))
    assert sum("scaled_masked_softmax_warp_forward" in n for n in names(unfused)) == 2 * 4
    assert sum("scaled_masked_softmax_warp_backward" in n for n in names(unfused)) == 2 * 4
    assert sum("fused_dropout_kernel" in n for n in names(unfused)) == 2 * 4
    # 2 batched GEMMs forward and 4 backward per layer and micro-batch, on top of the 10 linear ones
    gemms = lambda r: sum(1 for n in names(r) if is_gemm_kernel(n))  # noqa: E731
    assert gemms(unfused) - gemms(plain) == 2 * 4 * 6
    s = unfused.settings.model
    softmax = [g for g in unfused.recorders[0].gpu if "softmax_warp_forward" in g[3]]
    ops = {a["External id"]: a for *_x, a in [(c[0], c[5]) for c in unfused.recorders[0].cpu] if a}
    dims = ops[softmax[0][6]]["Input Dims"]
    # (micro-batch x local heads) score matrices of seq x seq
    assert dims == [[s.micro_batch_size * s.num_heads // 2, s.seq_length, s.seq_length]]


@pytest.mark.parametrize("overrides,coarse", [
    (["model=gpt3_15b"], False),                                                   # 2 stages x 4 x 24 x 2
    (["model=gpt3_117b", "parallel.tp=8", "parallel.pp=8", "parallel.dp=4"], False),  # 8 x 64 x 12 x 2 = 12,288
    (["cluster=a100_vtrain", "training=vtrain", "model=gpt3_175b", "model.global_batch_size=1536",
      "parallel.tp=8", "parallel.pp=8", "parallel.dp=8"], True),                   # 8 x 192 x 12 x 3 = 55,296
    # the 175B search base of the multi-node ground truth (micro-batch 2): 8 x 96 x 12 x 3 = 27,648 stays
    # fine, so TP what-ifs keep the element-wise work a fused kernel would hide
    # (docs/notes/2026-12-02-coarse-traces.md)
    (["cluster=a100_vtrain", "training=vtrain", "model=gpt3_175b", "model.global_batch_size=1536",
      "model.micro_batch_size=2", "parallel.tp=8", "parallel.pp=8", "parallel.dp=8"], False),
    (["model=gpt3_15b", "emulator.granularity=coarse"], True),
    (["cluster=a100_vtrain", "training=vtrain", "model=gpt3_175b", "model.global_batch_size=1024",
      "parallel.tp=8", "parallel.pp=8", "parallel.dp=8", "emulator.granularity=fine"], False),
])
def test_auto_granularity_goes_coarse_only_for_very_large_runs(overrides, coarse):
    from lumos.emulator.program import coarse_granularity

    assert coarse_granularity(from_config(_compose(overrides))) is coarse


def test_segment_granularity_keeps_the_work_and_the_collectives():
    """One kernel per run of compute between TP collectives: same summed base time, same collectives."""
    from lumos.emulator.costs import KernelCosts
    from lumos.emulator.program import Program, TPAllReduce, granularity_level

    big = ["cluster=a100_vtrain", "training=vtrain", "model=gpt3_175b", "model.global_batch_size=1536",
           "parallel.tp=8", "parallel.pp=16", "parallel.dp=4"]
    assert granularity_level(from_config(_compose(big))) == "stage"   # 16 x 384 x 6 x 3 = 110,592 > 60,000
    fine_s, seg_s = (from_config(_compose(["model=tiny", f"emulator.granularity={g}"])) for g in ("fine", "segment"))
    fine, seg = (Program(s, KernelCosts(s.cluster, s.knobs.compute)) for s in (fine_s, seg_s))
    for a, b in ((fine.layer_fwd, seg.layer_fwd), (fine.layer_bwd, seg.layer_bwd)):
        total = lambda steps: sum(k.base_us for st in steps if hasattr(st, "kernels") for k in st.kernels)  # noqa
        assert total(b) == pytest.approx(total(a), rel=1e-12)
        assert [type(x) for x in a if not hasattr(x, "kernels")] == [type(x) for x in b if not hasattr(x, "kernels")]
    # forward: [LN .. proj] TP-AR [bda .. FC2] TP-AR; the last bias-dropout-add folds back into FC2 (coarse rule)
    assert [type(x).__name__ for x in seg.layer_fwd] == ["OpSpec", "TPAllReduce", "OpSpec", "TPAllReduce"]
    assert sum(isinstance(x, TPAllReduce) for x in seg.layer_bwd) == 2


def test_folded_kernel_keeps_the_work_and_the_spread_of_its_parts():
    from lumos.emulator.program import KSpec, folded

    a, b = KSpec("a", 30.0), KSpec("b", 40.0, jitter_scale=0.5)
    k = folded([a, b], a)
    assert k.name == "a" and k.base_us == 70.0
    assert k.jitter_scale == pytest.approx((30.0 ** 2 + 20.0 ** 2) ** 0.5 / 70.0)
    k3 = folded([a], a, copies=4, contended=0.25)   # 4 independent 30 us draws: sd 2x one draw's, on 4x the time
    assert (k3.base_us, k3.contended) == (120.0, 0.25)
    assert k3.jitter_scale == pytest.approx(0.5)


def test_stage_granularity_runs_a_stage_as_one_block_with_repeated_all_reduces():
    from lumos.emulator.costs import KernelCosts
    from lumos.emulator.program import OpSpec, Program, TPAllReduce, TPWait

    seg_s, st_s = (from_config(_compose(["model=tiny", f"emulator.granularity={g}"])) for g in ("segment", "stage"))
    seg, st = (Program(s, KernelCosts(s.cluster, s.knobs.compute)) for s in (seg_s, st_s))
    n = st_s.model.num_layers // st_s.pp
    assert (seg.layers_per_block, st.layers_per_block, n) == (1, 2, 2)
    base = lambda steps: sum(k.base_us for x in steps if isinstance(x, OpSpec) for k in x.kernels)  # noqa
    for one, block in ((seg.layer_fwd, st.layer_fwd), (seg.layer_bwd, st.layer_bwd)):
        assert base(block) == pytest.approx(n * base(one), rel=1e-12)
        assert sum(x.repeat for x in block if isinstance(x, TPAllReduce)) == \
            n * sum(isinstance(x, TPAllReduce) for x in one)
    assert [type(x).__name__ for x in st.layer_fwd] == ["OpSpec", "TPAllReduce"]
    assert not st.layer_fwd[1].overlap and st.layer_fwd[1].repeat == 4
    # backward: serial compute, then the overlapped all-reduces beside the wgrad GEMMs they overlap
    assert [type(x) for x in st.layer_bwd] == [OpSpec, TPAllReduce, OpSpec, TPWait]
    assert st.layer_bwd[1].overlap and st.layer_bwd[1].repeat == 4
    assert st.layer_bwd[2].kernels[0].contended == 1.0
    assert 0 < st.layer_bwd[0].kernels[0].contended < 1


def test_stage_granularity_emulates_close_to_coarse_with_one_block_per_micro_batch():
    common = ["model=tiny", "seed=2", "parallel.tp=2"]
    coarse, stage = (emulate(common + [f"emulator.granularity={g}"], progress=False) for g in ("coarse", "stage"))
    rec = stage.recorders[stage.ranks[0]]
    blocks = [n for _s, _e, cat, n, *_ in rec.cpu if cat == "user_annotation" and n.startswith("layer")
              and "/forward/" in n]
    m = stage.settings.model.num_microbatches
    assert sorted(blocks) == sorted(f"layers_0-1/forward/mb{i}" for i in range(m))
    tp = [x for x in rec.gpu if x[4] == TP_S]
    assert tp and all("AllReduce" in x[3] for x in tp)
    assert {x[7].get("Repeat") for x in tp if x[7]} >= {4}
    assert len(rec.gpu) < 0.5 * len(coarse.recorders[coarse.ranks[0]].gpu)
    assert abs(stage.iteration_us / coarse.iteration_us - 1) < 0.05


# -- multi-node physics: each switch moves the event it should ----------------------------------------------

QUIET = ["emulator.comm.jitter_sigma=0", "emulator.compute.jitter_sigma=0", "emulator.rank.slowness_sigma=0",
         "emulator.rank.straggler_prob=0", "emulator.peers.noise_sigma=0"]   # a transfer then takes its model time
# one pipeline stage, DP 4 over four 2-GPU hosts: rank 0's single gradient bucket is the only inter-host transfer
DP_ACROSS = ["model=tiny", "seed=0", "parallel.pp=1", "parallel.tp=2", "parallel.dp=4", "cluster.gpus_per_host=2"] + QUIET
# two stages on two 2-GPU hosts, no DP: the pipeline p2p crosses hosts
PP_ACROSS = ["model=tiny", "seed=0", "parallel.dp=1", "cluster.gpus_per_host=2"] + QUIET


def _dp_bucket(run):
    """Rank 0's DP gradient all-reduce kernel (stream 24): (name, duration us, bytes, costs)."""
    (g,) = [g for g in run.recorders[0].gpu if g[4] == DP_S]
    return g[3], g[1] - g[0], g[7]["In msg nelems"] * 2.0, run.state[1].costs


def test_nccl_tuner_model_picks_as_nccl_does():
    from lumos.emulator import nccl

    # NVLink pinned at 0.672 of its datasheet bandwidth (the first H100 fit): the intra-host part binds a
    # large message, where a protocol's share of the bandwidth tells; where the network binds instead
    # (NVLink at 0.74, seen in one of the H100 refits tried during the multi-node work), LL128 and Simple
    # tie on bandwidth within 0.1% and the pick is latency's
    s = from_config(_compose(["emulator.comm.algorithm=nccl", "++cluster.emulator.comm.nvlink_eff=0.6721"]))
    costs = CommCosts(s.cluster, s.knobs.comm, job_hosts=16)
    pick = costs.nccl_choice
    LL, SIMPLE = nccl.PROTOCOLS.index("LL"), nccl.PROTOCOLS.index("SIMPLE")
    # a scalar (the grad norm) over 16 hosts: the tree's 2 log2(16) = 8 network hops beat the ring's 2 x 15, with LL
    assert pick("allreduce", 4, 128, 16, 8) == ("TREE", LL)
    assert pick("allreduce", 4, 16, 16, 1) == ("TREE", LL)        # one GPU per host (a TP 8 layout's DP ring)
    # 1 GiB of gradients: the ring (it moves 2(n-1)/n of the message, the tree all of it twice), Simple
    assert pick("allreduce", 1 << 30, 128, 16, 8) == ("RING", SIMPLE)
    # inside one host the ring always wins; a tiny message takes LL, a large one Simple
    assert pick("allreduce", 4, 8, 1, 8) == ("RING", LL)
    assert pick("allreduce", 256 << 20, 8, 1, 8) == ("RING", SIMPLE)
    assert pick("allgather", 4, 128, 16, 8)[0] == "RING"           # no tree for all-gather
    # the pick is the fastest prediction
    args = dict(nvl_bw=costs.nvl, nvl_half=costs.nvl_half, net_bw=costs.nic_bw(0))
    for nbytes in (4, 1 << 16, 1 << 22, 1 << 28):
        algo, proto, t = nccl.choose("allreduce", nbytes, 128, 16, 8, **args)
        assert t == min(nccl.time_us("allreduce", a, p, nbytes, 128, 16, 8, **args)
                        for a in nccl.ALGORITHMS for p in range(3))
    # latency: the ring's grows with its length (2 network hops per extra host), the tree's with log2(hosts)
    ring = [nccl.latency_us("allreduce", "RING", LL, 8 * h, h, 8) for h in (8, 16)]
    tree = [nccl.latency_us("allreduce", "TREE", LL, 8 * h, h, 8) for h in (8, 16)]
    assert ring[1] - ring[0] == pytest.approx(2 * 8 * nccl.NET_HOP_US["RING"][LL] + 2 * 7 * 8 * 1.0)
    assert tree[1] - tree[0] == pytest.approx(2 * nccl.NET_HOP_US["TREE"][LL])
    # protocols: LL carries half the bandwidth, LL128 0.92, Simple all of it
    big = [nccl.transfer_us("allreduce", "RING", p, 1 << 30, 8, 1, 8, 1e5, 0.0, 1e4) for p in range(3)]
    assert big[0] == pytest.approx(2 * big[2]) and big[1] == pytest.approx(big[2] / 0.92)


def test_nccl_algorithm_times_the_cross_host_dp_allreduce_by_the_tuners_model():
    from lumos.emulator import nccl

    # the NICs pinned at 0.943 of line rate (the first H100 fit): at the second fit's 0.68 the bandwidth
    # term grows until Simple's 8% more of it outweighs LL128's lower hop latency, and the pick flips
    across = DP_ACROSS + ["++cluster.emulator.comm.nic_eff=0.9428"]
    ring_name, ring_us, nbytes, ring_costs = _dp_bucket(emulate(across, progress=False))
    name, us, nbytes2, costs = _dp_bucket(emulate(across + ["emulator.comm.algorithm=nccl"], progress=False))
    assert nbytes2 == nbytes
    assert ring_us == pytest.approx(ring_costs.collective("allreduce", nbytes, 4, 4, 1, 0), rel=1e-9)
    # ~19 MB over 4 hosts, one GPU each: NCCL's ring with LL128 (its lower network hop latency, 8.5 vs Simple's
    # 14 us x 1.4, outweighs the 8% of bandwidth it gives up), and the kernel is named after the pick
    algo, proto = costs.nccl_choice("allreduce", nbytes, 4, 4, 1)
    assert (algo, nccl.PROTOCOLS[proto]) == ("RING", "LL128")
    assert "AllReduce_Sum_bf16_RING_LL128" in name and "RING_SIMPLE" in ring_name
    expect = nccl.latency_us("allreduce", "RING", proto, 4, 4, 1) + \
        1.5 * nbytes / (costs.nic_bw(0) * nccl.RING_PROTO_EFF[proto])   # 2 (h-1)/h of the message on the NIC
    assert us == pytest.approx(expect, rel=1e-9)
    # longer than hier_ring's: about the same latency (14 + 6 x 8.5 us against 8 + 6 x 9 us), 8% less bandwidth
    assert us - ring_us == pytest.approx((14 + 6 * 8.5 - 8 - 6 * 9) + (ring_us - 62) * (1 / 0.92 - 1), rel=1e-6)


# DP 4 over two 2-GPU hosts: a ring with k = 2 GPUs on each host, the case where the two ring forms differ
DP_TWO_PER_HOST = ["model=tiny", "seed=0", "parallel.pp=1", "parallel.tp=1", "parallel.dp=4",
                   "cluster.gpus_per_host=2"] + QUIET


@pytest.mark.parametrize("algorithm", ["hier_ring", "nccl"])
def test_pipelined_ring_form_paces_the_cross_host_ring_by_its_slowest_link(algorithm):
    from lumos.emulator import nccl

    over = DP_TWO_PER_HOST + [f"emulator.comm.algorithm={algorithm}"]
    _n, serial_us, nbytes, costs = _dp_bucket(emulate(over, progress=False))
    _n, piped_us, nbytes2, piped = _dp_bucket(emulate(over + ["emulator.comm.ring_form=pipelined"], progress=False))
    assert nbytes2 == nbytes
    moved = 2 * 3 / 4 * nbytes                # a ring all-reduce over 4 ranks moves 2 (n-1)/n of the message
    if algorithm == "hier_ring":
        # serial: the NVLink phases over the host's 2 GPUs (2 x 1/2 of the message), then the ring of the
        # halves across the 2 hosts on each GPU's NIC (2 x 1/2 x 1/2); pipelined: 3/2 of the message at the
        # pace of the slower of NVLink and the two GPUs' NICs together; the latencies are the same
        latency = costs.c.nccl_fixed_us + 2 * costs.nvl_lat + 2 * costs.net_lat
        assert serial_us == pytest.approx(latency + nbytes / costs.nvl_bw(nbytes) + 0.5 * nbytes / costs.nic_bw(0),
                                          rel=1e-9)
        assert piped_us == pytest.approx(latency + max(moved / piped.nvl_bw(nbytes), moved / (2 * piped.nic_bw(0))),
                                         rel=1e-9)
    else:
        algo, proto = piped.nccl_choice("allreduce", nbytes, 4, 2, 2)
        eff = nccl.RING_PROTO_EFF[proto]
        assert algo == "RING"
        assert piped_us == pytest.approx(nccl.latency_us("allreduce", algo, proto, 4, 2, 2) + max(
            moved / (piped.nvl * eff) + (moved * piped.nvl_half / (nbytes * piped.nvl) if piped.nvl_half else 0.0),
            moved / (2 * piped.nic_bw(0) * eff)), rel=1e-9)
    # with 2 GPUs a host the flat ring is the slower: each of the two NICs carries 3/4 of the message, where
    # the hierarchy reduces inside the host first and sends 1/2 (with 4 or 8 a host the flat ring is faster)
    assert piped_us > serial_us


# FSDP over DP 8 on two 4-GPU hosts: every unit's all-gather is a ring with k = 4 GPUs on each host
FSDP_FOUR_PER_HOST = ["model=tiny", "seed=0", "parallel.pp=1", "parallel.tp=1", "parallel.dp=8",
                      "cluster.gpus_per_host=4", "training.dp_sharding=fsdp"] + QUIET


def _first_block_gather(run):
    """Rank 0's second forward all-gather (stream 40: a transformer block's parameters): (duration us, bytes, costs)."""
    g = [g for g in run.recorders[0].gpu if g[4] == 40 and "AllGather" in g[3]][1]
    return g[1] - g[0], g[7]["Out msg nelems"] * 2.0, run.state[1].costs


def test_gather_ring_form_paces_fsdp_all_gathers_across_hosts_as_nccl_models_its_ring():
    # default: all-gathers across hosts pipelined (NCCL's model of its ring), whatever `ring_form` says of all-reduce
    piped_us, nbytes, piped = _first_block_gather(emulate(FSDP_FOUR_PER_HOST, progress=False))
    serial_us, nbytes2, serial = _first_block_gather(
        emulate(FSDP_FOUR_PER_HOST + ["emulator.comm.gather_ring_form=serial"], progress=False))
    allreduce_only_us, _b, _c = _first_block_gather(
        emulate(FSDP_FOUR_PER_HOST + ["emulator.comm.ring_form=pipelined", "emulator.comm.gather_ring_form=serial"],
                progress=False))
    assert nbytes2 == nbytes == 3152384 * 2
    assert piped.pipelined_kinds == {"allgather", "reduce_scatter"} and serial.pipelined_kinds == frozenset()
    latency = piped.c.nccl_fixed_us + 3 * piped.nvl_lat + 1 * piped.net_lat   # 3 NVLink steps, 1 across the 2 hosts
    moved = 7 / 8 * nbytes          # an all-gather over 8 ranks moves (n-1)/n of the gathered buffer
    # pipelined: the slower of the NVLink bus and the host's 4 NICs together carries it all, links at once
    assert piped_us == pytest.approx(latency + max(moved / piped.nvl_bw(nbytes), moved / (4 * piped.nic_bw(0))),
                                     rel=1e-9)
    assert piped_us == pytest.approx(83.2358, abs=1e-3)
    # serial: the NVLink phase over the host's 4 GPUs (3/4 of the buffer), then the ring of quarters across the
    # 2 hosts on each GPU's NIC (1/2 x 1/4), the two added
    assert serial_us == pytest.approx(latency + 3 / 4 * nbytes / serial.nvl_bw(nbytes)
                                      + 1 / 2 * nbytes / 4 / serial.nic_bw(0), rel=1e-9)
    assert serial_us == pytest.approx(98.6877, abs=1e-3)
    # `ring_form` is all-reduce's: it does not move a gather
    assert allreduce_only_us == serial_us


def test_shared_nics_slow_the_dp_allreduce_only_when_the_host_has_fewer_nics_than_flows():
    _n, rail_us, nbytes, costs = _dp_bucket(emulate(DP_ACROSS + ["cluster.nics_per_host=1"], progress=False))
    _n, shared_us, _b, _c = _dp_bucket(emulate(DP_ACROSS + ["cluster.nics_per_host=1", "emulator.comm.placement=shared"],
                                               progress=False))
    # both GPUs of a host run their DP ring (TP rank 0's, emulated, and TP rank 1's, its stand-in) at once:
    # on rails each has a NIC, pooled they share the host's one NIC and the inter-host phase takes twice as long
    assert rail_us == pytest.approx(costs.collective("allreduce", nbytes, 4, 4, 1, 0), rel=1e-9)
    assert shared_us == pytest.approx(costs.collective("allreduce", nbytes, 4, 4, 1, 1.0), rel=1e-9)
    assert shared_us > 1.8 * rail_us
    # as many NICs as GPUs: a pool shared evenly gives every flow one NIC, as rails do
    _n, even_us, _b, _c = _dp_bucket(emulate(DP_ACROSS + ["emulator.comm.placement=shared"], progress=False))
    assert even_us == pytest.approx(rail_us, rel=1e-12)


def test_shared_placement_counts_the_gpus_of_a_host_that_leave_it():
    topo = Topology(2, 4, 1, 4)          # 2 hosts of 4 GPUs: stages 0-1 on host 0, stages 2-3 on host 1
    topo.set_emulated(topo.stage_reps())  # ranks 0, 2, 4, 6
    # the stage 1 -> 2 channel leaves host 0 from both TP ranks of stage 1; rank 2 stands for both
    assert topo.copies_on_host(topo.pp_channel(2, 4), 2) == (2, 1)
    assert topo.copies_on_host(topo.pp_channel(0, 2), 0) == (0, 0)   # stage 0 -> 1 stays inside the host
    topo = Topology(2, 2, 4, 8)
    topo.set_emulated(topo.stage_reps())
    assert topo.copies_on_host(topo.dp_group(0), 0) == (8, 1)       # a stage fills the host: 8 DP rings at once


def test_p2p_scatter_gather_sends_a_tp_th_and_all_gathers_it_over_nvlink():
    plain = emulate(PP_ACROSS, progress=False)
    sg = emulate(PP_ACROSS + ["emulator.schedule.p2p_scatter_gather=true"], progress=False)
    s = plain.settings.model
    act = s.seq_length * s.micro_batch_size * s.hidden            # elements of one activation
    costs = sg.state[1].costs
    for run, elems in ((plain, act), (sg, act // 2)):
        rec = run.recorders[0]
        p2p = [g for g in rec.gpu if g[4] in (28, 32)]
        assert {g[7]["In msg nelems"] or g[7]["Out msg nelems"] for g in p2p} == {elems}
        # a send/recv that did not wait for its partner lasts its transfer across hosts
        assert min(g[1] - g[0] for g in p2p) == pytest.approx(costs.collective("recv", elems * 2.0, 2, 2, 1, 0), rel=1e-9)
    # the receiver (stage 1, rank 2) gathers each forward activation, the sender (rank 0) each gradient
    for r in (0, 2):
        ag = [g for g in sg.recorders[r].gpu if "AllGather" in g[3]]
        recvs = [g for g in sg.recorders[r].gpu if g[4] == 32]
        assert len(ag) == len(recvs) == s.num_microbatches and all(g[4] == TP_S for g in ag)
        a = ag[0][7]
        assert (a["Collective name"], a["In msg nelems"], a["Out msg nelems"], a["Group size"]) == \
            ("_allgather_base", act // 2, act, 2)
        assert all(g[0] >= rv[1] for g, rv in zip(sorted(ag), sorted(recvs)))     # after its recv
        # inside the host: NVLink, no peer waiting (quiet run)
        assert ag[0][1] - ag[0][0] == pytest.approx(costs.collective("allgather", act * 2.0, 2, 1, 2, 0), rel=1e-9)
    assert not any("AllGather" in g[3] for g in plain.recorders[0].gpu)


def test_grad_norm_over_the_model_parallel_group_synchronises_the_stages(plain):
    mp = emulate(TINY + ["emulator.schedule.grad_norm_group=model_parallel"], progress=False)

    def norm_allreduce(run, r):
        rec = run.recorders[r]
        start = min(g[0] for g in rec.gpu if "L2Norm" in g[3])
        return next(g for g in sorted(rec.gpu) if g[0] >= start and "AllReduce" in g[3])

    first, last = 0, 8     # tiny 2x2x4 on 8-GPU hosts: stage 0 on host 0, stage 1 on host 1
    tp0, tp1 = norm_allreduce(plain, first), norm_allreduce(plain, last)
    mp0, mp1 = norm_allreduce(mp, first), norm_allreduce(mp, last)
    assert tp1[7]["Process Group Ranks"] == "[8, 9]" and tp1[4] == TP_S
    assert (mp1[7]["Process Group Ranks"], mp1[7]["Group size"], mp1[7]["Process Group Description"]) == \
        ("[0, 1, 8, 9]", 4, "mp_group")
    assert mp1[4] == 36 and "TREE" in mp1[3]      # its own stream; a scalar across 2 hosts takes the tree
    # TP only: the last stage (done with backward first in 1F1B) finishes its norm a millisecond before stage 0.
    # Model-parallel: it waits for stage 0 there, both ends meet, and its kernel grows by that wait.
    assert tp1[1] < tp0[1] - 500.0
    assert mp1[1] == pytest.approx(mp0[1], abs=1e-6)
    assert mp1[1] - mp1[0] > (tp1[1] - tp1[0]) + 500.0
    pgs = lambda run: [pg["ranks"] for pg in run.metadata(last)["distributedInfo"]["pg_config"]]  # noqa: E731
    assert [0, 1, 8, 9] in pgs(mp) and [0, 1, 8, 9] not in pgs(plain)


@pytest.mark.parametrize("level", ["coarse", "segment"])
def test_coarse_granularity_keeps_the_embedding_kernels(level):
    """The embedding block has no GEMM to fold its element-wise kernels into: at coarse granularity it
    stays as it is (its lookup and gradient kernels were dropped before, and their time with them)."""
    from lumos.emulator.costs import KernelCosts
    from lumos.emulator.program import Program

    fine_s, lvl_s = (from_config(_compose(["model=tiny", f"emulator.granularity={g}"])) for g in ("fine", level))
    fine, lvl = (Program(s, KernelCosts(s.cluster, s.knobs.compute)) for s in (fine_s, lvl_s))
    names = lambda steps: [k.name for st in steps if hasattr(st, "kernels") for k in st.kernels]  # noqa: E731
    base = lambda steps: sum(k.base_us for st in steps if hasattr(st, "kernels") for k in st.kernels)  # noqa: E731
    for a, b in ((fine.embed_fwd, lvl.embed_fwd), (fine.embed_bwd, lvl.embed_bwd)):
        assert base(b) == pytest.approx(base(a), rel=1e-12) and base(a) > 0
    assert any("indexSelectLargeIndex" in n for n in names(lvl.embed_fwd))
    assert any("compute_grad_weight" in n for n in names(lvl.embed_bwd))
