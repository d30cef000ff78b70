"""How unevenly a base's router spread the tokens over its expert-parallel ranks, fitted on the base trace, and
draws of that unevenness for another layout (experts, top-k, EP).

What a trace shows: for each MoE layer forward, the tokens its rank's experts received (their GEMMs' rows,
`lumos.model.moe.MoEReading.received`), against the T x k the rank would get if the router were balanced. Over
an expert-parallel group the rank's share s = received / (T k) has mean 1; how far it strays is how skewed
the router's choice of experts is.

The model: each (layer, micro-batch) the experts' popularity is p ~ Dirichlet(alpha, ..., alpha) over the E
experts (a common description of a router's load, e.g. the load-imbalance studies of MoE serving and
training; large alpha: balanced), and a rank holding L = E / EP of them gets the share EP x sum of its
experts' p. Then Var(s) = (EP - 1) / (E alpha + 1), plus the multinomial noise of picking T k tokens,
(1 - 1/EP) / (T k); `fit_routing` solves that for alpha from the base's shares. A draw for a target layout
gives the share of one rank (the traced one) and of the busiest rank of its group: an exchange after the
experts waits for the busiest, and an all-to-all moves its busiest rank's tokens.

The emulator draws routing its own way (`lumos.emulator.routing`, never imported here); what is shared is
only the idea that a router's load is a distribution, which the prediction has to estimate from the base.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

BALANCED = math.inf


@dataclass(frozen=True)
class RoutingFit:
    alpha: float           # Dirichlet concentration per expert (inf: every rank exactly its share)
    samples: int           # (layer, micro-batch) shares it rests on
    share_std: float       # their standard deviation
    base_experts: int
    base_ep: int

    def draw(self, rng: np.random.Generator, experts: int, ep: int, n: int, capacity: float = 0.0,
             pad: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(own, busiest, sent): `n` draws of the traced rank's share, its EP group's largest and the share of a
        rank's tokens x k that leave it, for `experts` over `ep` ranks (each over T x k: mean 1 when dropless).
        `capacity` (a factor; 0: dropless): an expert takes at most capacity / experts of each rank's tokens x k,
        the rest dropped (Megatron-Core's capacity, moe_utils.py), or with `pad` exactly that."""
        if pad and capacity:
            full = np.full(n, float(capacity))
            return full, full, full
        if ep <= 1 or not math.isfinite(self.alpha):
            p = np.full((n, experts), 1.0 / experts)
        else:
            p = rng.dirichlet(np.full(experts, self.alpha), size=n)
        if capacity:
            p = np.minimum(p, capacity / experts)
        shares = ep * p.reshape(n, ep, experts // ep).sum(axis=2)
        return shares[:, 0], shares.max(axis=1), p.sum(axis=1)

    @functools.lru_cache(maxsize=64)   # a pure function of its arguments: each routing sample asks again
    def expected(self, experts: int, ep: int, n: int = 4000, seed: int = 0, capacity: float = 0.0,
                 pad: bool = False) -> tuple[float, float, float]:
        """E[own], E[busiest], E[sent] (Monte Carlo over `n` draws, fixed seed: the same plan gives the same)."""
        own, busiest, sent = self.draw(np.random.default_rng(seed), experts, ep, n, capacity, pad)
        return float(own.mean()), float(busiest.mean()), float(sent.mean())

    def as_dict(self) -> dict:
        return {"alpha": None if not math.isfinite(self.alpha) else round(self.alpha, 4), "samples": self.samples,
                "share_std": round(self.share_std, 5), "experts": self.base_experts, "ep": self.base_ep}


def fit_routing(received: dict, tokens: int, top_k: int, experts: int, ep: int) -> RoutingFit:
    """The Dirichlet concentration that explains the spread of the base's shares (`received`: (rank, layer,
    micro-batch) -> tokens its experts got; `tokens` T per rank). Balanced where the base has one EP rank, or
    its shares spread no more than picking T k tokens would."""
    shares = np.array([r / (tokens * top_k) for r in received.values()], dtype=float) if tokens and top_k else []
    n = len(shares)
    std = float(np.std(shares, ddof=1)) if n > 1 else 0.0
    noise = (1.0 - 1.0 / ep) / (tokens * top_k) if ep > 1 and tokens and top_k else 0.0
    var = std ** 2 - noise
    if ep <= 1 or n < 2 or var <= 0:
        return RoutingFit(BALANCED, n, std, experts, ep)
    alpha = max(((ep - 1) / var - 1.0) / experts, 1e-3)
    return RoutingFit(alpha, n, std, experts, ep)
