"""`lumos replay --durations-from` and `lumos diff` from the command line: shapes and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from lumos.cli import main

from ..conftest import REAL

NCCL = REAL / "hta" / "nccl_parser_config__nccl_data.json.gz"      # steps 4, 5, 6
QUEUE = REAL / "hta" / "negative_queue_length_values_check__rank0.json.gz"


def test_replay_durations_from_json(capsys):
    assert main(["replay", str(NCCL), "--step", "5", "--durations-from", f"{NCCL}:6", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["measured"]["iteration_us"] == 219726.905      # step periods
    assert doc["predicted"]["iteration_us"] == 224757.605
    assert doc["actual"]["iteration_us"] == 224936.243
    assert doc["error_pct"] == -0.0794 and doc["matched_share"] == 0.9997
    assert set(doc["baselines"]) == {"same_as_k", "kernel_ratio", "dpro"}


def test_replay_durations_from_table(capsys):
    assert main(["replay", str(NCCL), "--step", "5", "--durations-from", f"{NCCL}:5"]) == 0
    out = capsys.readouterr().out
    assert "matched 100.00%" in out and "predicted (Lumos transfer)" in out and "+0.00" in out


def test_diff_table(capsys):
    assert main(["diff", str(NCCL), str(NCCL), "--step", "5:6"]) == 0
    out = capsys.readouterr().out
    assert "GPU op durations" in out and "neither (deps, launch order)" in out and "+5.031" in out


@pytest.mark.parametrize("argv,expected", [
    (["replay", str(NCCL), "--step", "5", "--durations-from", f"{NCCL}:9"], "step 9 is not in the trace"),
    (["diff", str(NCCL), str(NCCL), "--step", "5:9"], "step 9 is not in the trace"),
    (["diff", str(NCCL), str(QUEUE)], "do not look like iterations of one job"),
    (["diff", str(NCCL), str(NCCL), "--step", "x"], "--step takes SA or SA:SB"),
    (["replay", str(NCCL), "--durations-from", str(NCCL), "--simulator", "dpro"], "does not combine"),
])
def test_errors_are_one_line(argv, expected):
    proc = subprocess.run([sys.executable, "-m", "lumos.cli", *argv], capture_output=True, text=True)
    assert proc.returncode == 2
    assert expected in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
