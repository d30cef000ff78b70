"""Shared emulations of the tiny model (emulated once per session, written to a temp dir)."""

from __future__ import annotations

import gzip
import json

import pytest

from lumos.emulator import emulate, write_result


def read_trace(path):
    with gzip.open(path, "rb") as fh:
        return json.load(fh)


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny_seed3")
    result = emulate(["model=tiny", "seed=3"], progress=False)
    write_result(result, out)
    return out, result


@pytest.fixture(scope="session")
def tiny_docs(tiny_run):
    out, result = tiny_run
    return {r: read_trace(out / f"rank{r}.json.gz") for r in result.ranks}
