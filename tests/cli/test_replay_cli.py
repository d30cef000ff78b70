"""`lumos replay` end to end: output shapes, --out round trip, and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from lumos.cli import main

from ..conftest import DLRM, REAL

LEGACY = REAL / "kineto" / "resnet50_num_workers_0__worker0.1623143566756.pt.trace.json.gz"
KEYS = {"iteration_us", "exposed_compute_us", "overlapped_us", "exposed_comm_us", "other_us"}


def run_json(capsys, *argv):
    assert main(["replay", *map(str, argv), "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_shape_single_rank(capsys):
    doc = run_json(capsys, LEGACY)
    assert set(doc["measured"]) == KEYS and set(doc["replayed"]) == KEYS
    assert doc["error_pct"] == 0.0
    assert doc["graph"]["step"] == 17


def test_json_shape_multi_rank(capsys):
    doc = run_json(capsys, DLRM)
    assert [r["rank"] for r in doc["ranks"]] == list(range(8))
    assert doc["critical_rank"] == 1
    assert doc["measured"]["iteration_us"] == pytest.approx(18467.0)
    assert doc["max_abs_rank_error_pct"] <= 2.0


def test_out_writes_a_trace_that_replays_the_same(tmp_path, capsys):
    out = tmp_path / "replayed.json.gz"
    first = run_json(capsys, LEGACY, "--out", out)
    again = run_json(capsys, out)
    assert again["measured"]["iteration_us"] == pytest.approx(first["replayed"]["iteration_us"])
    assert again["replayed"]["iteration_us"] == pytest.approx(first["replayed"]["iteration_us"])


def test_table_format(capsys):
    assert main(["replay", str(LEGACY)]) == 0
    out = capsys.readouterr().out
    assert "iteration time error: +0.000%" in out and "exposed compute" in out


@pytest.mark.parametrize("argv,expected", [
    (["replay", "/nonexistent/trace.json"], "/nonexistent/trace.json: no such file or directory"),
    (["replay", str(LEGACY), "--step", "99"], "step 99 is not in the trace"),
    (["replay", str(LEGACY), "--drop", "bogus"], "unknown edge class 'bogus'"),
])
def test_errors_are_one_line_without_traceback(argv, expected):
    proc = subprocess.run([sys.executable, "-m", "lumos.cli", *argv], capture_output=True, text=True)
    assert proc.returncode == 2
    assert expected in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_truncated_file_is_one_line_error(tmp_path):
    bad = tmp_path / "cut.json"
    bad.write_bytes(LEGACY.read_bytes()[:1000])
    proc = subprocess.run([sys.executable, "-m", "lumos.cli", "replay", str(bad)], capture_output=True, text=True)
    assert proc.returncode == 2 and "cannot decompress" in proc.stderr and "Traceback" not in proc.stderr


def test_joint_replay_of_an_emulated_pipeline_run(tmp_path, capsys):
    from lumos.emulator import emulate, write_result
    write_result(emulate(["model=tiny", "parallel.tp=1", "parallel.pp=2", "parallel.dp=2", "seed=0",
                          "progress=false"]), tmp_path)
    doc = run_json(capsys, tmp_path, "--joint")
    joint = doc["joint"]
    assert joint["cross_rank"] is True and joint["rendezvous"] > 0  # send/recv pairs between the 2 stages
    assert abs(joint["error_pct"]) < 0.01
    cut = run_json(capsys, tmp_path, "--joint", "--drop", "cross_rank")["joint"]
    assert cut["rendezvous"] == 0
