"""Module annotation at capture: the layer ranges `lumos predict` reads, on a model with no Lumos code.

The model is torch's own `nn.TransformerEncoderLayer` x 2 in an `nn.ModuleList`, an
`nn.Embedding` and an `nn.Linear` head; the loop runs 2 micro-batches (forward +
backward twice, then the optimizer) per iteration and 2 iterations are recorded.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter

import pytest
import torch
from torch import nn

from lumos.capture.annotate import ModuleAnnotator, resolve_blocks
from lumos.capture.profile import lumos_profile
from lumos.model.structure import ANN
from tests.capture.annotated_model import LAYERS, MICROBATCHES, STEPS, PlainTransformer, capture, train_step_fn


def _events(path):
    return json.loads(gzip.decompress(path.read_bytes()))


def _ranges(doc):
    return [e for e in doc["traceEvents"] if e.get("cat") == "user_annotation" and ANN.match(e["name"])]


@pytest.fixture(scope="module")
def annotated(tmp_path_factory):
    path, model = capture(tmp_path_factory.mktemp("annotated"))
    return _events(path), model


def test_every_range_once_per_layer_microbatch_step(annotated):
    doc, _ = annotated
    names = Counter(e["name"] for e in _ranges(doc))
    want = {}
    for mb in range(MICROBATCHES):
        for phase in ("forward", "backward"):
            for who in [f"layer_{L}" for L in range(LAYERS)] + ["embedding", "head"]:
                want[f"{who}/{phase}/mb{mb}"] = STEPS
    assert dict(names) == want


def test_metadata_says_what_was_annotated(annotated):
    doc, _ = annotated
    assert doc["lumosCapture"]["annotation"] == {
        "blocks": "layers", "n_blocks": 2, "block_class": "TransformerEncoderLayer",
        "embedding": "tok", "head": "out"}


def _inside(rng, ops):
    end = rng["ts"] + rng["dur"]
    return Counter(o["name"].split(": ", 1)[1] for o in ops
                   if o["tid"] == rng["tid"] and rng["ts"] <= o["ts"] and o["ts"] + o["dur"] <= end)


def test_backward_ranges_hold_their_modules_autograd_ops(annotated):
    doc, model = annotated
    ops = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op"
           and e["name"].startswith("autograd::engine::evaluate_function: ")]
    ranges = _ranges(doc)
    n_params = len(list(model.layers[0].parameters()))       # 12: in/out proj, 2 FFN linears, 2 norms
    for r in ranges:
        if "/backward/" not in r["name"]:
            continue
        ins = _inside(r, ops)
        if r["name"].startswith("layer_"):
            # q/k/v in-projection, FFN up and down: 3 addmm; norm1, norm2; every parameter's gradient
            assert ins["AddmmBackward0"] == 3, (r["name"], ins)
            assert ins["NativeLayerNormBackward0"] == 2, (r["name"], ins)
            assert ins["ScaledDotProductFlashAttentionForCpuBackward0"] == 1, (r["name"], ins)
            assert ins["torch::autograd::AccumulateGrad"] == n_params, (r["name"], ins)
        elif r["name"].startswith("head/"):
            assert ins["AddmmBackward0"] == 1 and "NativeLayerNormBackward0" not in ins, (r["name"], ins)
        else:
            assert ins["EmbeddingBackward0"] == 1, (r["name"], ins)
    # every layer-norm backward is inside a layer's backward, except the final norm's (one per pass)
    lnb = [o for o in ops if o["name"].endswith("NativeLayerNormBackward0")]
    assert len(lnb) == STEPS * MICROBATCHES * (2 * LAYERS + 1)
    lb = [r for r in ranges if r["name"].startswith("layer_") and "/backward/" in r["name"]]
    assert sum(sum(_inside(r, lnb).values()) for r in lb) == STEPS * MICROBATCHES * 2 * LAYERS


def test_backward_runs_last_layer_first(annotated):
    doc, _ = annotated
    steps = sorted((e for e in doc["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")),
                   key=lambda e: e["ts"])
    ranges = _ranges(doc)
    for s in steps:
        for mb in range(MICROBATCHES):
            def one(name):
                (r,) = [r for r in ranges if r["name"] == name and s["ts"] <= r["ts"] < s["ts"] + s["dur"]]
                return r
            order = ["head"] + [f"layer_{L}" for L in reversed(range(LAYERS))] + ["embedding"]
            bwd = [one(f"{w}/backward/mb{mb}") for w in order]
            for a, b in zip(bwd, bwd[1:]):
                assert a["ts"] + a["dur"] <= b["ts"], (a["name"], b["name"])
            fwd = [one(f"{w}/forward/mb{mb}") for w in reversed(order)]
            assert fwd[-1]["ts"] + fwd[-1]["dur"] <= bwd[0]["ts"]


def test_blocks_named_by_path(tmp_path):
    path, _ = capture(tmp_path, blocks="layers", embedding="tok", head=False)
    doc = _events(path)
    assert doc["lumosCapture"]["annotation"]["head"] is None
    names = Counter(e["name"] for e in _ranges(doc))
    assert names["layer_1/backward/mb1"] == STEPS and names["embedding/forward/mb0"] == STEPS
    assert not any(n.startswith("head/") for n in names)


def test_a_wrong_path_is_a_clear_error(tmp_path):
    model = PlainTransformer()
    with pytest.raises(ValueError, match=r"blocks='model\.layers': no such module .*tok, layers, norm, out"):
        capture(tmp_path, blocks="model.layers")
    with pytest.raises(ValueError, match=r"blocks='out' is a Linear"):
        resolve_blocks(model, "out")
    with pytest.raises(ValueError, match=r"head='lm_head'"):
        ModuleAnnotator(model, head="lm_head")
    assert not list(tmp_path.iterdir())       # nothing ran, nothing written


def test_annotate_false_writes_no_range(tmp_path):
    path, model = capture(tmp_path, annotate=False)
    doc = _events(path)
    assert _ranges(doc) == [] and "annotation" not in doc["lumosCapture"]


def _hook_count(model):
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules()) + sum(
        len(p._post_accumulate_grad_hooks or {}) for p in model.parameters()
        if getattr(p, "_post_accumulate_grad_hooks", None) is not None)


@pytest.mark.filterwarnings("ignore:Profiler won't be using warmup")
def test_hooks_removed_after_the_context(tmp_path):
    torch.manual_seed(0)
    model = PlainTransformer()
    step = train_step_fn(model)
    with lumos_profile(tmp_path / "a", steps=1, warmup=0, wait=1, model=model) as cap:
        assert _hook_count(model) > 0
        for _ in range(cap.total_iterations):
            cap.microbatch(3)         # explicit: every range of this iteration is mb3
            step()
            cap.step()
            # found in the first forward: the embedding's backward closes on its weight's gradient
            assert len(model.tok.weight._post_accumulate_grad_hooks) == 1
    assert _hook_count(model) == 0 and len(model._forward_hooks) == 0
    names = Counter(e["name"] for e in _ranges(_events(cap.path)))
    assert names["layer_0/forward/mb3"] == MICROBATCHES and names["layer_1/backward/mb3"] == MICROBATCHES
    assert all(n.endswith("/mb3") for n in names)
    # the model runs again, under a plain profiler: no range from Lumos any more
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        step()
    assert not [e for e in prof.events() if ANN.match(e.name)]


class _FailInBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError("backward failed on purpose")


class _Block(nn.Module):
    def __init__(self, fail: bool):
        super().__init__()
        self.lin, self.fail = nn.Linear(8, 8), fail

    def forward(self, x):
        y = self.lin(x)
        return _FailInBackward.apply(y) if self.fail else y


@pytest.mark.filterwarnings("ignore:Profiler won't be using warmup")
def test_a_failed_backward_leaves_no_range_open(tmp_path):
    model = nn.Sequential(nn.Embedding(16, 8), nn.Sequential(_Block(True), _Block(False)), nn.Linear(8, 16))
    idx = torch.randint(16, (2, 4))
    with lumos_profile(tmp_path, steps=1, warmup=0, wait=0, model=model, embedding=False, head=False) as cap:
        with pytest.raises(RuntimeError, match="on purpose"):
            model(idx).sum().backward()
        assert len(cap.annotator._live) == 1          # layer_0's backward: opened, never closed
        cap.step()
        assert not cap.annotator._live
    doc = _events(cap.path)
    got = {e["name"]: e for e in _ranges(doc)}
    assert set(got) == {"layer_0/forward/mb0", "layer_1/forward/mb0",
                        "layer_1/backward/mb0", "layer_0/backward/mb0"}
    assert all(e["dur"] >= 0 for e in got.values())


def test_recomputation_in_backward_writes_no_range():
    """Activation checkpointing re-runs a block's forward inside backward: no range, not counted."""
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    model = PlainTransformer()
    ann = ModuleAnnotator(model).attach()
    try:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in range(2):
                x = model.tok(torch.randint(64, (2, 8)))
                for layer in model.layers:
                    x = checkpoint(layer, x, use_reentrant=False)
                model.out(model.norm(x)).sum().backward()
    finally:
        ann.detach()
    names = Counter(e.name for e in prof.events() if ANN.match(e.name))
    assert names["layer_0/forward/mb0"] == 1 and names["layer_0/forward/mb1"] == 1
    assert names["layer_1/backward/mb1"] == 1 and len(names) == 2 * 2 * 2


def test_default_blocks_are_the_outermost_repeated_list():
    """An MoE-like block lists 4 experts; the 2 blocks, not the experts, are the layers."""
    class Moe(nn.Module):
        def __init__(self):
            super().__init__()
            self.experts = nn.ModuleList(nn.Linear(4, 4) for _ in range(4))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(8, 4)
            self.body = nn.Sequential(Moe(), Moe())
            self.head = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 8))

    desc, blocks = resolve_blocks(Net())
    assert desc == "body" and len(blocks) == 2
    with pytest.raises(ValueError, match="share one class"):
        resolve_blocks(nn.Sequential(nn.Linear(2, 2), nn.ReLU()))


def test_a_failed_forward_closes_its_range():
    class Boom(nn.Module):
        def forward(self, x):
            raise RuntimeError("forward failed on purpose")

    model = nn.Sequential(nn.Linear(4, 4), nn.Sequential(Boom(), Boom()))
    ann = ModuleAnnotator(model, embedding=False, head=False).attach()
    try:
        with pytest.raises(RuntimeError, match="on purpose"):
            model(torch.randn(2, 4, requires_grad=True))
        assert not ann._live and not any(ann._calls.values())
    finally:
        ann.detach()
    assert _hook_count(model) == 0
