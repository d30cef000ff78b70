"""Sequence length: every token's work re-timed, attention's quadratically.

A sequence of s' instead of s changes each micro-batch's tokens (b x s): the GEMMs' token dimension,
attention's sequence (flash attention's FLOPs grow with s^2; unfused attention's score matrices on both
sides), the activations' element-wise work, the TP and PP messages (s x b x h) and, on a CPU capture,
the work inside its ops (`reshape_gaps`). Parameters do not change, except GPT's learned position
embedding, which `ModelShape.embed_params` counts (s x h) for the rebuild's buckets and optimizer.
The micro-batch count is kept.
"""

from __future__ import annotations

import dataclasses

from .micro_batch_size import reshape_micro_batches
from .plan import Plan
from .shapes import parameter_shapes, rewrite_seq


def change_seq(plan: Plan, seq: int | None) -> Plan:
    sh = plan.shape
    if seq is None or seq == sh.seq:
        return plan
    if seq < 1:
        raise ValueError(f"sequence length must be >= 1, got {seq}")
    params = parameter_shapes(plan.st.op_name, plan.st.op_dims)
    out = reshape_micro_batches(plan, seq / sh.seq, lambda op, d: rewrite_seq(
        op, d, sh.micro_batch, sh.seq, seq, params, heads_per_rank=sh.heads // sh.tp))
    out.shape = dataclasses.replace(sh, seq=seq)
    out.st.shape = out.shape
    out.notes.append(f"sequence {sh.seq} -> {seq}: GEMMs' tokens, attention (its s^2 work) and activation "
                     "element-wise work re-timed, TP and PP messages resized; the micro-batch count kept")
    return out
