"""Lumos, openly: trace-driven performance modeling of distributed LLM training.

Data flows one way: trace -> graph -> sim -> analysis -> report; transform and
baselines sit beside graph; emulator stands in for a real cluster and never
imports the predictor.
"""

__version__ = "0.1.0"
