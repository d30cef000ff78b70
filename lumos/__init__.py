"""Lumos, openly: trace-driven performance modeling of distributed LLM training.

Data flows one way: trace -> graph -> sim -> analysis -> report; transform and
baselines sit between sim and analysis; the CLI (`lumos.cli`, `lumos.commands`)
is on top; emulator stands in for a real cluster and never imports the
predictor. import-linter enforces it (`lint-imports`, pyproject.toml).
"""

__version__ = "0.1.0"
