"""Which experts a mixture-of-experts layer's tokens go to, drawn per layer and micro-batch (emulated).

A router's choices are not one number: they change from layer to layer and from step to step, and an
expert-parallel rank waits for the busiest rank of its group. So every (layer, micro-batch) gets its own
draw of how popular each expert is, and each rank's tokens are spread over the experts from it:

- `uniform`: every expert exactly its fair share (a perfectly balanced router);
- `dirichlet`: popularity ~ Dirichlet(param, ..., param) (large param: nearly balanced; 1: very skewed);
- `zipf`: popularity of the expert ranked i proportional to 1 / i^param, experts ranked at random.

Each rank's tokens x top-k choices then follow a multinomial over that popularity (an expert taking at
most all of a rank's tokens: a token picks an expert once). With a capacity
factor, an expert takes at most `capacity = tokens x top_k x factor / experts` of one rank's tokens and
drops the rest before the exchange, or is padded up to it (Megatron-Core's
megatron/core/transformer/moe/moe_utils.py, topk_softmax_with_capacity; the formula is the one its
megatron/core/transformer/moe/README.md states).

The draw is keyed on (seed, expert-parallel group, layer, micro-batch) alone, so every rank of a group
sees the same routing, the backward the forward's, and the draws do not depend on what else runs.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

_DOMAIN = 0x30E   # keeps these draws apart from the emulator's other random streams


@dataclass(frozen=True)
class Draw:
    """One layer's routing of one micro-batch over an expert-parallel group of `ep` ranks."""
    counts: np.ndarray     # [ep, experts]: tokens each source rank sends to each expert (after drops / padding)

    def local(self, q: int, ep: int) -> np.ndarray:
        """Tokens each of rank `q`'s experts receives (experts are dealt out in contiguous blocks)."""
        per = self.counts.shape[1] // ep
        return self.counts[:, q * per:(q + 1) * per].sum(axis=0)

    def sent(self) -> np.ndarray:
        return self.counts.sum(axis=1)

    def received(self, ep: int) -> np.ndarray:
        per = self.counts.shape[1] // ep
        return self.counts.sum(axis=0).reshape(ep, per).sum(axis=1)

    def busiest(self, ep: int) -> int:
        """Tokens of the busiest rank of the exchange (what it sends or receives, whichever is more): an
        all-to-all ends when that rank's transfers do."""
        return int(max(self.sent().max(), self.received(ep).max()))


class Routing:
    """Routing draws of one emulated job (every MoE layer, every micro-batch)."""

    def __init__(self, moe, tokens: int, ep: int, seed: int):
        self.moe, self.tokens, self.ep, self.seed = moe, tokens, ep, seed
        self.capacity = 0
        if moe.capacity_factor:
            self.capacity = max(math.ceil(tokens * moe.top_k * moe.capacity_factor / moe.experts), 1)

    def popularity(self, rng: np.random.Generator) -> np.ndarray:
        e, kind, a = self.moe.experts, self.moe.imbalance, self.moe.imbalance_param
        if kind == "dirichlet":
            return rng.dirichlet(np.full(e, a))
        if kind == "zipf":
            w = 1.0 / np.arange(1, e + 1) ** a
            return rng.permutation(w / w.sum())
        return np.full(e, 1.0 / e)

    @functools.lru_cache(maxsize=256)   # a layer's dispatch, experts and combine (and its backward) ask alike
    def draw(self, group: int, layer: int, microbatch: int) -> Draw:
        m, e = self.moe, self.moe.experts
        choices = self.tokens * m.top_k
        if m.imbalance == "uniform":   # exact shares, the remainder to the first experts
            base = np.full(e, choices // e, dtype=np.int64)
            base[:choices % e] += 1
            counts = np.tile(base, (self.ep, 1))
        else:
            rng = np.random.default_rng([self.seed, _DOMAIN, group, layer, microbatch])
            counts = rng.multinomial(choices, self.popularity(rng), size=self.ep).astype(np.int64)
            np.minimum(counts, self.tokens, out=counts)   # a token picks an expert at most once
        if self.capacity:
            counts = np.full_like(counts, self.capacity) if m.pad_to_capacity else np.minimum(counts, self.capacity)
        return Draw(counts)
