"""Layers from the profiler's module events (`lumos.model.module_calls`).

A hand-written one-thread trace as `with_stack=True` records it: a `python_function` event per
module call, the backward ops tied to the forward by autograd sequence numbers. The blocks it
gives are pinned exactly; a group of sibling modules with too few matrix multiplies is not a
layer; a trace without sequence numbers is left to repetition.
"""

from __future__ import annotations

import numpy as np

from lumos.trace import schema
from lumos.model.module_calls import layer_calls
from lumos.model.recover import recover_layers

from tests.tracegen import MAIN, PID, TraceBuilder

LAYER_FWD = ["aten::layer_norm", "aten::mm", "aten::mm", "aten::gelu", "aten::mm", "aten::mm", "aten::add"]
LAYER_BWD = ["MmBackward0", "MmBackward0", "GeluBackward0", "MmBackward0", "MmBackward0", "NativeLayerNormBackward0"]


def module_trace(sequence_numbers: bool = True):
    """Two micro-batches of: Model_0 (Embedding_0, Block_0, Block_1, Linear_2 head), then the
    backward (head, Block_1, Block_0, embedding), then the optimizer. Each Block calls two Linear
    modules around its GEMMs. Ops take 5 us every 10 us; 20 us more before micro-batch 1."""
    t = TraceBuilder(step=(0.0, 10_000.0))
    clock = [0.0]
    seq = [0]

    def op(name, node=None):
        args = {"Sequence number": node} if sequence_numbers and node is not None else {}
        t.cpu(name, clock[0], 5.0, **args)
        clock[0] += 10.0

    def module(name, start, end):
        t.events.append({"ph": "X", "cat": "python_function", "name": f"nn.Module: {name}", "pid": PID,
                         "tid": MAIN, "ts": start, "dur": end - start, "args": {"Python id": 1}})

    def call_frame(start):
        t.events.append({"ph": "X", "cat": "python_function", "name": "torch/nn/modules/module.py(1751): _call_impl",
                         "pid": PID, "tid": MAIN, "ts": start, "dur": 1.0, "args": {}})

    nodes = {}
    for mb in range(2):
        clock[0] += 20.0 * mb   # the loop's own Python between micro-batches
        m0 = clock[0]
        e0 = clock[0]
        seq[0] += 1
        nodes[("emb", mb)] = seq[0]
        op("aten::embedding", seq[0])
        module("Embedding_0", e0, clock[0] - 5.0)
        for b in range(2):
            b0 = clock[0]
            call_frame(b0)
            nodes[(b, mb)] = []
            for k, name in enumerate(LAYER_FWD):
                seq[0] += 1
                nodes[(b, mb)].append(seq[0])
                s0 = clock[0]
                op(name, seq[0])
                if k in (1, 4):   # a Linear module around this GEMM
                    module(f"Linear_{2 * b + (k == 4)}", s0, s0 + 5.0)
            module(f"Block_{b}", b0, clock[0] - 5.0)
        h0 = clock[0]
        seq[0] += 1
        nodes[("head", mb)] = seq[0]
        op("aten::mm", seq[0])
        module("Linear_4", h0, clock[0] - 5.0)
        module("Model_0", m0, clock[0] - 5.0)
        op("aten::log_softmax")
        op("MmBackward0".join(["autograd::engine::evaluate_function: ", ""]), nodes[("head", mb)])
        for b in (1, 0):
            for name, node in zip(LAYER_BWD, [n for n, f in zip(nodes[(b, mb)], LAYER_FWD) if f != "aten::add"][::-1]):
                op(f"autograd::engine::evaluate_function: {name}", node)
            op("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad")
        op("autograd::engine::evaluate_function: EmbeddingBackward0", nodes[("emb", mb)])
    t.events.append({"ph": "X", "cat": "user_annotation", "name": "Optimizer.step#SGD.step", "pid": PID,
                     "tid": MAIN, "ts": clock[0], "dur": 25.0, "args": {}})
    op("aten::add_")
    op("aten::add_")
    return t.table()


def test_reader_keeps_only_the_module_calls():
    table = module_trace()
    calls = table.name[table.cat == schema.PY_MODULE]
    assert len(calls) == 2 * (1 + 2 + 4 + 1 + 1) and all(str(n).startswith("nn.Module: ") for n in calls)


def test_layers_are_the_sibling_blocks_with_the_gemms():
    table = module_trace()
    cls, calls = layer_calls(table)
    # Linear_0..3 are siblings under each Block, but one GEMM each is not a layer
    assert cls == "Block" and len(calls) == 2 and [len(c) for c in calls] == [2, 2]


def test_blocks_from_module_events_exactly():
    (table,), how = recover_layers([module_trace()])
    assert (how[0].source, how[0].layers_per_stage, how[0].microbatches) == ("modules", 2, 2)
    added = table.cat == schema.ANNOTATION
    got = {str(n): (float(s), float(s + d)) for n, s, d in zip(table.name[added], table.ts[added], table.dur[added])
           if not str(n).startswith(("ProfilerStep", "Optimizer.step"))}
    # micro-batch 0: embedding op 0, Block_0 ops 1-7, Block_1 ops 8-14, head op 15, log_softmax 16,
    # head backward 17, Block_1 backward 18-23 and its AccumulateGrad 24, Block_0 25-31, embedding
    # backward 32; micro-batch 1 from 350 us; the optimizer's two ops at 680 and 690
    assert got["layer_0/forward/mb0"] == (10.0, 75.0)
    assert got["layer_1/forward/mb0"] == (80.0, 145.0)
    assert got["layer_1/backward/mb0"] == (180.0, 245.0)
    assert got["layer_0/backward/mb0"] == (250.0, 315.0)
    assert got["layer_0/forward/mb1"] == (360.0, 425.0)
    assert got["layer_0/backward/mb1"] == (600.0, 665.0)
    assert got["embedding/forward/mb0"] == (0.0, 5.0)
    assert got["embedding/forward/mb1"] == (350.0, 355.0)
    assert got["head/forward/mb0"] == (150.0, 165.0)
    assert got["head/backward/mb0"] == (170.0, 175.0)
    assert got["embedding/backward/mb0"] == (320.0, 325.0)
    assert got["optimizer"] == (670.0, 695.0)
    assert len(got) == 2 * (2 * 2 + 4) + 1


def test_without_sequence_numbers_repetition_decides():
    (table,), how = recover_layers([module_trace(sequence_numbers=False)])
    assert how[0].source == "repetition" and how[0].layers_per_stage == 2
    assert np.sum(np.char.startswith(table.name.astype(str), "layer_")) == 2 * 2 * 2
