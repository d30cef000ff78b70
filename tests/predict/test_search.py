"""`lumos search`: every layout of N GPUs, TP included, ranked, with memory (EMULATED tiny base)."""

from __future__ import annotations

import json

import numpy as np

from lumos.predict.prediction import simulate_plan
from lumos.predict.search import SHORT_PIPELINE, _iteration, candidates, search
from lumos.cli import main as lumos_main


def test_candidates_divide_gpus_layers_and_batch(tiny_plan):
    assert (tiny_plan.tp, tiny_plan.layers) == (2, 4)
    got = candidates(tiny_plan, 16, [1, 2], global_batch=16)
    # TP 8 and 16 do not divide tiny's 4 heads; PP 8 and 16 do not divide its 4 layers
    assert [(c["tp"], c["pp"], c["dp"], c["micro_batch"], c["microbatches"]) for c in got] == [
        (1, 1, 16, 1, 1), (1, 2, 8, 1, 2), (1, 2, 8, 2, 1), (1, 4, 4, 1, 4), (1, 4, 4, 2, 2),
        (2, 1, 8, 1, 2), (2, 1, 8, 2, 1), (2, 2, 4, 1, 4), (2, 2, 4, 2, 2), (2, 4, 2, 1, 8), (2, 4, 2, 2, 4),
        (4, 1, 4, 1, 4), (4, 1, 4, 2, 2), (4, 2, 2, 1, 8), (4, 2, 2, 2, 4), (4, 4, 1, 1, 16), (4, 4, 1, 2, 8)]
    # without a global batch the base's micro-batch count is kept
    assert {c["microbatches"] for c in candidates(tiny_plan, 16, [1], None)} == {tiny_plan.microbatches}
    # 15 GPUs: only TP 1 x PP 1 x DP 15, and 16 sequences do not split over 15 replicas
    assert candidates(tiny_plan, 15, [1], global_batch=16) == []
    # the base's 1F1B unless asked; interleaved where V divides each stage's layers, micro-batches come in
    # whole groups of PP and PP > 2 (tiny's 4 layers over 4 stages: one each, so V 2 never divides)
    assert {c["vp"] for c in got} == {1}
    v2 = candidates(tiny_plan, 16, [1], global_batch=16, vps=[1, 2])
    assert {(c["pp"], c["vp"]) for c in v2} == {(1, 1), (2, 1), (4, 1)}


def test_search_ranks_fitting_layouts_and_lists_the_rest(tiny_runs, capsys):
    assert lumos_main(["search", str(tiny_runs["base"]), "--gpus", "8", "--global-batch", "8",
                       "--micro-batch", "1,2", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {tuple(sorted(r)) for r in rows} == {tuple(sorted(["tp", "cp", "pp", "vp", "dp", "micro_batch", "microbatches",
                                                              "iteration_us", "memory_gib_per_gpu", "fits",
                                                              "replayed_microbatches"]))}
    assert all(r["replayed_microbatches"] == [r["microbatches"]] for r in rows)   # at most 8: replayed whole
    assert len(rows) == 15 and all(r["fits"] for r in rows)
    assert {r["tp"] for r in rows} == {1, 2, 4}
    times = [r["iteration_us"] for r in rows]
    assert times == sorted(times) and times[0] > 0
    # a GPU too small for some layouts: those are listed last, not simulated
    assert lumos_main(["search", str(tiny_runs["base"]), "--gpus", "8", "--global-batch", "8",
                       "--micro-batch", "1", "--gpu-memory-gib", "1.03", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    fit = [r["fits"] for r in rows]
    assert fit == sorted(fit, reverse=True) and not all(fit)
    assert all(r["iteration_us"] is None for r in rows if not r["fits"])


def _replayed(plan, pp, dp, m):
    from lumos.predict.whatif import transform

    return float(simulate_plan(transform(plan, pp=pp, dp=dp, global_batch=m * dp))[2].as_dict()["iteration_us"])


def test_many_micro_batches_are_extrapolated_from_two_replays(tiny_plan):
    assert SHORT_PIPELINE == 8
    c = {"tp": 2, "pp": 4, "dp": 1, "micro_batch": 1, "microbatches": 40}
    t = {m: _replayed(tiny_plan, 4, 1, m) for m in (8, 16, 40)}
    got, replayed = _iteration(tiny_plan, c, exact=False)
    assert replayed == [8, 16]
    assert got == round(t[16] + (40 - 16) * (t[16] - t[8]) / 8, 3)
    exact, replayed = _iteration(tiny_plan, c, exact=True)
    assert replayed == [40] and exact == round(t[40], 3)
    # the 1F1B iteration is affine in the micro-batch count once 8 have run: 0.003% off here
    assert abs(got / exact - 1) < 1e-4
    # 16 micro-batches (2 x 8) or fewer: replayed whole
    assert _iteration(tiny_plan, dict(c, microbatches=16), exact=False) == (round(t[16], 3), [16])


def test_search_does_not_depend_on_its_workers(tiny_runs):
    from lumos.trace import load_run

    tables = load_run(tiny_runs["base"])
    one = search(tables, 8, [1, 2], 64, progress=False, workers=1)
    two = search(tables, 8, [1, 2], 64, progress=False, workers=2)
    assert one == two
    assert any(r["replayed_microbatches"] == [8, 16] for r in one)     # 64 / (dp x mbs) > 16 for some


def test_a_plan_rebuilt_twice_gives_the_same_graph(tiny_plan):
    """The rebuild keeps its templates in the plan's memo (a search rebuilds one plan twice); what one
    rebuild counted must not leak into the next."""
    from lumos.predict.whatif import transform

    def graph(plan, pp, m):
        g = transform(plan, pp=pp, global_batch=m * plan.dp).graph
        return g.dur.copy(), g.src.copy(), g.dst.copy(), g.lag.copy(), g.cls.copy()

    first = graph(tiny_plan, 4, 12)
    assert "templates" in tiny_plan.memo
    graph(tiny_plan, 1, 6)
    again = graph(tiny_plan, 4, 12)
    fresh = graph(tiny_plan.clone(), 4, 12)      # a clone starts without templates
    for a, b, c in zip(first, again, fresh):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)
