"""`lumos replay` accepts a trace recorded by `lumos capture gpt` on CPU."""

from __future__ import annotations

import json

from lumos.cli import main


def test_replay_accepts_a_cpu_capture(gpt_trace_path, capsys):
    capsys.readouterr()  # drop the capture's own output
    rc = main(["replay", str(gpt_trace_path), "--format", "json"])
    out = capsys.readouterr().out
    assert rc == 0
    result = json.loads(out)
    for key in ("measured", "replayed"):
        assert result[key]["iteration_us"] > 0, key
