"""Predictions from a base with torchtitan's per-layer selective AC (EMULATED base, `training.recompute=
selective_layer`): a PP or layer change checkpoints the every-N-th blocks of each new stage, so the rebuild copies
a checkpointed layer's backward there and a plain one elsewhere; and the memory each checkpointing keeps."""

from __future__ import annotations

import pytest

from lumos.emulator import emulate, write_result
from lumos.graph.model import TaskKind
from lumos.model.checkpointing import ac_period, checkpointed
from lumos.model.structure import ModelShape
from lumos.predict.memory import GIB, MemorySettings, activation_bytes_per_layer, stage_memory
from lumos.predict.whatif import base_plan, memory_of, transform
from lumos.trace import load_run

QUIET = ["emulator.comm.jitter_sigma=0", "emulator.compute.jitter_sigma=0", "emulator.rank.slowness_sigma=0",
         "emulator.rank.straggler_prob=0", "emulator.peers.noise_sigma=0"]
SAC = ["training=torchtitan", "training.recompute=selective_layer", "training.ac_every=2", *QUIET]


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory):
    d = tmp_path_factory.mktemp("layer_sac") / "base"
    write_result(emulate(["model=tiny", "emulator.granularity=fine", "parallel.pp=1", "parallel.dp=2", *SAC],
                         progress=False), d)
    return base_plan(load_run(d))


def _backward_mms(plan) -> dict:
    """(rank, layer) -> matmuls of the layer's first backward: 8 plain (dgrad + wgrad of 4 GEMMs), 12 with its
    forward's 4 re-run."""
    out = {}
    for b in plan.st.blocks:
        if b.kind == "layer" and b.phase == "backward" and b.mb == 0:
            cpu = b.tasks[plan.graph.kind[b.tasks] == int(TaskKind.CPU)]
            out[(b.rank, b.layer)] = sum(plan.st.op_name[t] == "aten::mm" for t in cpu)
    return out


def test_the_base_reads_as_every_second_block():
    assert ac_period([[0, 1, 2, 3]], frozenset({1, 3})) == 2
    assert ac_period([[0, 1, 2], [3, 4, 5]], frozenset({1, 4})) == 2
    assert ac_period([[0, 1, 2, 3]], frozenset({0, 1, 2, 3})) == 1 and ac_period([[0, 1]], frozenset()) == 0
    assert ac_period([[0, 1, 2, 3]], frozenset({0, 3})) is None     # no N explains it
    assert checkpointed([3, 4, 5], 2) == {4}


def test_a_layer_or_pp_change_checkpoints_each_new_stage_s_every_second_block(tiny_base):
    """Base: 4 layers on one stage, layers 1 and 3 checkpointed. 6 layers: 1, 3, 5 (layer 4 takes base layer 0,
    layer 5 base layer 1); 5 layers: 1, 3; PP 2 of 6 layers (3 a stage): stage 0 its second block, layer 1,
    stage 1 its second, layer 4 -- not 3 and 5, which base layers 3 mod 4 and 5 mod 4 would give."""
    assert sorted(tiny_base.st.recomputed) == [1, 3]
    assert _backward_mms(tiny_base) == {(0, 0): 8, (0, 1): 12, (0, 2): 8, (0, 3): 12}
    assert _backward_mms(transform(tiny_base, layers=6)) == {(0, l): 12 if l % 2 else 8 for l in range(6)}
    assert _backward_mms(transform(tiny_base, layers=5)) == {(0, l): 12 if l in (1, 3) else 8 for l in range(5)}
    piped = _backward_mms(transform(tiny_base, pp=2, layers=6))
    assert piped == {(0, 0): 8, (0, 1): 12, (0, 2): 8, (4, 3): 8, (4, 4): 12, (4, 5): 8}


# memory: a small Llama-style layer, hand-computed bytes (2-byte activations)
LLAMA = ModelShape(hidden=64, ffn=128, seq=32, micro_batch=2, vocab=256, heads=4, tp=2, kv_heads=2, gated=True)


def test_selective_op_keeps_the_input_every_other_matmul_and_attention():
    """Per token on a TP 2 rank: the input 64, wq 32, wv 16, w1 64, w2's partial sum 64 (the 1st, 3rd, 5th and
    7th matmuls), attention's output 32: 272 elements x 2 B, plus the fp32 log-sum-exp of 2 heads (8 B);
    64 tokens. GPT's fused layer (h 64, f 256): input 64, QKV 96, FC1 128, attention 32."""
    m = MemorySettings(recompute="selective_op")
    assert activation_bytes_per_layer(32, 2, 64, 4, 2, m, LLAMA) == 64 * (272 * 2 + 8) == 35328
    gpt = ModelShape(hidden=64, ffn=256, seq=32, micro_batch=2, vocab=256, heads=4, tp=2)
    assert activation_bytes_per_layer(32, 2, 64, 4, 2, m, gpt) == 64 * (320 * 2 + 8)


def test_selective_layer_keeps_inputs_of_checkpointed_blocks_and_all_of_the_others():
    """5 layers, N = 2: 2 checkpointed blocks keep their input (2 s b h = 8192 B), 3 keep everything:
    s b h (10 + (4 + 4 r + 6 f / h) / t) = 4096 x (10 + 18 / 2) = 77824 B each."""
    m = MemorySettings(recompute="selective_layer", ac_every=2, workspace_gib=0.0)
    got = stage_memory(LLAMA, 5, 0, 1, 1, 1, m, ndigits=None)["activations_gib"] * GIB
    assert got == pytest.approx(2 * 8192 + 3 * 77824, rel=1e-12)


@pytest.mark.parametrize("kw, message", [
    ({"recompute": "selective_layer"}, "ac_every .* must be an integer >= 1 with recompute=selective_layer"),
    ({"recompute": "full", "ac_every": 2}, "ac_every .* 0 otherwise, got ac_every=2 with recompute=full"),
    ({"recompute": "selective_ops"}, "recompute must be one of none, selective, full, selective_op, selective_layer"),
])
def test_memory_settings_refuse_a_checkpointing_they_cannot_read(kw, message):
    with pytest.raises(ValueError, match=message):
        MemorySettings.from_profile(None, **kw)


def test_the_base_s_layer_checkpointing_is_the_memory_default(tiny_base):
    """The tiny base's recompute ranges say every second block: the memory model takes selective_layer, N = 2,
    unless told otherwise; a target of 6 layers over 2 stages holds one checkpointed block a stage."""
    doc = memory_of(tiny_base)
    assert (doc["assumptions"]["recompute"], doc["assumptions"]["ac_every"]) == ("selective_layer", 2)
    assert memory_of(tiny_base, {"recompute": "full"})["assumptions"]["recompute"] == "full"
    with pytest.raises(ValueError, match="ac_every=3 with recompute=full"):
        memory_of(tiny_base, {"recompute": "full", "ac_every": 3})
    out = transform(tiny_base, pp=2, layers=6)
    sh = out.shape
    full, none = (activation_bytes_per_layer(sh.seq, sh.micro_batch, sh.hidden, sh.heads, sh.tp,
                                             MemorySettings(recompute=r), sh) for r in ("full", "none"))
    stages = memory_of(out)["per_stage"]
    assert [st["inflight_microbatches"] for st in stages] == [2, 1]
    assert [st["activations_gib"] for st in stages] == [round((full + 2 * none) * k / GIB, 3) for k in (2, 1)]
