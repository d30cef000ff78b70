"""`training=torchtitan` (EMULATED): FSDP2 with torchtitan's reshard policy, TP inside the host, full activation
checkpointing; and a DP change predicted from such a base against the emulator."""

from __future__ import annotations

from lumos.emulator import emulate, write_result
from lumos.predict.prediction import predict
from lumos.trace.run import read_manifest
from lumos.trace import load_run

QUIET = ["emulator.comm.jitter_sigma=0", "emulator.compute.jitter_sigma=0", "emulator.rank.slowness_sigma=0",
         "emulator.rank.straggler_prob=0", "emulator.peers.noise_sigma=0"]
BASE = ["model=llama3_8b", "model.num_layers=4", "training=torchtitan", "parallel.tp=2", "emulator.granularity=fine",
        "model.microbatch_rule=fixed", "model.num_microbatches=2", *QUIET]


def _names(result, rank=None):
    rec = result.recorders[result.ranks[0] if rank is None else rank]
    return [n for _, _, cat, n, _, _ in rec.cpu]


def test_the_reshard_policy_follows_pipeline_parallelism():
    """torchtitan's "default" reshard_after_forward: FULL_SHARD without PP (the backward gathers again),
    SHARD_GRAD_OP with it (no gather in the backward); every block's forward recomputed in its backward."""
    flat = emulate([*BASE, "parallel.pp=1", "parallel.dp=4"], progress=False)
    piped = emulate([*BASE, "parallel.pp=2", "parallel.dp=2"], progress=False)
    assert (flat.settings.training.dp_sharding, piped.settings.training.dp_sharding) == ("fsdp", "fsdp_grad_op")
    gathers = {k: sum(n.startswith("FSDP::all_gather") for n in _names(r)) for k, r in (("flat", flat), ("piped", piped))}
    # flat: 4 blocks + the root, gathered before each of 2 forwards and again for each backward: 2 x (5 + 5);
    # stage 0 of the pipeline: 2 blocks + the root, before each forward only: 2 x 3
    assert gathers == {"flat": 20, "piped": 6}
    assert sum("/recompute/" in n for n in _names(flat)) == 4 * 2


def test_a_dp_change_of_a_torchtitan_base(tmp_path):
    runs = {}
    for dp in (2, 4):
        d = tmp_path / f"dp{dp}"
        write_result(emulate([*BASE, "parallel.pp=1", f"parallel.dp={dp}"], progress=False), d)
        runs[dp] = d
    doc = predict(load_run(runs[2]), {"dp": 4}, actual_tables=load_run(runs[4]), actual_manifest=read_manifest(runs[4]))
    assert doc["base_config"]["dp_sharding"] != "none" and abs(doc["error_pct"]) < 5.0, doc["error_pct"]


def _recompute_ops(result, layer: int = 0, mb: int = 0) -> list[str]:
    """The ops inside one layer's recompute range of the first emulated rank, in order."""
    rec = result.recorders[result.ranks[0]]
    rng = next((t0, t1, tid) for t0, t1, cat, n, tid, _ in rec.cpu if n == f"layer_{layer}/recompute/mb{mb}")
    return [n for t0, t1, cat, n, tid, _ in rec.cpu if tid == rng[2] and rng[0] <= t0 and t1 <= rng[1]
            and cat == "cpu_op" and not n.startswith("layer_")]


def test_selective_ac_re_runs_all_but_attention_and_every_other_matmul():
    """training.recompute=selective_op (torchtitan's SelectiveAC): of the forward's four matmuls (QKV, attention
    projection, FC1, FC2) the second and fourth re-run, attention does not, the element-wise ops and TP
    all-reduces do; the iteration lies between no recompute and full recompute."""
    runs = {r: emulate([*BASE, "parallel.pp=1", "parallel.dp=2", f"training.recompute={r}"], progress=False)
            for r in ("none", "selective_op", "full")}
    ops = _recompute_ops(runs["selective_op"])
    assert [n for n in ops if n in ("aten::mm", "aten::_flash_attention_forward")] == ["aten::mm", "aten::mm"]
    assert ops.count("c10d::allreduce_") == 2 and ops.count("aten::rms_norm") == 2 and "aten::silu" in ops
    full = _recompute_ops(runs["full"])
    assert full.count("aten::mm") == 4 and full.count("aten::_flash_attention_forward") == 1
    assert not any("/recompute/" in n for n in _names(runs["none"]))
    it = {r: res.iteration_us for r, res in runs.items()}
    assert it["none"] < it["selective_op"] < it["full"]


def test_selective_ac_is_refused_with_experts():
    import pytest

    from lumos.emulator.settings import SettingsError

    with pytest.raises(SettingsError, match="mixture-of-experts with training.recompute=selective_op is not emulated"):
        emulate(["model=mixtral_8x7b", "model.num_layers=2", "training.recompute=selective_op", "parallel.ep=2",
                 "parallel.dp=2"], progress=False)
