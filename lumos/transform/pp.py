"""Pipeline-parallel degree: spread layers evenly over the new stages, rebuild 1F1B.

Thin over `rebuild.py`: layers are found from the base's layer ranges,
assigned in contiguous runs (`schedule.layers_of_stage`), and each stage's
program is the non-interleaved 1F1B schedule with warm-up and cool-down for
`microbatches` micro-batches; neighbouring stages' sends and receives are
paired for rendezvous.
"""

from __future__ import annotations

from .plan import Plan
from .rebuild import rebuild


def change_pp(plan: Plan, pp: int, microbatches: int | None = None) -> Plan:
    if pp > plan.layers:
        raise ValueError(f"pp={pp} exceeds the number of layers ({plan.layers})")
    return rebuild(plan, pp=pp, microbatches=microbatches)
