"""Failure 2: out-of-order or overlapping call stacks that make cycles in the dependency graph.

Chakra and ASTRA-sim users meet it when the execution trace's parent/child links and the
Kineto timestamps disagree: a child op that ends after its parent, two ops on one thread
that partly overlap, equal timestamps. Lumos makes no parent -> child edges: a thread's
tasks are the leaves of its call tree, chained by start time with each one's duration cut
at the next start (`graph.tasks`), so whatever the nesting says, a thread is one chain and
the graph has no cycle. A parent's time outside its leaves becomes the lag on the chain's
edges, so an unchanged replay puts every task where it was measured.

Each trace here is hand-made and minimal; each asserts the tasks, every edge with its lag,
and a replay that starts and ends every task exactly as measured (`replay_exact`: a cycle
would raise SimulationError, a wrong lag would move a task).
"""

from __future__ import annotations

import numpy as np

from lumos.graph import build_graph

from ..tracegen import BWD, TraceBuilder
from .helpers import all_edges, replay_exact


def _names(g):
    return [str(n) for n in g.name]


def test_a_child_that_ends_after_its_parent():
    t = TraceBuilder()
    t.cpu("aten::linear", 10, 50)            # parent: 10..60
    t.cpu("aten::addmm", 20, 50)             # child: 20..70, ends 10 us after its parent
    t.launch("gemm", 40, 5, 50, 20)          # launch inside the child
    t.cpu("aten::relu", 65, 10)              # starts inside the child, after the parent ended
    t.launch("relu_kernel", 66, 5, 80, 20)
    g = build_graph(t.table())
    assert _names(g) == ["cudaLaunchKernel", "cudaLaunchKernel", "gemm", "relu_kernel"]
    assert all_edges(g) == [
        ("intra_stream", "gemm", "relu_kernel", 0.0),
        ("intra_thread", "cudaLaunchKernel", "cudaLaunchKernel", 21.0),   # 45 -> 66: the parents' time
        ("launch", "cudaLaunchKernel", "gemm", 5.0),
        ("launch", "cudaLaunchKernel", "relu_kernel", 9.0)]
    replay_exact(g)


def test_two_ops_on_one_thread_that_partly_overlap():
    t = TraceBuilder()
    t.cpu("aten::a", 10, 30)                 # 10..40
    t.cpu("aten::b", 30, 30)                 # 30..60: neither holds the other
    t.launch("ka", 15, 5, 50, 20)            # inside a only
    t.launch("kb", 45, 5, 70, 10)            # inside b only
    g = build_graph(t.table())
    assert _names(g) == ["cudaLaunchKernel", "cudaLaunchKernel", "ka", "kb"]
    assert all_edges(g) == [
        ("intra_stream", "ka", "kb", 0.0),
        ("intra_thread", "cudaLaunchKernel", "cudaLaunchKernel", 25.0),   # 20 -> 45
        ("launch", "cudaLaunchKernel", "ka", 30.0),
        ("launch", "cudaLaunchKernel", "kb", 0.0)]
    replay_exact(g)


def test_equal_timestamps_of_a_parent_its_child_and_a_launch():
    t = TraceBuilder()
    t.cpu("aten::outer", 10, 20)             # the same start and duration ...
    t.cpu("aten::inner", 10, 20)             # ... as this one
    t.launch("k", 10, 5, 40, 20)             # and the launch starts with both
    t.cpu("aten::next", 30, 5)               # starts where both end
    g = build_graph(t.table())
    assert _names(g) == ["cudaLaunchKernel", "aten::next", "k"]
    assert all_edges(g) == [
        ("intra_thread", "cudaLaunchKernel", "aten::next", 15.0),
        ("launch", "cudaLaunchKernel", "k", 25.0)]
    replay_exact(g)


def test_a_cpu_op_stamped_inside_a_runtime_call_is_folded_into_it():
    # a driver call or an op whose clock put it a microsecond inside the launch before it
    t = TraceBuilder()
    t.launch("k", 10, 10, 30, 20)            # call 10..20
    t.cpu("aten::empty", 19, 40)             # starts inside the call, runs on to 59
    t.launch("k2", 60, 5, 70, 10)
    g = build_graph(t.table())
    assert _names(g) == ["cudaLaunchKernel", "cudaLaunchKernel", "k", "k2"]
    assert [e for e in all_edges(g) if e[0] == "intra_thread"] == [
        ("intra_thread", "cudaLaunchKernel", "cudaLaunchKernel", 40.0)]
    replay_exact(g)


def test_ops_on_two_threads_that_overlap_with_a_sync_make_no_cycle():
    """The shape that makes a cycle in a graph with parent edges: a backward thread's op
    overlapping the main thread's, a launch on each, and a stream sync on the main thread
    that waits for the other thread's kernel. Here it is a DAG and replays exactly."""
    t = TraceBuilder()
    t.cpu("forward", 10, 100)                                # 10..110
    t.launch("fwd_k", 20, 5, 30, 40)                         # 30..70 on stream 7
    t.cpu("backward", 50, 100, tid=BWD)                      # 50..150, overlaps forward
    t.launch("bwd_k", 60, 5, 70, 50, tid=BWD)                # 70..120, queued behind fwd_k
    t.runtime("cudaStreamSynchronize", 80, 41)               # 80..121: waits for bwd_k
    g = build_graph(t.table())
    assert all_edges(g) == [
        ("intra_stream", "fwd_k", "bwd_k", 0.0),
        ("intra_thread", "cudaLaunchKernel", "cudaStreamSynchronize", 55.0),   # 25 -> 80, then it waits
        ("launch", "cudaLaunchKernel", "bwd_k", 0.0),      # it queued behind fwd_k instead
        ("launch", "cudaLaunchKernel", "fwd_k", 5.0)]
    sync = int(np.flatnonzero(g.name == "cudaStreamSynchronize")[0])
    assert g.proc_name[g.wait_target[sync]] == "stream 7 (GPU 0)"
    assert (g.ts[sync], g.dur[sync]) == (120.0, 1.0)         # blocked until bwd_k ended at 120
    replay_exact(g)
