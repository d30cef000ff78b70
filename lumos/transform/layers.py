"""Number of layers: replicate a layer's subgraph (layer l takes base layer l mod L) and reconnect it.

Thin over `rebuild.py`, which re-sequences every stage with the new layer
count; parameter-dependent work (gradient buckets, optimizer) follows.
"""

from __future__ import annotations

from .plan import Plan
from .rebuild import rebuild


def change_layers(plan: Plan, layers: int) -> Plan:
    if layers < plan.pp:
        raise ValueError(f"{layers} layers cannot fill {plan.pp} pipeline stages")
    return rebuild(plan, layers=layers)
