"""The interface every duration supplier implements: fitted on a base, evaluated on a target."""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class DurationSupplier(Protocol):
    """A cost model fitted on the base run. Each supplier's `old` / `new` is its own spec: a
    `ComputeSpec` (op and Input Dims), a `CollectiveSpec` (kind, bytes, group), a `ClockWindow`
    (busy time the task ran at), a share of the task under communication, a `HookSpec` (an
    FSDP2 hook's role, unit size and DP degree)."""

    def retime(self, measured_us: float, old, new) -> float:
        """Duration of a task measured at `measured_us` under spec `old`, now running spec `new`.

        Suppliers keep what the model cannot explain (jitter, waiting for a
        peer) as measured and change only what the spec change implies.
        """
        ...
