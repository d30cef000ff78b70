"""The layer-annotation contract: the range names that say where each layer ran.

A trace says where each transformer layer, the embedding and the head ran, forward and
backward, per micro-batch, with `user_annotation` ranges (`torch.profiler.record_function`,
Megatron/NeMo-style NVTX ranges) named

    name        := block "/" phase "/mb" micro_batch
    block       := "layer_" L              one transformer layer; L its index in the whole model
                 | "layers_" A "-" B       layers A to B (inclusive) run as one block: the
                                           emulator at `granularity=stage` (A < B)
                 | "embedding"             token + position embedding
                 | "head"                  final norm, LM head and loss
    phase       := "forward"               the block's forward
                 | "backward"              its backward: every autograd op of the block
                 | "recompute"             a checkpointed block's forward re-run, nested inside
                                           that block's backward range (the emulator's layers)
    micro_batch := decimal                 the micro-batch in the iteration, from 0

for example `layer_3/forward/mb0`, `layers_6-11/backward/mb2`, `layer_7/recompute/mb1`,
`embedding/forward/mb0`, `head/backward/mb3`. Layers, layer spans and micro-batches are
written in plain decimal; a reader takes any decimal digits (`layer_03` is layer 3).

Who writes them: `lumos capture` (`lumos.capture.annotate.ModuleAnnotator` on any
`nn.Module`, `lumos.capture.gpt`), the emulator (`lumos.emulator.rank`), and the model reader
itself for a trace without them, synthesizing the ranges it found (`lumos.model.recover`,
`lumos.model.module_calls`, `lumos.model.layer_ranges`). Who reads them: `lumos.model.structure`
(a block per layer / embedding / head, forward or backward; a recompute range is part of its
layer's backward and a `layers_A-B` range is no layer block of its own), `lumos.model.layer_ranges`
(whether a trace has them at all) and `lumos.model.dp_flavour` (which layer a collective is in).

Inside a layer's forward, ranges named `moe/` + a part (`moe/router`, `moe/permute`, `moe/dispatch`,
`moe/experts`, `moe/expert_{E}` for global expert E, `moe/shared_expert`, `moe/combine`, `moe/unpermute`;
`lumos capture moe` writes them) say which of a mixture-of-experts layer's ops do what. They are parts of
the layer's block, never blocks of their own (`is_part`); the MoE reader (`lumos.model.moe`) uses them where
present and reads the same layer from its ops where not.

`range_name` writes a name (`layer_block` makes the block of one layer or a run of them),
`parse` reads one into an `Annotation` (None for any other range: `ProfilerStep#3`,
`layer_norm`, `nn.Module: Block_0`). `ANN` is the subset the model reader takes as a block of
its own (`Annotation.is_block`), as one regex; its groups are (layer, "embedding", "head",
phase, micro-batch).

This module imports nothing but the standard library: capture and the emulator use it without
numpy or the predictor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["PHASES", "BLOCK_PHASES", "EMBEDDING", "HEAD", "ANNOTATION", "ANN", "Annotation", "layer_block",
           "range_name", "parse", "MOE_PARTS", "part_name", "is_part"]

PHASES = ("forward", "backward", "recompute")
BLOCK_PHASES = ("forward", "backward")      # the phases the model reader makes blocks of
EMBEDDING, HEAD = "embedding", "head"

_LAYER, _SPAN, _EMBEDDING, _HEAD = r"layer_(\d+)", r"layers_(\d+)-(\d+)", f"({EMBEDDING})", f"({HEAD})"
# every name of the contract; groups: layer, span first, span last, "embedding", "head", phase, micro-batch
ANNOTATION = re.compile(rf"^(?:{_LAYER}|{_SPAN}|{_EMBEDDING}|{_HEAD})/({'|'.join(PHASES)})/mb(\d+)$")
# what the model reader takes as a block: one layer, the embedding or the head, forward or backward;
# groups: layer, "embedding", "head", phase, micro-batch
ANN = re.compile(rf"^(?:{_LAYER}|{_EMBEDDING}|{_HEAD})/({'|'.join(BLOCK_PHASES)})/mb(\d+)$")
# the parts of an MoE layer's forward a range may name (`part_name`); `expert` takes the global expert index
MOE_PARTS = ("router", "permute", "dispatch", "experts", "expert", "shared_expert", "combine", "unpermute")
_PART = re.compile(r"^moe/(router|permute|dispatch|experts|expert_\d+|shared_expert|combine|unpermute)$")


@dataclass(frozen=True, slots=True)
class Annotation:
    """One parsed range name: its block as written (`layer_3`, `layers_0-3`, `embedding`, `head`),
    its phase (`forward`, `backward`, `recompute`) and its micro-batch."""
    block: str
    phase: str
    micro_batch: int

    @property
    def kind(self) -> str:
        """`layer` (one layer), `layers` (a run of layers), `embedding` or `head`."""
        b = self.block
        return "layers" if b.startswith("layers_") else "layer" if b.startswith("layer_") else b

    @property
    def first(self) -> int:
        """The block's first layer (its only one for `layer_L`); -1 for the embedding and the head."""
        b = self.block
        if b.startswith("layers_"):
            return int(b[len("layers_"):].split("-", 1)[0])
        return int(b[len("layer_"):]) if b.startswith("layer_") else -1

    @property
    def last(self) -> int:
        """The block's last layer (== `first` for `layer_L`); -1 for the embedding and the head."""
        b = self.block
        return int(b.split("-", 1)[1]) if b.startswith("layers_") else self.first

    @property
    def layers(self) -> range:
        """The model layers the block ran: one, several, or none (embedding, head)."""
        return range(self.first, self.last + 1) if self.first >= 0 else range(0)

    @property
    def is_block(self) -> bool:
        """What the model reader takes as a block of its own (the names `ANN` matches): one layer,
        the embedding or the head, forward or backward."""
        return self.phase in BLOCK_PHASES and not self.block.startswith("layers_")

    @property
    def name(self) -> str:
        return range_name(self.block, self.phase, self.micro_batch)


def layer_block(first: int, last: int | None = None) -> str:
    """The block of model layer `first` (`layer_7`), or of layers `first` to `last` run as one
    block (`layers_6-11`; `layer_7` when `last` is `first` or None)."""
    return f"layer_{first}" if last is None or last == first else f"layers_{first}-{last}"


def range_name(block: str, phase: str, micro_batch: int) -> str:
    """The range name of `block` (`layer_block(L)`, `embedding`, `head`) run in `phase` for
    micro-batch `micro_batch`: `layer_3/forward/mb0`."""
    if phase not in PHASES:
        raise ValueError(f"phase must be one of {', '.join(PHASES)}, not {phase!r}")
    return f"{block}/{phase}/mb{micro_batch}"


def parse(name: str) -> Annotation | None:
    """The `Annotation` a range name writes, or None when the name is none of the contract's."""
    m = ANNOTATION.match(name)
    if m is None:
        return None
    return Annotation(name[:m.start(6) - 1], m.group(6), int(m.group(7)))   # no block holds a "/"


def part_name(part: str, expert: int | None = None) -> str:
    """The range of one part of an MoE layer (`moe/router`; `moe/expert_3` for `part="expert", expert=3`)."""
    if part not in MOE_PARTS:
        raise ValueError(f"part must be one of {', '.join(MOE_PARTS)}, not {part!r}")
    if (part == "expert") != (expert is not None):
        raise ValueError("an expert's range takes its index (expert=E), and only it")
    return f"moe/expert_{expert}" if part == "expert" else f"moe/{part}"


def is_part(name: str) -> bool:
    """Whether `name` is a range of `part_name`'s: part of the enclosing layer's block, not a block."""
    return _PART.match(name) is not None
