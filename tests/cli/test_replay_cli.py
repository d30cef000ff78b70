"""`lumos replay` end to end: output shapes, --out round trip, and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from lumos.cli import main

from ..conftest import DLRM, REAL

LEGACY = REAL / "kineto" / "resnet50_num_workers_0__worker0.1623143566756.pt.trace.json.gz"
KEYS = {"iteration_us", "exposed_compute_us", "overlapped_us", "exposed_comm_us", "other_us", "gpu_span_us",
        "step_period_us"}


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
    assert doc["measured"]["iteration_us"] == pytest.approx(19901.0)   # the step period
    assert doc["measured"]["gpu_span_us"] == pytest.approx(18467.0)
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


# --- traces that replayed as "0 tasks" before, and directories that are not one run ----------

def test_rocm_trace_says_which_step_it_took(capsys):
    from ..conftest import AMD
    assert main(["replay", str(AMD)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("rank 0 step 1: 56 tasks (40 CPU, 16 GPU, 0 carried in), 73 edges (2 inferred), "
                           "0 timeline violations")
    assert out[1] == ("  note: default step ProfilerStep#1 taken: ProfilerStep#2 (0.049 ms) holds no CPU op, "
                      "runtime call or annotation")
    assert "  iteration                  9.288         9.288    +0.00" in out   # the step period
    assert "  gpu span                   8.912         8.912    +0.00" in out
    assert "iteration time error: +0.000%" in out


def test_cpu_only_and_triton_traces_replay_nonzero(capsys):
    from ..conftest import CPU_ONLY, TRITON
    cpu = run_json(capsys, CPU_ONLY)
    assert cpu["measured"]["iteration_us"] == cpu["replayed"]["iteration_us"] == 210109.162
    triton = run_json(capsys, TRITON)
    assert triton["measured"]["iteration_us"] == pytest.approx(1.76, abs=1e-3)
    assert triton["graph"]["edges"]["launch"] == 1 and triton["error_pct"] == 0.0


def test_empty_step_is_a_one_line_error():
    from ..conftest import AMD
    proc = subprocess.run([sys.executable, "-m", "lumos.cli", "replay", str(AMD), "--step", "2"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == (
        f"lumos replay: error: {AMD}: step 2 (ProfilerStep#2, 0.049 ms) holds nothing to replay: no CPU op, "
        "runtime call or GPU op launched in it. Steps in the trace: #1 (9.288 ms), #2 (0.049 ms); events by "
        "category: cpu_op 70, user_annotation 3, cuda_runtime 21, kernel 14, gpu_memcpy 2, gpu_user_annotation 2")


def test_unmodelled_device_events_are_named_in_the_summary(tmp_path, capsys):
    from ..tracegen import TraceBuilder
    t = TraceBuilder()
    t.launch("k", 10, 5, 20, 30)
    t.gpu("ccp_op", 60, 5, cat="mtia_ccp_events")
    path = t.write(tmp_path / "t.json")
    assert main(["replay", str(path)]) == 0
    # its 5 us beside the kernel's 30 us: 5 / 35 of the trace's device time
    assert ("  not modelled: 1 device events of categories Lumos does not model (mtia_ccp_events 1), 0.005 ms, "
            "14.3% of the trace's device time" in capsys.readouterr().out.splitlines())
    graph = run_json(capsys, path)["graph"]
    assert graph["unmodelled_device_events"] == {"mtia_ccp_events": 1}
    assert graph["unmodelled_device_us"] == {"mtia_ccp_events": 5.0}


def test_two_files_both_rank_0_are_refused_unless_ranks_from_files(tmp_path, capsys):
    import shutil
    from ..conftest import AMD, TRITON
    shutil.copy(AMD, tmp_path / "a_amd.json.gz")       # neither file carries distributedInfo: both rank 0
    shutil.copy(TRITON, tmp_path / "b_triton.json.gz")
    proc = subprocess.run([sys.executable, "-m", "lumos.cli", "replay", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == (
        f"lumos replay: error: {tmp_path}: the files are not ranks of one run: a_amd.json.gz, b_triton.json.gz "
        "carry no rank (no distributedInfo.rank, and their names say none: rank3, rank-3, rank_3 or worker3); "
        "pass --ranks-from-files to take each file as its own rank, in file-name order")
    assert main(["replay", str(tmp_path), "--ranks-from-files"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("ranks taken from file-name order (--ranks-from-files): rank 0 = a_amd.json.gz, "
                      "rank 1 = b_triton.json.gz")
    doc = run_json(capsys, tmp_path, "--ranks-from-files")
    assert doc["ranks_from_files"] == {"0": "a_amd.json.gz", "1": "b_triton.json.gz"}
    assert [(r["rank"], r["graph"]["gpu_tasks"]) for r in doc["ranks"]] == [(0, 16), (1, 1)]


def test_two_files_claiming_rank_0_are_refused_in_one_line(tmp_path, capsys):
    from ..tracegen import TraceBuilder
    for name in ("r_a.json", "r_b.json"):
        t = TraceBuilder(rank=0)
        t.launch("k", 10, 5, 20, 30)
        t.write(tmp_path / name)
    proc = subprocess.run([sys.executable, "-m", "lumos.cli", "replay", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "the files are not ranks of one run: r_a.json and r_b.json both claim rank 0" in proc.stderr
    doc = run_json(capsys, tmp_path, "--ranks-from-files")
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]


def test_dpro_baseline_on_a_cpu_only_rank_is_an_error_not_zeros():
    from ..conftest import CPU_ONLY
    proc = subprocess.run([sys.executable, "-m", "lumos.cli", "replay", str(CPU_ONLY), "--simulator", "dpro"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == (f"lumos replay: error: {CPU_ONLY}: the dPRO-style baseline (GPU ops only) finds "
                                   "no task in step 551; events by category: cpu_op 4, user_annotation 11")
