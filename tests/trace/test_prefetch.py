"""The start-up prefetch of a command's first trace file: same bytes, once, and never stale; the
reader's first passes made on its thread give the same table."""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from lumos import prefetch
from lumos.trace import TraceError, load_trace

ROOT = Path(__file__).resolve().parents[2]
DLRM = ROOT / "resources" / "traces" / "real" / "param" / "dlrm_8rank" / "kineto"


def test_take_gives_the_decompressed_bytes_once(tmp_path):
    src = sorted(DLRM.iterdir())[0]
    prefetch.start(src)
    assert prefetch.take(src) == (gzip.decompress(src.read_bytes()), None)
    assert prefetch.take(src) is None   # taken: the next read is the reader's own


def test_a_directory_prefetches_its_first_file_only():
    files = sorted(p for p in DLRM.iterdir() if p.name.endswith(".json.gz"))
    prefetch.start(DLRM)
    assert prefetch.take(files[1]) is None
    assert prefetch.take(files[0])[0] == gzip.decompress(files[0].read_bytes())


def test_a_file_changed_after_the_prefetch_is_read_again(tmp_path):
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": []}')
    prefetch.start(path)
    prefetch._pending[os.path.realpath(path)][0].join()
    path.write_text('{"traceEvents": [], "changed": 1}')
    os.utime(path, ns=(1, 1))
    assert prefetch.take(path) is None


def test_the_reader_gets_the_same_table_and_the_same_errors(tmp_path):
    src = sorted(DLRM.iterdir())[0]
    plain = load_trace(src)
    prefetch.start(src)
    fetched = load_trace(src)
    assert len(fetched) == len(plain) and np.array_equal(fetched.ts, plain.ts)
    assert list(fetched.name) == list(plain.name)
    assert not prefetch._pending
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(b"\x1f\x8b not gzip at all")
    prefetch.start(bad)
    with pytest.raises(TraceError, match="cannot decompress"):
        load_trace(bad)
    prefetch.start(tmp_path / "missing.json")   # nothing to read: nothing started
    assert not prefetch._pending


def test_the_scan_made_on_the_prefetch_thread_gives_the_same_table():
    from lumos.cli import _scan_on_the_side
    from lumos.trace.scanned import Scan

    src = ROOT / "resources" / "traces" / "real" / "hta" / "nccl_parser_config__nccl_data.json.gz"
    plain = load_trace(src)
    prefetch.start(src, then=_scan_on_the_side)
    thread, out = prefetch._pending[os.path.realpath(src)]
    thread.join()
    assert isinstance(out["then"], Scan) and out["then"].rows == 26933
    fetched = load_trace(src)
    for col in ("ts", "dur", "cat", "pid", "tid", "corr", "stream"):
        assert np.array_equal(getattr(fetched, col), getattr(plain, col)), col
    assert list(fetched.name) == list(plain.name)
    prefetch.start(src, then=lambda data: 1 / 0)   # a `then` that fails is dropped: the reader does the work
    assert len(load_trace(src)) == len(plain)


def test_the_cli_prefetches_only_a_path_argument(tmp_path, monkeypatch, capsys):
    from lumos.cli import main

    started = []
    monkeypatch.setattr(prefetch, "start", lambda path, then=None: started.append(path))
    shutil.copy(sorted(DLRM.iterdir())[0], tmp_path / "r.json.gz")
    monkeypatch.setattr("sys.argv", ["lumos", "replay", str(tmp_path / "r.json.gz"), "--format", "json"])
    assert main() == 0
    monkeypatch.setattr("sys.argv", ["lumos", "replay", "--format", "json", str(tmp_path / "r.json.gz")])
    assert main() == 0
    assert started == [str(tmp_path / "r.json.gz")]   # a flag first: no prefetch
    assert main(["replay", str(tmp_path / "r.json.gz"), "--format", "json"]) == 0
    assert len(started) == 1   # called from Python (a pipeline job): no thread started
    monkeypatch.setenv("LUMOS_NO_PREFETCH", "1")
    monkeypatch.setattr("sys.argv", ["lumos", "replay", str(tmp_path / "r.json.gz"), "--format", "json"])
    assert main() == 0
    assert len(started) == 1   # switched off
    capsys.readouterr()

