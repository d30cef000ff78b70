"""Writing a run: the forked, threaded writer produces exactly the files the plain one does."""

from __future__ import annotations

import gzip
import importlib
import os

import pytest

from lumos.emulator import emulate


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the split writer needs fork")
def test_forked_writer_writes_the_same_traces(tmp_path, monkeypatch):
    from lumos.emulator.emulate import write_result

    r = emulate(["model=tiny", "ranks=all", "seed=5"], progress=False)
    assert len(r.ranks) == 16
    plain = write_result(r, tmp_path / "plain")
    # the package's `emulate` is the function, so reach the module by name
    monkeypatch.setattr(importlib.import_module("lumos.emulator.emulate"), "FORK_WRITE_EVENTS", 1)
    forked = write_result(r, tmp_path / "forked")
    assert [p.name for p in plain] == [p.name for p in forked] == [f"rank{k}.json.gz" for k in r.ranks]
    for a, b in zip(plain, forked):
        assert gzip.decompress(a.read_bytes()) == gzip.decompress(b.read_bytes())
        assert a.read_bytes() == b.read_bytes()   # same compression level and gzip header (mtime 0)
    assert not list((tmp_path / "forked").glob(".*.tmp"))

