"""The layer-annotation contract (`lumos.trace.annotation`): one grammar, written and read alike.

Capture, the emulator and the model's layer finders write the names; `lumos.model.structure`
and `dp_flavour` read them. These tests pin the names each writer gives, the names that are not
annotations, that the reader's `ANN` is the regex the model has always used, and that the
emulator and a capture of the same model write names the reader parses to the same blocks.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings, strategies as st

from lumos.trace.annotation import (ANN, ANNOTATION, EMBEDDING, HEAD, PHASES, Annotation, layer_block, parse,
                                    range_name)

# the model reader's regex before the contract had a home of its own (lumos/model/structure.py)
OLD_ANN = re.compile(r"^(?:layer_(\d+)|(embedding)|(head))/(forward|backward)/mb(\d+)$")

layers = st.integers(min_value=0, max_value=10_000)
spans = st.tuples(layers, st.integers(min_value=1, max_value=200)).map(lambda t: layer_block(t[0], t[0] + t[1]))
blocks = st.one_of(layers.map(layer_block), spans, st.sampled_from([EMBEDDING, HEAD]))
phases = st.sampled_from(PHASES)
micro_batches = st.integers(min_value=0, max_value=100_000)


@given(blocks, phases, micro_batches)
def test_parse_reads_back_what_range_name_writes(block, phase, mb):
    name = range_name(block, phase, mb)
    a = parse(name)
    assert a == Annotation(block, phase, mb)
    assert a.name == name
    assert ANNOTATION.match(name)
    assert a.kind in ("layer", "layers", "embedding", "head")
    if a.kind in ("layer", "layers"):
        assert block == layer_block(a.first, a.last) and a.layers == range(a.first, a.last + 1)
        assert (a.first == a.last) == (a.kind == "layer")
    else:
        assert (a.first, a.last, a.layers) == (-1, -1, range(0))


# text near the grammar: the reader must accept exactly what the old regex accepted
near = st.text(alphabet=list("layer_sbkwdfohmcpute/-0123456789 #\n"), max_size=30)
pieces = st.lists(st.sampled_from(["layer_", "layers_", "embedding", "head", "forward", "backward", "recompute", "/",
                                   "/mb", "mb", "-", "0", "3", "12", "٣", "\n", " ", "x"]), max_size=8).map("".join)


@settings(max_examples=500)
@given(st.one_of(near, pieces))
def test_the_model_readers_blocks_are_what_its_old_regex_matched(name):
    old, a = OLD_ANN.match(name), parse(name)
    assert bool(ANN.match(name)) == bool(old)
    assert bool(old) == (a is not None and a.is_block)
    if old:   # lumos.model.structure's block and dp_flavour's unit, as they were read before
        assert a.kind == ("layer" if old.group(1) is not None else old.group(2) or old.group(3))
        assert a.first == (int(old.group(1)) if old.group(1) is not None else -1)
        assert (a.phase, a.micro_batch) == (old.group(4), int(old.group(5)))
        assert a.block == (f"layer_{old.group(1)}" if old.group(1) is not None else old.group(2) or old.group(3))


def test_ann_is_the_regex_the_model_always_used():
    assert ANN.pattern == OLD_ANN.pattern
    from lumos.model import structure
    assert structure.ANN is ANN


@pytest.mark.parametrize("name, block, phase, mb", [
    # capture (lumos.capture.gpt, ModuleAnnotator) and the model's layer finders
    ("layer_0/forward/mb0", "layer_0", "forward", 0),
    ("layer_11/backward/mb3", "layer_11", "backward", 3),
    ("embedding/forward/mb1", "embedding", "forward", 1),
    ("embedding/backward/mb0", "embedding", "backward", 0),
    ("head/forward/mb2", "head", "forward", 2),
    ("head/backward/mb0", "head", "backward", 0),
    # the emulator: recompute inside a checkpointed layer's backward, a stage's layers as one block
    ("layer_7/recompute/mb1", "layer_7", "recompute", 1),
    ("layers_6-11/forward/mb0", "layers_6-11", "forward", 0),
    ("layers_0-1/backward/mb31", "layers_0-1", "backward", 31),
    ("layers_2-3/recompute/mb2", "layers_2-3", "recompute", 2),
])
def test_names_the_writers_give(name, block, phase, mb):
    a = parse(name)
    assert a == Annotation(block, phase, mb) and a.name == name
    assert range_name(block, phase, mb) == name
    assert a.is_block == (phase != "recompute" and not block.startswith("layers_"))


def test_layer_blocks():
    assert layer_block(7) == layer_block(7, 7) == "layer_7"
    assert layer_block(6, 11) == "layers_6-11"
    a = parse("layers_6-11/forward/mb0")
    assert (a.kind, a.first, a.last, list(a.layers)) == ("layers", 6, 11, list(range(6, 12)))
    assert (parse("layer_03/backward/mb01").first, parse("layer_03/backward/mb01").micro_batch) == (3, 1)


@pytest.mark.parametrize("name", [
    "ProfilerStep#3", "layer_norm", "nn.Module: Block_0", "forward", "backward", "optimizer", "zero_grad",
    "grad_bucket_3/reduce", "Optimizer.step#AdamW.step", "FSDP::pre_forward (layers.3)", "layers.3",
    "layer_3", "layer_3/forward", "layer_3/forward/mb", "layer_3/forward/3", "layer_/forward/mb0",
    "layer_-1/forward/mb0", "Layer_3/forward/mb0", "layer_3/Forward/mb0", "layer_3/optimizer/mb0",
    "layers_3/forward/mb0", "layers_3-/forward/mb0", "layer_3-4/forward/mb0", "xlayer_3/forward/mb0",
    "layer_3/forward/mb0 ", " layer_3/forward/mb0", "layer_3/forward/mb0/x", "embeddings/forward/mb0",
    "lm_head/forward/mb0", "head/forward/mb-1", "",
])
def test_names_that_are_not_annotations(name):
    assert parse(name) is None
    assert ANN.match(name) is None


def test_range_name_refuses_a_phase_outside_the_contract():
    with pytest.raises(ValueError, match="phase"):
        range_name("layer_0", "optimizer", 0)


def _annotations(names) -> set[Annotation]:
    return {a for a in map(parse, names) if a is not None}


def test_the_emulator_and_a_capture_of_the_same_model_write_the_same_blocks():
    """The tiny model (4 layers, 4 micro-batches) emulated on 2 pipeline stages and captured on one
    CPU process by `lumos capture gpt`'s model: every rank's ranges together are the capture's."""
    torch = pytest.importorskip("torch")
    from lumos.capture.gpt import GPTConfig, build_model
    from lumos.emulator import emulate

    result = emulate(["model=tiny", "seed=3"], progress=False)
    emulated = {str(e["name"]) for r in result.ranks for e in result.events(r)
                if e.get("cat") == "user_annotation"}
    ann = _annotations(emulated)
    layers, mbs = max(a.last for a in ann) + 1, max(a.micro_batch for a in ann) + 1
    assert (layers, mbs) == (4, 4)

    torch.manual_seed(0)
    cfg = GPTConfig(layers=layers, hidden=32, ffn=64, heads=2, seq=8, micro_batch=1, vocab=64)
    model = build_model(cfg)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for mb in range(mbs):
            idx = torch.randint(cfg.vocab, (cfg.micro_batch, cfg.seq))
            model(idx, idx, mb=mb).backward()
    captured = {e.name for e in prof.events()}

    want = {Annotation(b, p, m) for b in [EMBEDDING, HEAD] + [layer_block(L) for L in range(layers)]
            for p in ("forward", "backward") for m in range(mbs)}
    assert _annotations(captured) == ann == want
    # ... and the model reads every one of them as a block of its own, from either source
    assert all(a.is_block and ANN.match(a.name) for a in ann)
    assert {n for n in emulated if ANN.match(n)} == {n for n in captured if ANN.match(n)} == {a.name for a in want}


def test_the_emulators_other_blocks_parse_but_are_no_blocks_of_their_own():
    """Recomputed forwards and a stage's layers run as one block (`granularity=stage`)."""
    from lumos.emulator import emulate

    def names(*over):
        r = emulate(["model=tiny", "seed=3", *over], progress=False)
        return _annotations(str(e["name"]) for k in r.ranks for e in r.events(k) if e.get("cat") == "user_annotation")

    recompute = {a for a in names("training.recompute=full") if a.phase == "recompute"}
    assert recompute == {Annotation(layer_block(L), "recompute", m) for L in range(4) for m in range(4)}
    stage = names("emulator.granularity=stage")
    spans = {a.block for a in stage if a.first >= 0}
    assert spans == {"layers_0-1", "layers_2-3"}
    assert not any(a.is_block for a in stage if a.first >= 0) and not any(a.is_block for a in recompute)
