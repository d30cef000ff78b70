"""A short run of every fuzz target (fuzz/harness.py) on the normal build: CI's smoke test of the
harness and of the kernels' checks. The long runs, under AddressSanitizer + UBSan, are
fuzz/run.sh's (fuzz/README.md)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings

from fuzz import harness
from fuzz import run as fuzz_run

def smoke(examples: int) -> settings:
    return settings(max_examples=examples, database=None, deadline=None, derandomize=True,
                    suppress_health_check=list(HealthCheck))
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")   # numpy casting the hostile values


@smoke(300)
@given(harness.traces())
def test_mutated_traces_read_build_replay_and_walk_alike_on_both_paths(case):
    harness.check_trace(case)


@smoke(150)
@given(harness.bent_arrays())
def test_bent_sim_arrays_give_the_same_schedule_or_the_same_clean_error(case):
    harness.check_arrays(case)


@smoke(300)
@given(harness.kernel_calls())
def test_each_kernel_with_one_bent_argument_runs_or_raises_a_clean_error(case):
    harness.check_kernel_call(case)


def test_the_seeds_are_shipped_traces_that_replay():
    assert len(harness.seed_docs()) == len(harness.SEEDS) >= 5
    for data in (harness._dump(doc, 0) for doc in harness.seed_docs()[:3]):
        assert harness.check_trace((data, False)) == {"outcome": "ok"}


def test_the_driver_runs_for_a_bounded_time_and_keeps_a_finding_it_can_replay(tmp_path, monkeypatch, capsys):
    assert fuzz_run.main(["--seconds", "1", "--targets", "arrays,kernels", "--out", str(tmp_path), "--seed", "1"]) == 0
    stats = json.loads(next(tmp_path.glob("stats-*.json")).read_text())
    assert stats["inputs"]["arrays"] > 0 and stats["inputs"]["kernels"] > 0 and not stats["findings"]

    def fails(case):
        raise harness.Finding("the oracle failed")

    monkeypatch.setitem(harness.TARGETS, "arrays", (harness.bent_arrays, fails))
    out = tmp_path / "found"
    assert fuzz_run.main(["--seconds", "1", "--targets", "arrays", "--out", str(out), "--seed", "2"]) == 0
    saved = sorted((out / "findings").glob("arrays-*.bin"))
    assert len(saved) == 1 and "the oracle failed" in saved[0].with_suffix(".txt").read_text()
    assert fuzz_run.main(["--replay", str(saved[0])]) == 1
    assert "Finding: the oracle failed" in capsys.readouterr().err
