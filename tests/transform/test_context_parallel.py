"""Context parallelism in the predictor: read from a base, its degree changed (`--cp`), against the emulator
(EMULATED)."""

from __future__ import annotations

import pytest

from lumos.cli import main as lumos_main
from lumos.emulator import emulate, write_result
from lumos.predict.prediction import predict
from lumos.trace.run import read_manifest
from lumos.predict.whatif import base_plan, transform
from lumos.trace import load_run

QUIET = ["emulator.comm.jitter_sigma=0", "emulator.compute.jitter_sigma=0", "emulator.rank.slowness_sigma=0",
         "emulator.rank.straggler_prob=0", "emulator.peers.noise_sigma=0"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Llama 3 8B cut to 4 layers, TP 2 x PP 2 x DP 1, at CP 1, 2 and 4 (sequence 8,192)."""
    root = tmp_path_factory.mktemp("cp")
    out = {}
    for cp in (1, 2, 4):
        d = root / f"cp{cp}"
        write_result(emulate(["model=llama3_8b", "model.num_layers=4", "parallel.tp=2", "parallel.pp=2", "parallel.dp=1",
                              f"parallel.cp={cp}", *QUIET], progress=False), d)
        out[cp] = d
    return out


def test_a_cp_base_is_read_as_one(runs):
    plan = base_plan(load_run(runs[2]))
    # the gradients' group counts the CP ranks: DP 1 x CP 2; each rank's tokens are half the sequence
    assert (plan.cp, plan.dp, plan.tp, plan.pp, plan.shape.seq) == (2, 2, 2, 2, 4096)
    roles = {str(plan.st.coll[t]) for t in range(len(plan.role)) if plan.role[t] == "cp"}
    assert roles == {"allgather", "reduce_scatter"}
    assert base_plan(load_run(runs[1])).cp == 1


@pytest.mark.parametrize("base,target", [(2, 4), (4, 2), (2, 1)])
def test_the_cp_degree_as_a_what_if(runs, base, target):
    doc = predict(load_run(runs[base]), {"cp": target}, actual_tables=load_run(runs[target]),
                  actual_manifest=read_manifest(runs[target]))
    assert (doc["target"]["cp"], doc["target"]["dp"], doc["base_config"]["cp"]) == (target, 1, base)
    assert abs(doc["error_pct"]) < 6.0
    assert any(n.startswith(f"context parallelism {base} -> {target}") for n in doc["notes"])


def test_from_a_base_without_cp_the_gathers_are_added(runs):
    """CP 1 -> 2 and 4: each layer's key/value all-gathers (forward and backward) and reduce-scatters added to a
    base that never ran them, then re-grouped and the rank's tokens halved; against the emulator."""
    for target in (2, 4):
        doc = predict(load_run(runs[1]), {"cp": target}, actual_tables=load_run(runs[target]),
                      actual_manifest=read_manifest(runs[target]))
        assert doc["target"]["cp"] == target and doc["base_config"]["cp"] == 1
        assert abs(doc["error_pct"]) < 6.0, doc["error_pct"]
        assert any("CP all-gathers of each layer's keys and values" in n for n in doc["notes"])
    out = transform(base_plan(load_run(runs[1])), cp=2)
    kinds = sorted(str(out.st.coll[t]) for t in range(len(out.role)) if out.role[t] == "cp")
    # 2 layers per stage x 4 micro-batches: a gather per forward, a gather and a reduce-scatter per backward
    assert kinds.count("allgather") == 2 * 2 * 4 * 2 and kinds.count("reduce_scatter") == 2 * 4 * 2
    assert lumos_main(["predict", str(runs[2]), "--cp", "3"]) == 2


def test_search_tries_the_cp_degrees_asked(runs):
    from lumos.predict.search import candidates, search

    plan = base_plan(load_run(runs[2]))
    got = candidates(plan, 8, [1], None, cps=[1, 2, 4])
    assert {(c["tp"], c["cp"], c["pp"], c["dp"]) for c in got} >= {(2, 2, 2, 1), (2, 4, 1, 1), (2, 1, 2, 2)}
    assert all(c["tp"] * c["cp"] * c["pp"] * c["dp"] == 8 for c in got)
    assert {c["cp"] for c in candidates(base_plan(load_run(runs[1])), 8, [1], None, cps=[1, 2])} == {1}
    rows = search(load_run(runs[2]), 8, cps=[2, 4], workers=1, progress=False)
    own = next(r for r in rows if (r["tp"], r["cp"], r["pp"], r["dp"]) == (2, 2, 2, 1))
    # the base's own layout, replayed as search replays (no contention fixed point): within 2% of its measurement
    assert own["iteration_us"] == pytest.approx(read_manifest(runs[2])["iteration_us"], rel=0.02)
    assert any(r["cp"] == 4 and r["iteration_us"] for r in rows)


def test_structure_says_the_cp_degree(runs, capsys):
    assert lumos_main(["replay", str(runs[2]), "--structure"]) == 0
    assert "TP 2 x CP 2 x PP 2 x DP 1;" in capsys.readouterr().out
