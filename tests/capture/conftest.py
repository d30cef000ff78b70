"""One tiny CPU capture of the GPT script, shared by the capture tests (torch CPU build)."""

from __future__ import annotations

import gzip
import json

import pytest

TINY = ["--layers", "2", "--hidden", "32", "--ffn", "128", "--heads", "2", "--seq", "16",
        "--micro-batch", "2", "--vocab", "128", "--steps", "2", "--warmup", "1", "--quiet"]


@pytest.fixture(scope="session")
def tiny_args():
    """The tiny model's `lumos capture gpt` flags (without --out / --device)."""
    return list(TINY)


@pytest.fixture(scope="session")
def gpt_trace_path(tmp_path_factory):
    """`lumos capture gpt` on a 2-layer, hidden-32, seq-16 model: 2 active steps on CPU."""
    from lumos.cli import main

    out = tmp_path_factory.mktemp("gpt_capture")
    assert main(["capture", "gpt", *TINY, "--device", "cpu", "--out", str(out)]) == 0
    return out / "rank0.json.gz"


@pytest.fixture(scope="session")
def gpt_trace(gpt_trace_path):
    with gzip.open(gpt_trace_path, "rt", encoding="utf-8") as fh:
        return json.load(fh)
