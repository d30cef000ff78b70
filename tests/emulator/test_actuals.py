"""The coverage actuals of the prediction intervals: many seeds measured without traces, as the
predictor measures traces."""

from __future__ import annotations

import pytest

from lumos.predict.prediction import measure_run
from lumos.emulator.actuals import emulate_actuals, run_actual
from lumos.trace import load_run


def test_run_actual_equals_the_measure_of_the_written_traces(tiny_run):
    out, result = tiny_run
    row = run_actual(result)
    measured = measure_run(load_run(out))
    assert row["critical_rank"] == measured["critical_rank"]
    for key in ("iteration_us", "exposed_compute_us", "overlapped_us", "exposed_comm_us", "other_us"):
        # the written trace rounds each time to the nanosecond
        assert row[key] == pytest.approx(measured[key], abs=0.01), key


def test_emulate_actuals_is_one_row_per_seed_and_each_is_that_seeds_run(tiny_run):
    _, result = tiny_run
    rows = emulate_actuals(["model=tiny"], [3, 4])
    assert [r["seed"] for r in rows] == [3, 4]
    assert {k: v for k, v in rows[0].items() if k != "seed"} == run_actual(result)
    assert rows[0]["iteration_us"] != rows[1]["iteration_us"]   # another seed, another iteration
