"""What the pipeline's helper modules (workflow/scripts/) need to be imported and run from a test."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def repo_config(monkeypatch):
    """The repository's Hydra groups and working directory, as the Snakefile sets them for its jobs."""
    monkeypatch.setenv("LUMOS_CONFIG_DIR", str(ROOT / "config"))
    monkeypatch.chdir(ROOT)
