"""`lumos search`: every layout of N GPUs, TP included, ranked, with memory (EMULATED tiny base)."""

from __future__ import annotations

import json


from lumos.analysis.search import candidates
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


def test_search_ranks_fitting_layouts_and_lists_the_rest(tiny_runs, capsys):
    assert lumos_main(["search", str(tiny_runs["base"]), "--gpus", "8", "--global-batch", "8",
                       "--micro-batch", "1,2", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {tuple(sorted(r)) for r in rows} == {tuple(sorted(["tp", "pp", "dp", "micro_batch", "microbatches",
                                                              "iteration_us", "memory_gib_per_gpu", "fits"]))}
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
