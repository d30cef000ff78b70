"""torchtitan's per-layer selective AC (EMULATED): `training.recompute=selective_layer` with `training.ac_every=N`
checkpoints the N-th, 2N-th, ... block each rank builds (torchtitan `_apply_layer_sac`, a process-wide count
tested after its increment), the others run without recompute."""

from __future__ import annotations

import pytest

from lumos.emulator import emulate
from lumos.emulator.settings import SettingsError

QUIET = ["emulator.comm.jitter_sigma=0", "emulator.compute.jitter_sigma=0", "emulator.rank.slowness_sigma=0",
         "emulator.rank.straggler_prob=0", "emulator.peers.noise_sigma=0"]
TINY = ["model=tiny", "training=torchtitan", "emulator.granularity=fine", *QUIET]


def _recomputed(result) -> dict:
    """rank -> the recompute ranges it ran, in order."""
    return {r: [n for *_, n, _, _ in result.recorders[r].cpu if "/recompute/" in n] for r in result.ranks}


def test_every_second_block_of_one_stage_is_checkpointed():
    """4 layers, one stage, N = 2: the second and fourth blocks (layers 1 and 3), not layers 0 and 2; each
    micro-batch's backward of those layers re-runs their forward (all four matmuls and the flash attention)."""
    r = emulate([*TINY, "parallel.pp=1", "training.recompute=selective_layer", "training.ac_every=2"], progress=False)
    assert (r.settings.model.num_layers, r.settings.model.num_microbatches) == (4, 2)
    assert _recomputed(r) == {r.ranks[0]: ["layer_3/recompute/mb0", "layer_1/recompute/mb0",
                                           "layer_3/recompute/mb1", "layer_1/recompute/mb1"]}
    rec = r.recorders[r.ranks[0]]
    t0, t1, tid = next((a, b, t) for a, b, c, n, t, _ in rec.cpu if n == "layer_1/recompute/mb0")
    inside = [n for a, b, c, n, t, _ in rec.cpu if t == tid and t0 <= a and b <= t1 and c == "cpu_op"]
    assert inside.count("aten::mm") == 4 and inside.count("aten::_flash_attention_forward") == 1


def test_each_pipeline_stage_counts_its_own_blocks():
    """6 layers over 2 stages (3 each), N = 2: stage 0 wraps its second block (layer 1), stage 1 its second
    (layer 4), not the model's every second layer (1, 3, 5); N = 3 on one stage: layers 2 and 5."""
    piped = emulate([*TINY, "model.num_layers=6", "parallel.pp=2", "parallel.dp=2",
                     "training.recompute=selective_layer", "training.ac_every=2"], progress=False)
    layers = {r: sorted({n.split("/")[0] for n in ns}) for r, ns in _recomputed(piped).items()}
    assert layers == {piped.ranks[0]: ["layer_1"], piped.ranks[1]: ["layer_4"]}
    third = emulate([*TINY, "model.num_layers=6", "parallel.pp=1", "training.recompute=selective_layer",
                     "training.ac_every=3"], progress=False)
    assert sorted({n.split("/")[0] for n in _recomputed(third)[third.ranks[0]]}) == ["layer_2", "layer_5"]


def test_every_block_is_full_recompute_and_the_iteration_lies_between():
    """N = 1 wraps every block: the same trace as recompute=full; N = 2 lies between none and full."""
    runs = {k: emulate([*TINY, "parallel.pp=1", *extra], progress=False)
            for k, extra in (("none", ["training.recompute=none"]), ("full", ["training.recompute=full"]),
                             ("every1", ["training.recompute=selective_layer", "training.ac_every=1"]),
                             ("every2", ["training.recompute=selective_layer", "training.ac_every=2"]))}
    it = {k: r.iteration_us for k, r in runs.items()}
    assert it["every1"] == it["full"] and it["none"] < it["every2"] < it["full"], it
    assert _recomputed(runs["every1"]) == _recomputed(runs["full"])


def _recompute_compute_us(result) -> float:
    """GPU time of the compute kernels launched inside the first emulated rank's first recompute range."""
    rec = result.recorders[result.ranks[0]]
    t0, t1, tid = next((a, b, t) for a, b, c, n, t, _ in rec.cpu if n.endswith("/recompute/mb0"))
    corr = {c for a, b, n, t, c, _ in rec.rt if t == tid and t0 <= a and b <= t1}
    return sum(b - a for a, b, cat, n, _s, c, _e, _ in rec.gpu
               if c in corr and cat == "kernel" and not n.startswith("nccl"))


def test_stage_granularity_recomputes_the_checkpointed_share_of_a_block():
    """At granularity=stage one block holds the stage's 4 layers (`layers_0-3/recompute/mbJ`); with N = 2 it
    re-runs two layers' forward: exactly half of full recompute's compute (no jitter)."""
    stage = [o for o in TINY if o != "emulator.granularity=fine"] + ["emulator.granularity=stage", "parallel.pp=1"]
    us = {k: _recompute_compute_us(emulate([*stage, *extra], progress=False))
          for k, extra in (("full", ["training.recompute=full"]),
                           ("every2", ["training.recompute=selective_layer", "training.ac_every=2"]))}
    assert us["every2"] == pytest.approx(us["full"] / 2, rel=1e-12) and us["full"] > 300.0, us


@pytest.mark.parametrize("extra, message", [
    (["training.recompute=selective_layer"], "training.recompute=selective_layer needs training.ac_every"),
    (["training.recompute=selective_layer", "training.ac_every=0"], "training.ac_every must be an integer >= 1"),
    (["training.recompute=selective_layer", "training.ac_every=1.5"], "training.ac_every must be an integer >= 1"),
    (["training.recompute=selective_layer", "training.ac_every=two"], "training.ac_every must be an integer >= 1"),
    (["training.recompute=full", "training.ac_every=2"],
     "training.ac_every=2 needs training.recompute=selective_layer"),
])
def test_ac_every_is_refused_where_it_means_nothing(extra, message):
    with pytest.raises(SettingsError, match=message):
        emulate([*TINY, "parallel.pp=1", *extra], progress=False)
