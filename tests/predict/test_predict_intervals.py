"""`lumos predict --samples` (prediction intervals) on the emulated tiny runs (EMULATED, not measured)."""

from __future__ import annotations

import json

from lumos.cli import main

INTERVAL_KEYS = {"iteration_us", "exposed_compute_us", "overlapped_us", "exposed_comm_us", "other_us",
                 "samples", "seed"}


def test_predict_cli_samples(tiny_runs, capsys):
    base = str(tiny_runs["base"])
    assert main(["predict", base, "--pp", "4", "--samples", "30", "--seed", "1", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc["interval"]) == INTERVAL_KEYS and doc["interval"]["samples"] == 30
    lo, hi = doc["interval"]["iteration_us"]["95"]
    assert lo <= doc["interval"]["iteration_us"]["median"] <= hi
    assert main(["predict", base, "--pp", "4", "--format", "json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert {k: v for k, v in doc.items() if k != "interval"} == plain
