"""`lumos capture moe --ep 2`: two gloo ranks, each with half the experts, tokens dispatched and combined
by all-to-all, and a trace per rank whose MoE layers the structure reads back (torch CPU build)."""

from __future__ import annotations

import pytest

TINY = ["--layers", "2", "--hidden", "32", "--heads", "2", "--kv-heads", "1", "--experts", "4", "--top-k", "2",
        "--expert-ffn", "48", "--shared-expert-ffn", "40", "--seq", "16", "--micro-batch", "2", "--vocab", "64",
        "--steps", "1", "--warmup", "0", "--threads", "1"]


@pytest.fixture(scope="module")
def ep2(tmp_path_factory):
    pytest.importorskip("torch")
    from lumos.cli import main

    out = tmp_path_factory.mktemp("moe_ep2")
    assert main(["capture", "moe", *TINY, "--ep", "2", "--out", str(out)]) == 0
    return out


def test_two_ranks_each_a_trace_with_the_moe_ranges_and_all_to_alls(ep2):
    from lumos.trace.run import load_run

    tables = load_run(ep2)
    assert [(t.rank, t.world_size) for t in tables] == [(0, 2), (1, 2)]
    for t in tables:
        names = [str(n) for n in t.name]
        # per layer forward: the counts, the dispatch and the combine; the backward sends the gradients back
        # the same two ways (2 layers, one step)
        assert names.count("c10d::alltoall_base_") == 2 * 3 + 2 * 2
        assert {"moe/router", "moe/permute", "moe/dispatch", "moe/experts", "moe/combine", "moe/unpermute",
                "moe/shared_expert"} <= set(names)
        assert {f"moe/expert_{2 * t.rank}", f"moe/expert_{2 * t.rank + 1}"} <= set(names)   # its own two experts
        assert not {f"moe/expert_{2 * (1 - t.rank)}"} & set(names)
        assert t.metadata["lumosCapture"]["ep"] == 2


def test_the_structure_reads_the_capture_back(ep2):
    from lumos.predict.whatif import structure_report
    from lumos.trace.run import load_run

    rep = structure_report(load_run(ep2))
    sh, moe = rep["shape"], rep["moe"]
    assert (sh["hidden"], sh["heads"], sh["kv_heads"], sh["ffn"]) == (32, 2, 1, 48)
    assert (moe["experts"], moe["experts_per_rank"], moe["top_k"], moe["ep"]) == (4, 2, 2, 2)
    assert (moe["expert_ffn"], moe["shared_expert_ffn"], moe["tokens"]) == (48, 40, 32)
    assert [sum(row["tokens"]) for row in moe["tokens_per_expert"]] == [32 * 2 * 2] * 2


def test_pinned_ranks_each_run_on_one_core_and_say_the_load(tmp_path):
    """`--pin-core`: rank R on the R-th core this process may use (modulo their count), as `capture gpt --pin-core`;
    each trace says its core and the host's load average as it started."""
    pytest.importorskip("torch")
    import os

    from lumos.cli import main
    from lumos.trace.run import load_run

    allowed = sorted(os.sched_getaffinity(0))
    assert main(["capture", "moe", *TINY, "--ep", "2", "--pin-core", "--out", str(tmp_path)]) == 0
    for t in load_run(tmp_path):
        cap = t.metadata["lumosCapture"]
        assert cap["cpus"] == [allowed[t.rank % len(allowed)]]
        assert len(cap["load_average"]) == 3 and all(x >= 0 for x in cap["load_average"])
