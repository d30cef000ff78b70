"""Layers found by repetition in traces without layer ranges (`lumos.model.recover`).

The emulated `tiny` runs carry our `layer_{L}/forward/mb{i}` ranges; stripped of every
annotation but `ProfilerStep#N` they must give back the same blocks, task for task, and the
same predictions. A hand-written one-thread trace pins the rules; traces without repeated
layers (one layer per stage, DLRM, ResNet) must get none.
"""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from lumos.predict.prediction import predict
from lumos.cli import main as lumos_main
from lumos.graph.run_graph import build_run_graph
from lumos.trace import load_run, load_trace, schema
from lumos.model.recover import find_layer_ranges, recover_layers
from lumos.model.structure import find_structure

from tests.conftest import REAL
from tests.tracegen import TraceBuilder


def strip(table):
    """The table without any annotation but the step markers."""
    other = (table.cat == schema.ANNOTATION) & ~np.char.startswith(table.name.astype(str), "ProfilerStep#")
    return table.take(~other)


def block_keys(tables):
    graph = build_run_graph(tables)
    found, how = recover_layers(tables)
    st = find_structure(graph, found)
    keys = [None if b < 0 else st.blocks[b].key + (st.blocks[b].kind,) for b in st.task_block]
    return keys, st, how


@pytest.mark.parametrize("run", ["base", "dp4"])
def test_stripped_tiny_runs_give_back_the_annotated_blocks(tiny_runs, run):
    tables = load_run(tiny_runs[run])
    annotated, st_a, how_a = block_keys(tables)
    recovered, st_r, how_r = block_keys([strip(t) for t in tables])
    assert [h.source for h in how_a] == ["annotations"] * 2
    assert [h.source for h in how_r] == ["repetition"] * 2
    assert [(h.layers_per_stage, h.microbatches) for h in how_r] == [(2, 4), (2, 4)]
    assert len(annotated) == len(recovered) and annotated == recovered
    assert (st_r.layers, st_r.microbatches, st_r.tp, st_r.pp) == (4, 4, 2, 2)


def test_predictions_from_the_stripped_run_are_the_annotated_ones(tiny_runs):
    tables = load_run(tiny_runs["base"])
    stripped = [strip(t) for t in tables]
    for target in ({"pp": 4}, {"layers": 8}, {"dp": 4}):
        a, b = predict(tables, target), predict(stripped, target)
        assert b["predicted"] == a["predicted"]
        assert (a["structure"]["source"], b["structure"]["source"]) == ("annotations", "repetition")


def test_one_layer_per_stage_is_no_layer_structure(tiny_runs):
    # PP4 of a 4-layer model: each stage runs one layer, so a whole micro-batch (with its pipeline
    # exchanges) repeats; that is not a layer, and nothing is invented
    tables = [strip(t) for t in load_run(tiny_runs["pp4"])]
    ranges, how = find_layer_ranges(sorted(tables, key=lambda t: t.rank))
    assert ranges == [[], [], [], []]
    assert {h.source for h in how} == {"none"}
    assert "no transformer layer structure" in how[0].note


@pytest.mark.parametrize("path", [REAL / "param" / "resnet_1gpu" / "resnet_kineto.json.gz",
                                  REAL / "param" / "dlrm_8rank" / "kineto" / "worker0_step_12.1694128201545.pt.trace.json.gz"])
def test_real_traces_without_transformer_layers_get_none(path):
    table = load_trace(path)
    found, how = recover_layers([table])
    assert how[0].source == "none" and "no transformer layer structure" in how[0].note
    assert found[0] is table


def one_thread_trace():
    """Two micro-batches on one thread (as a CPU-only run does): embedding, three layers, head,
    the head's backward, the three layers' backward, the embedding's backward; every op 5 us
    every 10 us."""
    t = TraceBuilder()
    fwd = ["aten::layer_norm", "aten::mm", "aten::gelu", "aten::mm", "aten::add"]
    bwd = ["aten::mm", "aten::gelu_backward", "aten::mm", "aten::native_layer_norm_backward"]
    ops = []
    for _ in range(2):
        ops += ["aten::copy_", "aten::embedding"] + fwd * 3 + ["aten::layer_norm", "aten::mm", "aten::log_softmax"]
        ops += ["aten::_log_softmax_backward_data", "aten::mm"] + bwd * 3 + ["aten::embedding_dense_backward"]
    for i, name in enumerate(ops):
        t.cpu(name, 10.0 * i, 5.0)
    return t.table(), len(ops)


def test_hand_written_one_thread_trace():
    table, n = one_thread_trace()
    assert n == 2 * (2 + 15 + 3 + 2 + 12 + 1)
    ranges, how = find_layer_ranges([table])
    assert (how[0].source, how[0].layers_per_stage, how[0].microbatches) == ("repetition", 3, 2)
    assert (how[0].forward_period, how[0].backward_period) == (5, 4)
    got = {r["name"]: (r["ts"], r["end"]) for r in ranges[0]}
    assert len(got) == len(ranges[0]) == 2 * (3 + 3 + 4)
    # micro-batch 0: embedding at ops 0-1 (copy and lookup), layers at 2-6, 7-11, 12-16, head 17-19,
    # head backward 20-21, layer backward 22-25 (layer 2), 26-29, 30-33, embedding backward 34
    assert got["embedding/forward/mb0"] == (0.0, 15.0)
    assert got["layer_0/forward/mb0"] == (20.0, 65.0)
    assert got["layer_2/forward/mb0"] == (120.0, 165.0)
    assert got["head/forward/mb0"] == (170.0, 195.0)
    assert got["head/backward/mb0"] == (200.0, 215.0)
    assert got["layer_2/backward/mb0"] == (220.0, 255.0)
    assert got["layer_0/backward/mb0"] == (300.0, 335.0)
    assert got["embedding/backward/mb0"] == (340.0, 345.0)
    assert got["embedding/forward/mb1"] == (350.0, 365.0)
    assert got["layer_0/backward/mb1"] == (650.0, 685.0)


def test_replay_structure_flag(tiny_runs, tmp_path, capsys):
    # the base run's files without their layer ranges, as another framework's trace would be
    out = tmp_path / "stripped"
    out.mkdir()
    for f in sorted(tiny_runs["base"].glob("rank*.json.gz")):
        doc = json.loads(gzip.decompress(f.read_bytes()))
        doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "user_annotation"
                              or str(e.get("name", "")).startswith("ProfilerStep#")]
        (out / f.name).write_bytes(gzip.compress(json.dumps(doc).encode()))
    assert lumos_main(["replay", str(out), "--structure", "--format", "json"]) == 0
    st = json.loads(capsys.readouterr().out)["structure"]
    assert st["source"] == "repetition"
    assert (st["layers"], st["microbatches"], st["tp"], st["pp"], st["dp"]) == (4, 4, 2, 2, 2)
    assert st["blocks"]["layer"] == 2 * 2 * 4 * 2 and st["what_if"] == "every transform"
    assert lumos_main(["replay", str(out), "--structure"]) == 0
    text = capsys.readouterr().out
    assert "structure: layers from repetition of the ops (no layer ranges in the trace)" in text
    assert "4 layers, 4 micro-batches, TP 2 x PP 2 x DP 2" in text


def test_predict_and_replay_say_when_there_are_no_layers(capsys):
    resnet = str(REAL / "param" / "resnet_1gpu" / "resnet_kineto.json.gz")
    assert lumos_main(["predict", resnet, "--dp", "2"]) == 2
    err = capsys.readouterr().err
    assert "no transformer layer structure" in err and "lumos replay --structure" in err
    assert lumos_main(["replay", resnet, "--structure"]) == 0
    out = capsys.readouterr().out
    assert "structure: no transformer layers found" in out
    assert "what-if: none: the what-if transforms need transformer layers" in out


def _layer_labels(table):
    """(op name, layer range holding it) of every top-level op of the default step, time order,
    without the capture's own marker ops."""
    from lumos.graph.build import resolve_step
    from lumos.model.structure import innermost

    s = resolve_step(table, None)
    ops = np.flatnonzero((table.cat == schema.CPU_OP) & (table.ts >= s.start) & (table.ts < s.end))
    top = innermost(table, ops, table.pid[ops], table.tid[ops], table.ts[ops], outermost=True)
    outer = ops[(top == ops) | (top < 0)]
    outer = outer[np.argsort(table.ts[outer], kind="stable")]
    ann = np.flatnonzero(table.cat == schema.ANNOTATION)
    inner = innermost(table, ann, table.pid[outer], table.tid[outer], table.ts[outer])
    out = []
    for o, a in zip(outer, inner):
        name = str(table.name[o])
        label = str(table.name[a]) if a >= 0 and str(table.name[a]).startswith("layer_") else "-"
        if "InBackward" not in name and "Marker" not in name:
            out.append((name, label))
    return out


def _aligned_labels(annotated, recovered):
    """(annotated label, recovered label) of every top-level op the two captures share, the op
    sequences aligned (an annotated capture has our hooks' and markers' ops too)."""
    import difflib

    la, lb = _layer_labels(annotated), _layer_labels(recovered)
    sm = difflib.SequenceMatcher(None, [n for n, _ in la], [n for n, _ in lb], autojunk=False)
    pairs = [(la[i][1], lb[j][1]) for tag, i0, i1, j0, j1 in sm.get_opcodes() if tag == "equal"
             for i, j in zip(range(i0, i1), range(j0, j1))]
    # every op in a layer range on either side is one the two share
    assert sum(x != "-" for x, _ in pairs) == sum(x != "-" for _, x in la)
    assert sum(y != "-" for _, y in pairs) == sum(y != "-" for _, y in lb)
    return pairs


def _stack_capture(step, path):
    """The plain torch profiler, `with_stack=True` (module calls in the trace), 2 steps kept."""
    from torch.profiler import ProfilerActivity, profile, schedule

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=True,
                 schedule=schedule(wait=1, warmup=1, active=2),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for _ in range(4):
            step()
            prof.step()
    return path


def test_cpu_capture_of_torch_transformer_layers_without_annotation(tmp_path):
    # torch's own nn.TransformerEncoderLayer x 2 (no Lumos code in the model), 2 micro-batches,
    # captured on this machine three times: annotated by lumos.capture, not annotated, and by the
    # plain profiler with Python stacks (module calls)
    torch = pytest.importorskip("torch")
    from tests.capture.annotated_model import LAYERS, MICROBATCHES, PlainTransformer, capture, train_step_fn

    annotated, _ = capture(tmp_path / "annotated")
    plain, _ = capture(tmp_path / "plain", annotate=False)
    torch.manual_seed(0)
    stack = _stack_capture(train_step_fn(PlainTransformer()), tmp_path / "stack.json")
    assert sum(e.get("cat") == "python_function" for e in json.loads(stack.read_text())["traceEvents"]) > 100
    (a,) = load_run(annotated.parent)
    for path, source in ((plain.parent, "repetition"), (stack, "modules")):
        (b,) = load_run(path) if path.is_dir() else [load_trace(path)]
        assert not any(str(n).startswith("layer_") for n in b.name)
        found, how = recover_layers([b])
        assert (how[0].source, how[0].layers_per_stage, how[0].microbatches) == (source, LAYERS, MICROBATCHES)
        pairs = _aligned_labels(a, found[0])
        # a layer: 35 top-level ops forward, 56 backward; every one in the same range as annotated
        assert sum(x != "-" for x, _ in pairs) == LAYERS * MICROBATCHES * (35 + 56)
        assert all(x == y for x, y in pairs)


def test_bundled_gpt_without_annotation(tmp_path):
    # lumos capture gpt --no-annotate (only ProfilerStep ranges, no autograd markers), with and
    # without --with-stack: the recovered layers are the annotated capture's, op for op
    pytest.importorskip("torch")
    from lumos.capture.gpt import GPTConfig, run_gpt

    cfg = GPTConfig(layers=3, hidden=32, ffn=64, heads=2, seq=16, micro_batch=2, vocab=128)
    run = {}
    for name, kw in (("annotated", {}), ("plain", {"annotate": False}),
                     ("stack", {"annotate": False, "with_stack": True})):
        path = run_gpt(cfg, out_dir=tmp_path / name, steps=2, device="cpu", microbatches=2, log=None, **kw)
        (run[name],) = load_run(path.parent)
    for name, source in (("plain", "repetition"), ("stack", "modules")):
        assert not any(str(n).startswith(("layer_", "forward", "backward")) for n in run[name].name)
        found, how = recover_layers([run[name]])
        assert (how[0].source, how[0].layers_per_stage, how[0].microbatches) == (source, 3, 2)
        pairs = _aligned_labels(run["annotated"], found[0])
        assert {x for x, _ in pairs} == {"-"} | {f"layer_{L}/{ph}/mb{m}" for L in range(3)
                                                  for ph in ("forward", "backward") for m in range(2)}
        assert all(x == y for x, y in pairs)


def _hf_step(model, microbatches=2, vocab=128):
    import torch

    gen = torch.Generator().manual_seed(0)
    data = [torch.randint(vocab, (2, 16), generator=gen) for _ in range(microbatches)]
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step():
        for x in data:
            (model(input_ids=x, labels=x).loss / microbatches).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_hugging_face_models_without_annotation(arch, tmp_path):
    # Hugging Face transformers models built from a small config (random weights, nothing
    # downloaded), 3 layers, 2 micro-batches, captured on this machine with our ranges, without,
    # and without but with Python stacks (module calls)
    pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    import torch

    from lumos.capture.profile import profile_steps

    torch.manual_seed(0)
    if arch == "gpt2":
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
            vocab_size=128, n_positions=32, n_embd=32, n_layer=3, n_head=2))
    else:
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
            vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=2,
            num_key_value_heads=1, max_position_embeddings=32))    # grouped-query: 2 query heads share 1
    labels = {}
    for name, kw, found in (("annotated", {"annotate": True}, ("annotations", 0, 0)),
                            ("plain", {"annotate": False}, ("repetition", 3, 2)),
                            ("stack", {"annotate": False, "with_stack": True}, ("modules", 3, 2))):
        path = profile_steps(_hf_step(model), steps=2, warmup=1, out_dir=tmp_path / name, model=model, **kw)
        (table,), how = recover_layers(load_run(path.parent))
        assert (how[0].source, how[0].layers_per_stage, how[0].microbatches) == found
        labels[name] = _layer_labels(table)
        if name == "annotated":     # the shape, read from the trace alone (GPT-2: Conv1D GEMMs as addmm)
            from lumos.predict.whatif import structure_report

            sh = structure_report(load_run(path.parent))["shape"]
            assert (sh["hidden"], sh["ffn"], sh["heads"], sh["tp"]) == ((32, 128, 2, 1) if arch == "gpt2"
                                                                       else (32, 64, 2, 1))
            assert (sh["kv_heads"], sh["mlp"]) == ((2, "gelu") if arch == "gpt2" else (1, "swiglu"))
    a = labels["annotated"]
    assert sum(x.endswith("/mb1") for _, x in a) > 0     # both micro-batches' layers are in it
    for name in ("plain", "stack"):
        b = labels[name]
        assert [n for n, _ in a] == [n for n, _ in b]      # the same ops, so positions compare
        # every op in the same layer range, forward and backward: the backward's phase from the autograd
        # sequence numbers (by context alone GPT-2's backward layers began 4 ops early, Llama's 7)
        assert a == b, name
