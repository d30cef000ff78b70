"""Failure 3: `External id` / `rf_id` offsets between an execution trace and Kineto.

Chakra's trace linker joins a PyTorch execution trace (ET) to the Kineto trace by
`rf_id` and `External id`, and users meet offsets between the two (ids that start
elsewhere, ops missing on one side) as wrong or missing links. Lumos reads the
Kineto trace alone: a kernel, copy or set is tied to the runtime call that launched
it by the `correlation` arg both carry (CUPTI and roctracer write it on each end; the
`ac2g` flow events say the same and are not read). The `External id` (which names
the CPU op) is not used to link anything, so offset or missing External ids change
no edge. What can go wrong is the correlation itself: missing (counted and named,
`test_orphaned_gpu_ops.py`), or one id reused for several calls (handled here).

Real trace: resources/traces/real/hta/more/amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz
(HTA test data, AMD MI250, ROCm 6.2; PROVENANCE.md there). Its GPU ops' External ids
(8, 13, 17, ...) are not their correlation ids (117, 118, 121, ...): a kernel's External
id names the aten op, its correlation id the HIP call.
"""

from __future__ import annotations

import numpy as np
import pytest

from lumos.cli import main
from lumos.graph import build_graph
from lumos.trace import TraceError, load_trace, parse_document

from ..conftest import AMD, REAL
from ..tracegen import TraceBuilder
from .helpers import all_edges, read_events, replay_exact

ET = REAL / "param" / "dlrm_8rank" / "pytorch_et" / "dlrm_eg_0.json.gz"


def _graph_arrays(g):
    return (g.name.tolist(), g.src.tolist(), g.dst.tolist(), g.cls.tolist(), g.lag.tolist(), g.ts.tolist(),
            g.dur.tolist())


def _altered(doc, change) -> dict:
    out = dict(doc)
    out["traceEvents"] = [change(dict(e, args=dict(e.get("args") or {}))) for e in doc["traceEvents"]]
    return out


def test_offset_or_missing_external_ids_change_no_edge():
    doc = read_events(AMD)
    base = build_graph(parse_document(doc, "amd.json"))

    def offset(e):            # the GPU side's External ids shifted, as an ET/Kineto offset would
        if "External id" in e["args"] and e.get("cat") in ("kernel", "gpu_memcpy"):
            e["args"]["External id"] += 100000
        return e

    def missing(e):           # and none at all
        e["args"].pop("External id", None)
        return e

    for change in (offset, missing):
        g = build_graph(parse_document(_altered(doc, change), "amd.json"))
        assert _graph_arrays(g) == _graph_arrays(base)
    assert base.summary["edges"]["launch"] == 16


def test_flow_events_are_not_needed_and_correlation_ids_may_start_anywhere():
    doc = read_events(AMD)
    base = build_graph(parse_document(doc, "amd.json"))
    no_flows = dict(doc, traceEvents=[e for e in doc["traceEvents"] if e.get("cat") not in ("ac2g", "fwdbwd")])
    assert len(no_flows["traceEvents"]) == len(doc["traceEvents"]) - 45   # 37 ac2g + 8 fwdbwd flow events

    def shifted(e):           # both ends' correlation ids moved by the same amount
        if "correlation" in e["args"]:
            e["args"]["correlation"] += 5000
        return e

    for variant in (no_flows, _altered(doc, shifted)):
        g = build_graph(parse_document(variant, "amd.json"))
        assert _graph_arrays(g) == _graph_arrays(base)


def test_one_correlation_id_reused_by_every_launch_ties_each_op_to_the_call_before_it():
    """roctracer has handed out one correlation id for many calls (ROCm/omnitrace#266). The
    launch edge goes to the last call with that id that started by the op's start, never to
    a call made after the op ran (before: every op went to the last call, 2 violations)."""
    t = TraceBuilder()
    for k, (t_call, t_op) in enumerate(((10, 20), (40, 50), (70, 80))):
        t.runtime("cudaLaunchKernel", t_call, 5, corr=7)
        t.gpu(f"k{k}", t_op, 15, corr=7)
    g = build_graph(t.table())
    launch = [(int(g.event[s]), str(g.name[d]), lag) for s, d, c, lag in zip(g.src, g.dst, g.cls, g.lag) if c == 2]
    rows = sorted({r for r, _, _ in launch})
    assert sorted(launch) == [(rows[0], "k0", 5.0), (rows[1], "k1", 5.0), (rows[2], "k2", 5.0)]
    replay_exact(g)


def test_a_kernel_linked_only_by_a_flow_event_is_counted_without_a_launch():
    """A kernel whose `correlation` arg is missing is not linked through the ac2g flow (Kineto
    writes both since PyTorch 1.8; a file with only the flow was edited by hand): it is kept
    and named as a GPU op without a correlation id."""
    t = TraceBuilder()
    t.launch("k", 10, 5, 20, 10)
    t.events[-1]["args"].pop("correlation")
    t.events += [{"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 1, "pid": 100, "tid": 100, "ts": 10},
                 {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 1, "pid": 0, "tid": 7, "ts": 20, "bp": "e"}]
    g = build_graph(t.table())
    assert all_edges(g) == []
    assert g.summary["unlaunched_gpu_ops"] == {"no_correlation": 1}


def test_an_execution_trace_is_refused_in_one_line(capsys):
    line = (f"{ET}: a PyTorch execution trace (schema 1.0.1), not a Kineto trace: pass the Kineto trace of the "
            "same run (Lumos ties kernels to launches by correlation id and reads no execution trace)")
    with pytest.raises(TraceError) as exc:
        load_trace(ET)
    assert str(exc.value) == line
    assert main(["replay", str(ET)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"lumos replay: error: {line}"]


def test_the_shipped_amd_trace_links_by_correlation_not_external_id():
    table = load_trace(AMD)
    g = build_graph(table)
    s, d = g.src[g.cls == 2], g.dst[g.cls == 2]
    assert np.array_equal(table.corr[g.event[s]], table.corr[g.event[d]])
    assert not np.array_equal(table.ext[g.event[s]], table.corr[g.event[d]])
