"""What a timeline says: iteration time, breakdown, duty cycle, errors."""

from .breakdown import (COMPONENTS, Breakdown, breakdown, component_l1_us, duty_cycle,
                        iteration_span, relative_error_pct)

__all__ = ["Breakdown", "breakdown", "duty_cycle", "iteration_span", "relative_error_pct",
           "component_l1_us", "COMPONENTS"]
