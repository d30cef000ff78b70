"""What work COSTS: duration suppliers, each fitted on a base and evaluated on a target.

One small interface (`DurationSupplier.retime`): given a task's measured
duration and its old and new specification, return the new duration. Each
supplier documents its assumptions. None reads the emulator: only the base
trace and `config/predict/`.
"""

from .base import DurationSupplier
from .collectives import AlphaBeta, CollectiveSpec, fit_alpha_beta
from .compute import ComputeModel, ComputeSpec, fit_compute

__all__ = ["DurationSupplier", "AlphaBeta", "CollectiveSpec", "fit_alpha_beta", "ComputeModel",
           "ComputeSpec", "fit_compute"]
