"""The emulator's switchable physics each change what they should (issue 11 item 2)."""

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
    (["training.recompute=selective"], "training.recompute must be 'none' or 'full'"),
    (["training.dp_allreduce=sometimes"], "training.dp_allreduce must be"),
    (["++cluster.emulator.comm.nic_efff=0.5"], "cluster.emulator.comm.nic_efff is not an emulator knob"),
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
    (["cluster=a100_vtrain", "training=vtrain", "model=gpt3_175b", "model.global_batch_size=1024",
      "parallel.tp=8", "parallel.pp=8", "parallel.dp=8"], True),                   # 8 x 128 x 12 x 3 = 36,864
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
