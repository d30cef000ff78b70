"""Context-parallel degree: each rank's part of every sequence re-timed, its key/value gathers re-grouped.

Under context parallelism (Megatron's order TP, CP, DP, PP) the cp ranks TP apart share each sequence:
each holds s / cp of its tokens, so every token-wise kernel (the GEMMs' token dimension, the element-wise
work, the TP and PP messages) is re-timed to s / cp' tokens, and a rank's causal attention, its queries
against the whole sequence's keys, by the same factor (the flash op keeps the keys at s: `compute.work`
counts queries x keys). The all-gathers of the keys and values and the reduce-scatters of their gradients
(Llama 3's form, `lumos emulate training.cp_form=allgather`) keep their bytes and move to a group of cp'
ranks; at cp' = 1 they no longer run (their kernels are kept at no time, their launches stay). The
gradients are reduced over the DP x CP ranks: `Plan.dp` counts both, so the DP change that follows
(`dp.change_dp`) re-times the buckets over DP x cp'. A base without context parallelism gets the gathers
added first (`add_collectives`, over a group of one), then re-grouped here; its attention ops keep their keys
and values at the whole sequence while their queries shrink.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from lumos.durations import CollectiveSpec
from lumos.errors import UserError
from lumos.model.ops import op_class

from .cp_ring import change_cp_ring, ring_scale
from .micro_batch_size import reshape_micro_batches
from .plan import Plan
from .shapes import parameter_shapes, rewrite_seq


def _keys_kept(op: str, old, new):
    """An attention op's new dims with its keys and values as they were: a rank's queries shrink with its part of
    the sequence, the keys and values it attends over are the whole sequence (flash ops take (q, k, v, ...);
    their backward (grad_out, q, k, v, ...))."""
    if new is None or op_class(op) != "attention":
        return new
    first = 2 if "backward" in op else 1
    return tuple(old[i] if first <= i < first + 2 else d for i, d in enumerate(new))


CP_FORMS = ("allgather", "ring")


def refuse_cp_form(plan: Plan, cp: int | None, form: str | None) -> None:
    """`--cp-form` names the base's own form, or is refused: a ring's steps are not built from an all-gather base
    (nor one without context parallelism, which gets Llama 3's gathers), nor the reverse."""
    if form is None:
        return
    if form not in CP_FORMS:
        raise UserError(f"--cp-form must be one of {', '.join(CP_FORMS)}, got {form!r}")
    base = plan.cp_form if plan.cp > 1 else "none"
    if form != base and not (base == "none" and form == "allgather"):
        what = {"none": "no context parallelism (`--cp` adds Llama 3's all-gather form)",
                "allgather": "Llama 3's all-gather form", "ring": "the ring form (p2p exchanges of key/value chunks)"}
        raise UserError(f"--cp-form {form}: the base ran {what[base]}; Lumos changes the CP degree within a base's "
                        f"form and does not predict one form from the other (emulate the {form} form for a base)")


def change_cp(plan: Plan, cp: int | None, dp: int | None = None) -> Plan:
    """`plan` at `cp` context-parallel ranks per sequence (`Plan.dp` stays DP x CP of the base: the caller
    changes it to DP x cp, `dp`: the target's, where a ring's pairs of neighbours sit)."""
    if cp is None or cp == plan.cp:
        return plan
    sh = plan.shape
    if not np.any(plan.role == "cp"):
        raise UserError(f"--cp {cp}: the base has no context-parallel gather to re-group (a CPU capture, or attention "
                        "the trace does not name)")
    whole = sh.seq * plan.cp
    if whole % (2 * cp):
        raise UserError(f"--cp {cp}: a sequence of {whole} tokens does not split into 2 x {cp} chunks "
                        "(Megatron's load-balanced causal split)")
    local = whole // cp
    params = parameter_shapes(plan.st.op_name, plan.st.op_dims)
    if plan.cp_form == "ring":
        return _change_ring(plan, cp, local, params, dp or plan.dp // plan.cp * cp)
    out = reshape_micro_batches(plan, local / sh.seq, lambda op, d: _keys_kept(op, d, rewrite_seq(
        op, d, sh.micro_batch, sh.seq, local, params, heads_per_rank=sh.heads // sh.tp)))
    g, st = out.graph, out.st
    for t in np.flatnonzero(out.role == "cp").tolist():
        first = min(st.group[t])
        old = CollectiveSpec(st.coll[t], st.nbytes[t], st.group[t])
        st.group[t] = tuple(first + c * out.tp for c in range(cp))
        g.dur[t] = 0.0 if cp == 1 else out.collectives.retime(g.dur[t], old, CollectiveSpec(st.coll[t], st.nbytes[t],
                                                                                               st.group[t]))
    out.shape = dataclasses.replace(sh, seq=local, cp=cp)
    out.st.shape = out.shape
    out.st.cp = out.cp = cp
    out.notes.append(f"context parallelism {plan.cp} -> {cp}: each rank's {sh.seq} of every sequence's {whole} "
                     f"tokens -> {local} (GEMMs, attention's queries, element-wise work, TP and PP messages re-timed), "
                     f"the key/value gathers over {cp} ranks" + (" (none at CP 1: kept at no time)" if cp == 1 else "")
                     + "; gradients reduced over DP x CP")
    return out


def _change_ring(plan: Plan, cp: int, local: int, params, dp: int) -> Plan:
    """A ring base at `cp`: its rings re-stepped and re-timed (`cp_ring.py`), the rest of each layer as above."""
    sh = plan.shape
    out, compute, exchanges = change_cp_ring(plan, cp)
    out = reshape_micro_batches(out, local / sh.seq, lambda op, d: rewrite_seq(
        op, d, sh.micro_batch, sh.seq, local, params, heads_per_rank=sh.heads // sh.tp), keep=compute)
    ring_scale(out, compute, exchanges, plan.cp / cp, cp, dp)
    out.shape = dataclasses.replace(sh, seq=local, cp=cp)
    out.st.shape = out.shape
    out.st.cp = out.cp = cp
    out.notes.append(f"context parallelism (ring) {plan.cp} -> {cp}: each layer's attention in {cp} steps "
                     f"({'copies of a middle step' if cp > plan.cp else 'steps dropped, run at no time'}; "
                     f"lumos/transform/cp_ring.py), each step's flash kernel and key/value exchange re-timed to "
                     f"{local} of every sequence's {sh.seq * plan.cp} tokens on a ring of {cp} ranks; the rest of "
                     "each layer re-timed as its tokens; gradients reduced over DP x CP")
    return out
