"""The predictor's structure reader on a real CPU capture annotated by `lumos.capture` (torch CPU build).

The model is torch's `nn.TransformerEncoderLayer` x 2 with an embedding and a Linear
head, no Lumos code in it (tests/capture/annotated_model.py); 2 micro-batches per
iteration. `build_run_graph` takes one iteration, so every block appears once.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

pytest.importorskip("torch")

from lumos.graph.run_graph import build_run_graph  # noqa: E402
from lumos.trace import load_run  # noqa: E402
from lumos.model import structure  # noqa: E402
from tests.capture.annotated_model import (BATCH, FFN, HEADS, HIDDEN, LAYERS, MICROBATCHES, SEQ,  # noqa: E402
                                          VOCAB, capture)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    path, _ = capture(tmp_path_factory.mktemp("annotated_run"))
    tables = load_run(path.parent)
    return build_run_graph(tables), tables


def test_blocks_of_one_iteration(run):
    graph, tables = run
    (table,) = tables
    tasks = np.flatnonzero((graph.rank == table.rank) & (graph.event >= 0))
    blocks = structure._rank_blocks(graph, table, tasks, 0, np.zeros(graph.n_procs, np.int64),
                                    np.empty(graph.n_tasks, dtype=object), None)
    named = Counter((b.kind, b.phase, b.layer, b.mb) for b in blocks if b.kind != "glue")
    want = {("optimizer", "", -1, -1): 1}
    for mb in range(MICROBATCHES):
        for phase in ("forward", "backward"):
            want[("embedding", phase, -1, mb)] = 1
            want[("head", phase, -1, mb)] = 1
            for L in range(LAYERS):
                want[("layer", phase, L, mb)] = 1
    assert dict(named) == want
    # every layer block holds CPU tasks, and the backward of layer 1 precedes that of layer 0
    layer = {(b.phase, b.layer, b.mb): b for b in blocks if b.kind == "layer"}
    assert all(len(b.tasks) > 0 for b in layer.values())
    for mb in range(MICROBATCHES):
        assert layer[("backward", 1, mb)].start < layer[("backward", 0, mb)].start


def test_model_shape_from_the_cpu_ops(run):
    """A CPU trace has no kernels and its tasks are the innermost ops (`aten::copy_` under
    `aten::addmm` under `aten::linear`): the shape is read from the outermost GEMM, layer-norm,
    attention and embedding ops around them. Before, this run gave "found 0 GEMMs"."""
    graph, tables = run
    st = structure.find_structure(graph, tables)
    assert st.shape == structure.ModelShape(hidden=HIDDEN, ffn=FFN, seq=SEQ, micro_batch=BATCH, vocab=VOCAB,
                                            heads=HEADS, tp=1)
    assert (st.layers, st.microbatches, st.tp, st.pp, st.dp) == (LAYERS, MICROBATCHES, 1, 1, 1)


def _thread_overlap_us(graph, start, end) -> float:
    """The largest overlap of two tasks on one CPU thread in a schedule (0: program order held)."""
    worst = 0.0
    for p in np.unique(graph.proc):
        t = np.flatnonzero(graph.proc == p)
        t = t[np.argsort(start[t], kind="stable")]
        if len(t) > 1:
            worst = max(worst, float(np.max(np.maximum.accumulate(end[t])[:-1] - start[t][1:])))
    return worst


def test_predicted_micro_batches_run_in_program_order(run):
    # 4 micro-batches from the 2-micro-batch CPU capture: micro-batches 2 and 3 copy 0 and 1, and
    # micro-batch 0's embedding opens the thread's iteration (no in-edge in the base). Its copy
    # must still follow the work before it on the thread; without that it started at time 0
    # alongside micro-batch 0 (the 4-micro-batch prediction was barely longer than the base)
    from lumos.predict.prediction import simulate_plan
    from lumos.predict.whatif import base_plan, transform

    graph, tables = run
    plan = base_plan(tables)
    out = transform(plan, global_batch=2 * MICROBATCHES * BATCH, micro_batch=BATCH)
    g, sched, bd = simulate_plan(out)
    assert out.microbatches == 2 * MICROBATCHES
    assert _thread_overlap_us(g, sched.start, sched.end) <= 1e-6
    span = {}
    for b in out.st.blocks:
        if b.mb >= 0 and len(b.tasks):
            lo, hi = span.get(b.mb, (np.inf, -np.inf))
            span[b.mb] = (min(lo, sched.start[b.tasks].min()), max(hi, sched.end[b.tasks].max()))
    assert sorted(span) == list(range(2 * MICROBATCHES))
    assert all(span[k + 1][0] >= span[k][1] for k in range(2 * MICROBATCHES - 1))
    assert bd.iteration.iteration_us > simulate_plan(transform(plan))[2].iteration.iteration_us


def test_cpu_optimizer_scales_with_the_parameters(run):
    # a CPU capture's optimizer is a loop of host ops per parameter tensor: 4 layers instead of 2
    # stretch its ops and the host gaps between them by the ratio of parameter counts
    from lumos.predict.whatif import base_plan, transform

    _, tables = run
    plan = base_plan(tables)
    out = transform(plan, layers=2 * LAYERS)
    sh = plan.shape
    ratio = (2 * LAYERS * sh.layer_params() + 2 * sh.embed_params()) / (LAYERS * sh.layer_params()
                                                                       + 2 * sh.embed_params())

    def optimizer(p):
        tasks = np.concatenate([b.tasks for b in p.st.blocks if b.kind == "optimizer"])
        inner = np.isin(p.graph.src, tasks) & np.isin(p.graph.dst, tasks)
        return float(p.graph.dur[tasks].sum()), float(np.clip(p.graph.lag[inner], 0, None).sum())

    (d0, lag0), (d1, lag1) = optimizer(plan), optimizer(out)
    assert ratio > 1.3 and d1 == pytest.approx(d0 * ratio, rel=1e-9)
    assert lag0 > 0 and lag1 == pytest.approx(lag0 * ratio, rel=1e-9)
