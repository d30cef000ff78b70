"""The interface every duration supplier implements."""

from __future__ import annotations

from typing import Protocol


class DurationSupplier(Protocol):
    def retime(self, measured_us: float, old, new) -> float:
        """Duration of a task measured at `measured_us` under spec `old`, now running spec `new`.

        Suppliers keep what the model cannot explain (jitter, waiting for a
        peer) as measured and change only what the spec change implies.
        """
        ...
