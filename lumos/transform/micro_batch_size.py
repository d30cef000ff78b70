"""Micro-batch size: each micro-batch's GPU work re-shaped for the new batch and re-timed.

Inside the layer, embedding and head blocks every GEMM has the token count b*s as
one of its dimensions, attention its batch, and element-wise work its activations'
leading dim (rewritten by role in `shapes.py`); the compute supplier re-times each
kernel by the FLOP or element ratio. Tensor-parallel and pipeline messages carry
activations and scale with the batch; data-parallel gradients, the optimizer and
host-side (CPU) time do not change. The number of micro-batches per iteration is
the caller's business (`predict` derives it from `--global-batch`).

Assumes a kernel's efficiency does not change with its batch: for small batches
(few tokens per GEMM) real kernels lose efficiency and short kernels are bound by
launch latency, so a smaller micro-batch is predicted faster than it runs.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from lumos.durations import CollectiveSpec

from .plan import Plan, block_mask
from .shapes import parameter_shapes, reshape_gaps, reshape_tasks, rewrite_batch

PER_MICRO_BATCH = ("layer", "embedding", "head")


def change_micro_batch(plan: Plan, micro_batch: int | None) -> Plan:
    sh = plan.shape
    if micro_batch is None or micro_batch == sh.micro_batch:
        return plan
    if micro_batch < 1:
        raise ValueError(f"micro-batch size must be >= 1, got {micro_batch}")
    ratio = micro_batch / sh.micro_batch
    tokens = sh.seq * sh.micro_batch
    params = parameter_shapes(plan.st.op_name, plan.st.op_dims)
    out = reshape_micro_batches(plan, ratio, lambda op, d: rewrite_batch(op, d, sh.micro_batch, tokens, ratio, params,
                                                                         heads_per_rank=sh.heads // sh.tp))
    out.shape = dataclasses.replace(sh, micro_batch=micro_batch)
    out.st.shape = out.shape
    out.notes.append(f"micro-batch size {sh.micro_batch} -> {micro_batch}: GEMM, attention and activation "
                     + (f"element-wise ops and the time inside them re-timed by x{ratio:g} work (a CPU capture)"
                        if out.compute.host_ops else f"element-wise kernels re-timed by x{ratio:g} work; CPU time "
                        "unchanged"))
    return out


def reshape_micro_batches(plan: Plan, ratio: float, rewrite, keep=()) -> Plan:
    """A copy of `plan` whose per-micro-batch work takes the Input Dims `rewrite(op, dims)` gives, re-timed
    (its ops, and a CPU capture's gaps inside them), and whose TP and PP messages are `ratio` times as large:
    what a change of the tokens per micro-batch (its size, or the sequence length) does. `keep`: tasks left as
    they are (a ring's kernels, which `cp_ring` re-times)."""
    out = plan.clone()
    g, st = out.graph, out.st
    in_mb = block_mask(st, PER_MICRO_BATCH)
    is_coll = st.coll != None      # noqa: E711 (element-wise)
    for t in np.flatnonzero(in_mb & is_coll & ((out.role == "tp") | (out.role == "pp"))).tolist():
        old = CollectiveSpec(st.coll[t], st.nbytes[t], st.group[t])
        st.nbytes[t] *= ratio
        g.dur[t] = out.collectives.retime(g.dur[t], old, CollectiveSpec(st.coll[t], st.nbytes[t], st.group[t]))
    tasks = np.flatnonzero(in_mb & ~is_coll)
    if len(keep):
        tasks = tasks[~np.isin(tasks, np.fromiter(keep, np.int64, len(keep)))]
    reshape_tasks(out, tasks.tolist(), rewrite)
    reshape_gaps(out, rewrite, in_mb[g.dst])
    return out
