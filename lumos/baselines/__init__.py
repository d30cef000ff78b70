"""Baselines the Lumos replay is compared against (built from the same trace)."""

from .dpro import DproGraph, Priority, build_dpro, replay_dpro

__all__ = ["DproGraph", "Priority", "build_dpro", "replay_dpro"]
