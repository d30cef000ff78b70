"""The GPT script's CPU trace has everything Lumos reads: steps, shapes, layers, rank."""

from __future__ import annotations

import collections
import re

from lumos.capture.gpt import GPTConfig, build_model


def _annotations(doc):
    return [e for e in doc["traceEvents"] if e.get("cat") == "user_annotation" and e.get("ph") == "X"]


def test_file_is_gzip_json_named_by_rank(gpt_trace_path, gpt_trace):
    assert gpt_trace_path.name == "rank0.json.gz"
    assert gpt_trace_path.read_bytes()[:2] == b"\x1f\x8b"
    assert isinstance(gpt_trace["traceEvents"], list) and gpt_trace["traceEvents"]
    # nothing but the trace is left in the output directory (no temporary files)
    assert sorted(p.name for p in gpt_trace_path.parent.iterdir()) == ["rank0.json.gz"]


def test_profiler_steps_mark_the_active_iterations(gpt_trace):
    steps = [e["name"] for e in _annotations(gpt_trace) if e["name"].startswith("ProfilerStep#")]
    assert len(steps) == 2  # --steps 2; the skipped and the warm-up iterations are not written
    assert all(re.fullmatch(r"ProfilerStep#\d+", s) for s in steps)


def test_cpu_ops_carry_input_dims(gpt_trace):
    ops = [e for e in gpt_trace["traceEvents"] if e.get("cat") == "cpu_op"]
    aten = [e for e in ops if e["name"].startswith("aten::")]
    assert len(aten) > 500
    # every ATen op has its shapes (autograd::engine wrappers have none, and need none)
    assert all("Input Dims" in e.get("args", {}) for e in aten)
    mm = [e for e in ops if e["name"] == "aten::addmm"]
    assert mm, "the Linear layers' GEMMs are in the trace"
    # fc1 of the tiny model: bias [128], input [micro_batch * seq, hidden] = [32, 32], weight^T [32, 128]
    assert any(e["args"]["Input Dims"][:3] == [[128], [32, 32], [32, 128]] for e in mm)


def test_layer_and_phase_annotations(gpt_trace):
    names = collections.Counter(e["name"] for e in _annotations(gpt_trace))
    for name in ("forward", "backward", "embedding/forward/mb0", "head/forward/mb0",
                 "layer_0/forward/mb0", "layer_1/forward/mb0", "layer_0/backward/mb0", "layer_1/backward/mb0",
                 "head/backward/mb0", "embedding/backward/mb0", "optimizer", "zero_grad", "loss_item"):
        assert names[name] == 2, (name, names[name])  # once per active iteration
    assert not any(n.endswith("/mb1") for n in names)  # one micro-batch unless --micro-batches says more


def test_layer_backward_holds_that_layers_autograd_ops(gpt_trace):
    events = gpt_trace["traceEvents"]
    ann = _annotations(gpt_trace)
    bwd = [e for e in ann if e["name"] == "backward"][0]
    for i in (0, 1):
        rng = min((e for e in ann if e["name"] == f"layer_{i}/backward/mb0" and e["ts"] >= bwd["ts"]),
                  key=lambda e: e["ts"])
        assert bwd["ts"] <= rng["ts"] and rng["ts"] + rng["dur"] <= bwd["ts"] + bwd["dur"] + 1
        inside = [e["name"] for e in events if e.get("cat") == "cpu_op" and e["tid"] == rng["tid"]
                  and rng["ts"] <= e["ts"] and e["ts"] + e.get("dur", 0) <= rng["ts"] + rng["dur"]]
        assert any("AddmmBackward" in n for n in inside)
        assert any("NativeLayerNormBackward" in n for n in inside)
    # block 1's backward runs before block 0's
    l0 = min(e["ts"] for e in ann if e["name"] == "layer_0/backward/mb0")
    l1 = min(e["ts"] for e in ann if e["name"] == "layer_1/backward/mb0")
    assert l1 < l0


def _first(ann, name, after):
    return min((e for e in ann if e["name"] == name and e["ts"] >= after), key=lambda e: e["ts"])


def test_head_and_embedding_backward_bracket_the_layers(gpt_trace):
    """head/backward opens the backward pass, embedding/backward closes it, each around its own ops."""
    events = gpt_trace["traceEvents"]
    ann = _annotations(gpt_trace)
    bwd = [e for e in ann if e["name"] == "backward"][0]
    head = _first(ann, "head/backward/mb0", bwd["ts"])
    emb = _first(ann, "embedding/backward/mb0", bwd["ts"])
    last_layer = _first(ann, "layer_1/backward/mb0", bwd["ts"])
    first_layer = _first(ann, "layer_0/backward/mb0", bwd["ts"])
    assert head["ts"] + head["dur"] <= last_layer["ts"] + 1
    assert first_layer["ts"] + first_layer["dur"] <= emb["ts"] + 1
    def ops_in(rng):
        return [e["name"] for e in events if e.get("cat") == "cpu_op" and e["tid"] == rng["tid"]
                and rng["ts"] <= e["ts"] and e["ts"] + e.get("dur", 0) <= rng["ts"] + rng["dur"]]
    assert any("NllLossBackward" in n for n in ops_in(head))
    assert any("EmbeddingBackward" in n for n in ops_in(emb))


def test_micro_batches_accumulate_with_one_range_set_each(tmp_path, tiny_args):
    """--micro-batches 2: two forward/backward passes per iteration, named mb0 and mb1, one optimizer step."""
    import gzip
    import json

    from lumos.cli import main

    args = [a for a in tiny_args]
    args[args.index("--steps") + 1] = "1"
    assert main(["capture", "gpt", *args, "--micro-batches", "2", "--device", "cpu", "--out", str(tmp_path)]) == 0
    with gzip.open(tmp_path / "rank0.json.gz", "rt") as fh:
        doc = json.load(fh)
    names = collections.Counter(e["name"] for e in _annotations(doc))
    for mb in (0, 1):
        for part in ("embedding/forward", "layer_0/forward", "layer_1/backward", "head/backward",
                     "embedding/backward"):
            assert names[f"{part}/mb{mb}"] == 1, (part, mb)
    assert names["forward"] == names["backward"] == 2
    assert names["optimizer"] == 1
    assert doc["lumosCapture"]["microbatches"] == 2
    # micro-batch 1's forward starts after micro-batch 0's backward ended
    ann = _annotations(doc)
    b0 = next(e for e in ann if e["name"] == "embedding/backward/mb0")
    f1 = next(e for e in ann if e["name"] == "embedding/forward/mb1")
    assert f1["ts"] >= b0["ts"] + b0["dur"]


def test_distributed_info_and_capture_settings(gpt_trace):
    assert gpt_trace["distributedInfo"]["rank"] == 0
    assert gpt_trace["distributedInfo"]["world_size"] == 1
    cap = gpt_trace["lumosCapture"]
    assert cap["record_shapes"] is True and cap["with_stack"] is False
    assert cap["steps"] == 2 and cap["warmup"] == 1 and cap["wait"] == 1
    assert cap["config"]["layers"] == 2 and cap["config"]["hidden"] == 32
    assert cap["side_stream"] is False  # never on CPU
    assert gpt_trace["record_shapes"] == 1


def test_cpu_capture_has_no_gpu_side(gpt_trace):
    cats = {e.get("cat") for e in gpt_trace["traceEvents"]}
    assert not cats & {"kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver"}


def test_project_reader_loads_the_capture(gpt_trace_path):
    from lumos.trace.reader import load_trace

    table = load_trace(gpt_trace_path)
    assert table.rank == 0 and table.world_size == 1
    assert len(table) > 1000


def test_math_attention_and_parameter_count(tmp_path):
    from lumos.capture.gpt import run_gpt

    cfg = GPTConfig(layers=1, hidden=16, ffn=32, heads=2, seq=8, micro_batch=1, vocab=64,
                    attention="math")
    assert sum(p.numel() for p in build_model(cfg).parameters()) == cfg.parameter_count()
    path = run_gpt(cfg, out_dir=tmp_path, steps=1, warmup=1, device="cpu", rank=2, log=None)
    assert path == tmp_path / "rank2.json.gz"
    import gzip
    import json

    doc = json.loads(gzip.decompress(path.read_bytes()))
    assert doc["distributedInfo"] == {"backend": None, "rank": 2, "world_size": 3}
    names = {e["name"] for e in doc["traceEvents"]}
    assert {"aten::matmul", "aten::softmax"} <= names


def test_bad_sizes_are_user_errors(tmp_path, capsys):
    from lumos.cli import main

    assert main(["capture", "gpt", "--hidden", "30", "--heads", "4", "--out", str(tmp_path)]) == 2
    assert "divisible by heads" in capsys.readouterr().err
    import torch

    if not torch.cuda.is_available():  # the CPU build: asking for CUDA is a one-line error
        assert main(["capture", "gpt", "--device", "cuda", "--out", str(tmp_path)]) == 2
        assert "no CUDA device" in capsys.readouterr().err
