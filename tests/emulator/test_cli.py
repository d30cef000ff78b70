from __future__ import annotations

import time

import orjson

from lumos.cli import main


def test_cli_writes_traces(tmp_path, capsys):
    rc = main(["emulate", "model=tiny", "parallel.tp=2", "parallel.pp=2", "parallel.dp=4", "seed=3",
               f"out={tmp_path}", "--quiet"])
    assert rc == 0
    m = orjson.loads((tmp_path / "manifest.json").read_bytes())
    assert m["ranks"] == [0, 8] and m["emulated"] is True


def test_cli_user_errors(tmp_path, capsys):
    assert main(["emulate", "model=tiny"]) == 2
    assert main(["emulate", "model=tiny", "parallel.tp=3", f"out={tmp_path}"]) == 2
    assert main(["emulate", "model=no_such_model", f"out={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert "out=DIR" in err and "tp=3" in err


def test_largest_scale_out_config_is_fast(tmp_path):
    # GPT-3 15B on 128 GPUs (2x8x8): emulate and write well under a minute on one core
    t0 = time.perf_counter()
    assert main(["emulate", "model=gpt3_15b", "parallel.tp=2", "parallel.pp=8", "parallel.dp=8",
                 f"out={tmp_path}", "--quiet"]) == 0
    assert time.perf_counter() - t0 < 60
    assert len(list(tmp_path.glob("rank*.json.gz"))) == 8
