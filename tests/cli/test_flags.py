"""No silent numbers: every flag's value is checked, and a bad one is one line naming the flag and
its limit, exit status 2 (`lumos/commands/flags.py`); what a command cannot do is said, not done."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from lumos.cli import COMMANDS, ONE_RUN, build_parser, main

ROOT = Path(__file__).resolve().parents[2]
H200 = ROOT / "resources" / "traces" / "h200" / "base_r0"          # one H200 GPU, 12 layers
CPU = ROOT / "resources" / "traces" / "fsdp_cpu"                   # CPU captures: no GPU kernel
CPU_TRACE = CPU / "full_1rank_r0" / "rank0.json.gz"


@pytest.fixture(scope="module")
def tiny_pp2(tmp_path_factory):
    """An emulated (not measured) tiny GPT, 4 layers over 2 pipeline stages."""
    out = tmp_path_factory.mktemp("tiny_pp2")
    assert main(["emulate", "model=tiny", "parallel.tp=1", "parallel.pp=2", "parallel.dp=1", f"out={out}",
                 "progress=false", "--quiet"]) == 0
    return out


def error_line(capsys, argv) -> str:
    """The one line a refused command prints (and its exit status is 2)."""
    assert main([str(a) for a in argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("flags, message", [
    (["--dp", "0"], "--dp must be a positive integer, got 0"),
    (["--tp", "0"], "--tp must be a positive integer, got 0"),
    (["--pp", "0"], "--pp must be a positive integer, got 0"),
    (["--layers", "0"], "--layers must be a positive integer, got 0"),
    (["--dp", "-2"], "--dp must be a positive integer, got -2"),
    (["--layers", "-4"], "--layers must be a positive integer, got -4"),
    (["--hidden", "-512"], "--hidden must be a positive integer, got -512"),
    (["--ffn", "0"], "--ffn must be a positive integer, got 0"),
    (["--micro-batch", "0"], "--micro-batch must be a positive integer, got 0"),
    (["--global-batch", "-4"], "--global-batch must be a positive integer, got -4"),
    (["--samples", "-5"], "--samples must be an integer >= 0, got -5"),
    (["--seed", "-1"], "--seed must be an integer >= 0, got -1"),
    (["--step", "-1"], "--step must be an integer >= 0, got -1"),
    (["--compute-speed", "0"], "--compute-speed must be a number > 0, got 0"),
    (["--compute-speed", "-1"], "--compute-speed must be a number > 0, got -1"),
    (["--network-speed", "-2"], "--network-speed must be a number > 0, got -2"),
    (["--network-speed", "nan"], "--network-speed must be a number > 0, got nan"),
    (["--gpu-memory-gib", "0"], "--gpu-memory-gib must be a number > 0, got 0"),
    (["--workspace-gib", "-1"], "--workspace-gib must be a number >= 0, got -1"),
    (["--dp", "two"], "--dp must be a positive integer, got 'two'"),
])
def test_predict_numbers(capsys, flags, message):
    assert error_line(capsys, ["predict", H200, *flags]) == f"lumos predict: error: {message}"


@pytest.mark.parametrize("flags, message", [
    (["--gpus", "0"], "--gpus must be a positive integer, got 0"),
    (["--gpus", "8", "--top", "0"], "--top must be a positive integer, got 0"),
    (["--gpus", "8", "--top", "-1"], "--top must be a positive integer, got -1"),
    (["--gpus", "8", "--micro-batch", "0,2"], "--micro-batch must be comma-separated positive integers, got '0,2'"),
    (["--gpus", "8", "--global-batch", "0"], "--global-batch must be a positive integer, got 0"),
    (["--gpus", "8", "--workers", "0"], "--workers must be a positive integer, got 0"),
])
def test_search_numbers(capsys, flags, message):
    assert error_line(capsys, ["search", H200, *flags]) == f"lumos search: error: {message}"


@pytest.mark.parametrize("argv, message", [
    (["replay", H200, "--samples", "-5"], "--samples must be an integer >= 0, got -5"),
    (["replay", H200, "--seed", "-1"], "--seed must be an integer >= 0, got -1"),
    (["replay", H200, "--gap-threshold-us", "-5"], "--gap-threshold-us must be a number >= 0, got -5"),
    (["replay", H200, "--drop-random", "1"], "--drop-random must be a fraction in [0, 1), got 1"),
    (["diff", H200, H200, "--top", "-1"], "--top must be an integer >= 0, got -1"),
    (["diff", H200, H200, "--step", "3:-1"], "--step takes SA or SA:SB (step numbers, integers >= 0), got '3:-1'"),
    (["emulate", "--realism", "--sample", "0"], "--sample must be a positive integer, got 0"),
    (["emulate", "--calibrate", "vtrain", "--max-evals", "0"], "--max-evals must be a positive integer, got 0"),
    (["capture", "gpt", "--layers", "0", "--out", "x"], "--layers must be a positive integer, got 0"),
    (["capture", "gpt", "--seed", "-1", "--out", "x"], "--seed must be an integer >= 0, got -1"),
])
def test_other_commands_numbers(capsys, argv, message):
    assert error_line(capsys, argv) == f"lumos {argv[0]}: error: {message}"


def test_more_stages_than_layers_is_refused(capsys, tiny_pp2):
    assert error_line(capsys, ["predict", tiny_pp2, "--pp", "8"]) == (
        "lumos predict: error: --pp 8 is more pipeline stages than the model's 4 layers: --pp must be at most 4 "
        "(each stage holds at least one layer)")
    assert error_line(capsys, ["predict", tiny_pp2, "--layers", "1"]) == (
        "lumos predict: error: --layers 1 is fewer layers than the 2 pipeline stages: --layers must be at least 2 "
        "(each stage holds at least one layer)")


def test_an_uneven_split_is_said(capsys, tiny_pp2):
    assert main(["predict", str(tiny_pp2), "--pp", "3", "--format", "json"]) == 0
    assert "layers split unevenly over 3 stages: 2/1/1" in json.loads(capsys.readouterr().out)["notes"]
    assert main(["predict", str(tiny_pp2), "--pp", "4", "--format", "json"]) == 0   # one layer each
    assert not [n for n in json.loads(capsys.readouterr().out)["notes"] if "unevenly" in n]


@pytest.mark.parametrize("command", ["predict", "replay"])
def test_a_closed_pipe_ends_quietly(tiny_pp2, command):
    """`lumos predict ... | head`: the reader has gone; exit 141 (as SIGPIPE would), no traceback."""
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run([sys.executable, "-m", "lumos.cli", command, str(tiny_pp2)], stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=300)
    finally:
        os.close(write)
    assert (proc.returncode, proc.stderr) == (141, "")


def test_out_under_a_file_is_one_line(capsys, tmp_path, tiny_pp2):
    afile = tmp_path / "afile"
    afile.write_text("")
    out = afile / "x.json.gz"
    for command in ("predict", "replay"):
        assert error_line(capsys, [command, H200, "--out", out]) == (
            f"lumos {command}: error: --out {out}: {afile} is a file, not a directory")
    # two ranks are written into a directory: known only after the replay
    assert error_line(capsys, ["replay", tiny_pp2, "--out", afile]) == \
        f"lumos replay: error: {afile}: is a file, not a directory"


def test_two_runs_in_one_directory_name_no_flag_the_command_lacks(capsys, tmp_path):
    shutil.copy(CPU / "full_1rank_r0" / "rank0.json.gz", tmp_path / "a_rank0.json.gz")
    shutil.copy(CPU / "full_1rank_r1" / "rank0.json.gz", tmp_path / "b_rank0.json.gz")
    clash = f"{tmp_path}: the files are not ranks of one run: a_rank0.json.gz and b_rank0.json.gz both claim rank 0"
    for argv in (["predict", tmp_path], ["search", tmp_path, "--gpus", "2"], ["diff", tmp_path, tmp_path]):
        assert error_line(capsys, argv) == f"lumos {argv[0]}: error: {clash}; {ONE_RUN}"
    assert error_line(capsys, ["replay", tmp_path]) == (   # replay has the flag
        f"lumos replay: error: {clash}; pass --ranks-from-files to take each file as its own rank, in file-name order")


def test_replay_samples_says_what_was_asked(capsys, tiny_pp2):
    assert error_line(capsys, ["replay", tiny_pp2, "--samples", "2", "--simulator", "dpro"]) == \
        "lumos replay: error: --samples N (N > 0) samples the Lumos replay; not with --simulator dpro"


def test_kernel_time_ratio_of_a_cpu_trace_says_no_gpu_kernels(capsys):
    assert main(["replay", str(CPU_TRACE), "--durations-from", str(CPU_TRACE)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "  baseline: kernel-time ratio   no GPU kernels" in out and not any("nan" in line for line in out)
    assert main(["replay", str(CPU_TRACE), "--durations-from", str(CPU_TRACE), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["baselines"]["kernel_ratio"] == {"iteration_us": None, "error_pct": None, "note": "no GPU kernels"}


def test_version(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out == f"lumos {version('lumos')}\n"


def _parsers(parser: argparse.ArgumentParser, name: str):
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, p in action.choices.items():
                yield from _parsers(p, f"{name} {sub}")


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_flag_has_help(command):
    top = build_parser(command)
    parser = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    missing = [f"{name} {'/'.join(a.option_strings) or a.dest}" for name, p in _parsers(parser, command)
               for a in p._actions if not isinstance(a, argparse._SubParsersAction) and not a.help]
    assert not missing
