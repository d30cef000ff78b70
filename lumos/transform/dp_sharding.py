"""A change of FSDP sharding strategy: FULL_SHARD -> SHARD_GRAD_OP, from an FSDP base.

FULL_SHARD frees each unit's gathered parameters after its forward and gathers
them again before its backward; SHARD_GRAD_OP (FSDP2's
`reshard_after_forward=False`) keeps them from the forward to the backward, so
the backward issues no all-gather and its prefetches find the unit gathered
(torch `distributed/fsdp/_fully_shard/_fsdp_param_group.py`: `post_forward`
reshards only with `reshard_after_forward`, `unshard` returns early on a
gathered unit). The change is made by the rebuild: the base's backward glue
(its gathers, their prefetches and the compute's waits on them,
`dp_shard_units.py`) is left out of every backward step, and the memory model
takes ZeRO-2's peak (whole parameters, sharded gradients and optimizer state).

The other direction would have to create backward gathers the base never ran,
with their prefetch order: it is refused with the reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:   # the flag's choices are read at start-up; the plan only when a change is made
    from .plan import Plan

# the strategies a user names (FSDP's ShardingStrategy, lower case) -> the flavour keys of dp_flavour
STRATEGIES = {"full_shard": "fsdp_full", "shard_grad_op": "fsdp_grad_op"}
NAMES = {v: k for k, v in STRATEGIES.items()}


def reachable(sharding: str) -> list[str]:
    """The strategies (`STRATEGIES` keys) `change_fsdp_strategy` takes a base of this DP flavour to:
    its own, and SHARD_GRAD_OP from FULL_SHARD; none from a base that is not FSDP."""
    if sharding not in NAMES:
        return []
    return ["full_shard", "shard_grad_op"] if sharding == "fsdp_full" else [NAMES[sharding]]


def change_fsdp_strategy(plan: Plan, strategy: str | None) -> Plan:
    """`plan` with its FSDP units kept gathered from forward to backward (`shard_grad_op`), or `plan`
    itself when `strategy` is None or the base's own; the rebuild applies it (`Plan.sharding`)."""
    if strategy is None:
        return plan
    if strategy not in STRATEGIES:
        raise ValueError(f"FSDP strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    target = STRATEGIES[strategy]
    if plan.sharding not in NAMES:
        had = f"{plan.sharding} sharding" if plan.sharding else "all-reduce data parallelism"
        raise ValueError(f"--fsdp-strategy {strategy}: the base trains with {had}, not FSDP; Lumos changes the "
                         "strategy of an FSDP base (FULL_SHARD or SHARD_GRAD_OP) only")
    if target == plan.sharding:
        return plan
    if target == "fsdp_full":
        raise ValueError(f"--fsdp-strategy {strategy}: the base keeps its units gathered from forward to backward "
                         "(SHARD_GRAD_OP), so its backward holds no all-gather to copy; Lumos does not create the "
                         "backward's gathers and prefetches a FULL_SHARD run would issue. Profile a FULL_SHARD "
                         "base to predict both")
    out = plan.clone()
    out.sharding = target
    out.notes.append("SHARD_GRAD_OP: every unit stays gathered from its forward to its backward, so the base's "
                     "backward all-gathers (and their prefetches and waits) are left out; memory as ZeRO-2")
    return out
