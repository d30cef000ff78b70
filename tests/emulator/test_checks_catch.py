"""The consistency checks must be able to fail: corrupt a trace and see them fire."""

from __future__ import annotations

import copy

from .checks import check_all, xs


def test_checks_catch_a_stream_overlap(tiny_docs):
    ev = copy.deepcopy(tiny_docs[0]["traceEvents"])
    ks = sorted((e for e in xs(ev) if e["cat"] == "kernel" and e["tid"] == 7), key=lambda e: e["ts"])
    ks[10]["ts"] = ks[9]["ts"]          # starts while its predecessor still runs
    assert any("starts before the previous op ends" in m for m in check_all(ev))


def test_checks_catch_a_broken_wait(tiny_docs):
    ev = copy.deepcopy(tiny_docs[0]["traceEvents"])
    rt = {e["args"]["correlation"]: e for e in xs(ev) if e["cat"] == "cuda_runtime"}
    waits = [e for e in xs(ev) if e["cat"] == "cuda_sync" and e["name"] == "Stream Wait Event"
             and e["args"]["stream"] == 7 and e["args"]["wait_on_stream"] == 20]
    assert waits
    # move every TP all-reduce late: compute ops after the waits now start too early
    for e in xs(ev):
        if e["cat"] == "kernel" and e["tid"] == 20:
            e["dur"] += 1e6
    errs = check_all(ev)
    assert any("before the awaited op" in m for m in errs)
    assert rt  # silence unused


def test_checks_catch_a_missing_launch(tiny_docs):
    ev = copy.deepcopy(tiny_docs[0]["traceEvents"])
    k = next(e for e in xs(ev) if e["cat"] == "kernel")
    k["args"]["correlation"] = 10 ** 9
    assert any("no launching runtime" in m for m in check_all(ev))
