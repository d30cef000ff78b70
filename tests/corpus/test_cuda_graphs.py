"""Failure 1: kernels launched through cudaGraphLaunch missing from the critical path.

HTA reports it (facebookresearch/HolisticTraceAnalysis#290: "cudaGraphLaunch-launched
kernels sometimes missing from critical path analysis"). CUPTI gives every op of a graph
the correlation id of the cudaGraphLaunch that ran it, so Lumos ties each op to that call
with a launch edge. What the trace never shows is the graph's own dependencies: where a
graph forks onto a second stream and joins back, the join is inferred from the timeline
(`edges.inter_stream`, HOW_GRAPH), or the branch would fall off the critical path.

Real trace: resources/traces/real/hta/negative_queue_length_values_check__rank0.json.gz
(HTA's test data, rank 0 of 16, PROVENANCE.md there): 70 cudaGraphLaunch calls, 14 per
ProfilerStep, each graph on stream 7.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest

from lumos.analysis.critical_path import critical_path, measured_critical_path
from lumos.graph import EdgeClass, build_graph
from lumos.graph.edges.inter_stream import HOW_GRAPH
from lumos.sim import simulate
from lumos.trace import load_trace, schema

from ..conftest import REAL
from ..tracegen import TraceBuilder
from .helpers import all_edges, replay_exact, task

GRAPHS = REAL / "hta" / "negative_queue_length_values_check__rank0.json.gz"


@pytest.fixture(scope="module")
def graph_551():
    table = load_trace(GRAPHS)
    return table, build_graph(table, 551)


def test_every_graph_op_of_a_real_trace_has_its_launch_and_is_on_the_critical_path(graph_551):
    table, g = graph_551
    corr = table.corr[g.event]
    launches = np.flatnonzero(g.name == "cudaGraphLaunch")
    assert len(launches) == 14
    # ops per launch, read off the trace by correlation id (1 to 20 each)
    linked = [(int(corr[s]), int(corr[d])) for s, d, c in zip(g.src, g.dst, g.cls)
              if c == EdgeClass.LAUNCH and g.name[s] == "cudaGraphLaunch"]
    assert all(a == b for a, b in linked)
    assert sorted(collections.Counter(a for a, _ in linked).items()) == [
        (847526, 2), (847574, 1), (849165, 1), (849195, 2), (849231, 2), (849453, 9), (849555, 3), (854955, 1),
        (855545, 20), (858882, 3), (858969, 3), (859076, 1), (860563, 1), (860843, 20)]
    ops = np.flatnonzero(g.kind == 1)
    graph_ops = ops[np.isin(corr[ops], corr[launches])]
    assert len(graph_ops) == 69 and g.in_step[graph_ops].all()
    # the GPU is busy end to end in this step: all 69 lie on the measured critical path
    assert set(graph_ops.tolist()) <= set(measured_critical_path(g).tolist())
    assert g.summary["violations"] == 0
    assert HOW_GRAPH not in g.summary["inferred_how"]   # one stream per graph: no fork to infer


def _fork_join() -> TraceBuilder:
    """One graph launch, forking onto stream 20 and joining back on stream 7:

        thread     |---------- cudaGraphLaunch (10..40) ----------|
        stream 7            |-- A --|-- C --|                       |-- D --|
        stream 20                   |--------------- B ------------|
        time       10       20      40  41  51                      75  85
    A starts before the call returns (graph launches are slow); D waits for B.
    """
    t = TraceBuilder()
    c = t.runtime("cudaGraphLaunch", 10, 30)
    t.gpu("A", 20, 20, stream=7, corr=c)
    t.gpu("B", 45, 30, stream=20, corr=c)     # waits for A: starts 5 us after A ends
    t.gpu("C", 41, 10, stream=7, corr=c)
    t.gpu("D", 75, 10, stream=7, corr=c)
    return t


def test_a_graph_fork_and_join_across_streams_are_edges_and_the_branch_is_critical():
    g = build_graph(_fork_join().table())
    assert all_edges(g) == [
        ("inter_stream", "A", "B", 5.0),             # fork: B started 5 us after A ended, 5 after the call returned
        ("inter_stream", "B", "D", 0.0),             # join: D started when B ended
        ("intra_stream", "A", "C", 1.0),
        ("intra_stream", "C", "D", 0.0),
        ("launch", "cudaGraphLaunch", "A", -20.0),   # A ran 20 us before the call returned
        ("launch", "cudaGraphLaunch", "B", 0.0),
        ("launch", "cudaGraphLaunch", "C", 0.0),
        ("launch", "cudaGraphLaunch", "D", 0.0)]
    assert g.summary["inferred_how"] == {HOW_GRAPH: 2}
    r = replay_exact(g)
    assert r.measured.iteration_us == 65.0    # GPU span: A starts at 20, D ends at 85
    path = [str(g.name[i]) for i in measured_critical_path(g)]
    assert path == ["cudaGraphLaunch", "A", "B", "D"]
    # what-if: the branch 40 us longer delays the join by 40 us, not by nothing
    g.dur[task(g, "B")] += 40.0
    s = simulate(g, engine="reference")
    assert s.end[task(g, "D")] == 125.0
    assert [str(g.name[i]) for i in critical_path(g, s.start, s.end)] == path


def test_a_graph_op_on_another_stream_that_did_not_wait_gets_no_edge():
    t = TraceBuilder()
    c = t.runtime("cudaGraphLaunch", 10, 30)
    t.gpu("A", 41, 20, stream=7, corr=c)
    t.gpu("B", 41, 30, stream=20, corr=c)     # both start when the call returns: no wait
    g = build_graph(t.table())
    assert [e for e in all_edges(g) if e[0] == "inter_stream"] == []


@pytest.mark.parametrize("call", ["cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch"])
def test_graph_launch_names_of_runtime_driver_and_hip(call):
    assert call in schema.GRAPH_LAUNCH_CALLS and call in schema.LAUNCH_CALLS
    t = TraceBuilder()
    c = t.runtime(call, 10, 30)
    t.gpu("A", 20, 20, stream=7, corr=c)
    t.gpu("B", 50, 10, stream=20, corr=c)
    g = build_graph(t.table())
    assert [e[:3] for e in all_edges(g)] == [("inter_stream", "A", "B"), ("launch", call, "A"), ("launch", call, "B")]
