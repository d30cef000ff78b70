"""Emulated `tiny` runs (EMULATED, not measured) shared by the transform tests."""

import pytest

from lumos.cli import main as lumos_main


def _emulate(root, tp, pp, dp, seed=0):
    out = root / f"tiny_{tp}x{pp}x{dp}"
    assert lumos_main(["emulate", "model=tiny", f"parallel.tp={tp}", f"parallel.pp={pp}", f"parallel.dp={dp}",
                       f"seed={seed}", f"out={out}", "progress=false", "--quiet"]) == 0
    return out


@pytest.fixture(scope="session")
def tiny_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    return {"base": _emulate(root, 2, 2, 2), "pp4": _emulate(root, 2, 4, 2), "dp4": _emulate(root, 2, 2, 4),
            "tp4": _emulate(root, 4, 2, 2)}


@pytest.fixture(scope="session")
def tiny_plan(tiny_runs):
    from lumos.trace import load_run
    from lumos.predict.whatif import base_plan

    return base_plan(load_run(tiny_runs["base"]))
