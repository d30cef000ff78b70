"""Which layers of a run re-run their forward inside their backward (activation checkpointing), and which
layers a new layout would checkpoint.

A checkpointed layer's backward holds a `layer_L/recompute/mbJ` range (`lumos.trace.annotation`); under full
recompute or torchtitan's per-op SelectiveAC every layer does, under torchtitan's per-layer selective AC every
N-th block a rank builds does (torchtitan/distributed/activation_checkpoint.py at 1f029641b, `_apply_layer_sac`:
a process-wide count, incremented before it tests `count % N == 0`, over the blocks of each model part the rank
parallelizes in turn, `distributed/pipeline_parallel.py` `pipeline_llm`). A layout with other stages or another
layer count checkpoints the every-N-th blocks of its own stages, so a prediction must copy a checkpointed layer's
backward where the target checkpoints one and a plain one elsewhere (`transform.templates.Templates`).
"""

from __future__ import annotations

from typing import Iterable, Sequence

from lumos.trace import schema
from lumos.trace.annotation import parse

__all__ = ["recomputed_layers", "ac_period", "run_ac_period", "checkpointed"]


def recomputed_layers(tables: Iterable) -> frozenset:
    """The layers whose backward re-runs their forward in any micro-batch, from the traces' recompute ranges."""
    out: set = set()
    for t in tables:
        for name in set(map(str, t.name[t.cat == schema.ANNOTATION])):
            if "/recompute/" in name and (a := parse(name)) is not None:
                out.update(a.layers)
    return frozenset(out)


def checkpointed(layers: Sequence[int], every: int) -> frozenset:
    """The layers of one rank (`layers` in the order it builds them) that per-layer selective AC with period
    `every` wraps: its `every`-th, 2 `every`-th, ... (1: all of them; 0: none)."""
    if every <= 0:
        return frozenset()
    return frozenset(l for k, l in enumerate(layers, 1) if k % every == 0)


def ac_period(stages: Sequence[Sequence[int]], recomputed: frozenset) -> int | None:
    """The N of per-layer selective AC that explains which of each stage's layers (in build order) recompute:
    0 where none does, 1 where all do, N where every stage's recomputed layers are exactly its N-th, 2N-th, ...;
    None where no N explains them (another policy: its layers keep their own templates)."""
    held = [list(s) for s in stages if len(s)]
    if not recomputed.intersection(l for s in held for l in s):
        return 0
    firsts = [k for s in held for k, l in enumerate(s, 1) if l in recomputed]
    n = min(firsts)
    if all(checkpointed(s, n) == recomputed.intersection(s) for s in held):
        return n
    return None


def run_ac_period(st) -> int | None:
    """`ac_period` of a run's structure (`RunStructure`): each rank's layers in order, its recomputed layers."""
    held: dict = {}
    for b in st.blocks:
        if b.kind == "layer":
            held.setdefault(b.rank, set()).add(b.layer)
    return ac_period([sorted(held[r]) for r in sorted(held)], st.recomputed)
