"""Exact edges on the two real CUPTI sync fixtures (which op waits on which)."""

from __future__ import annotations

import numpy as np

from lumos.graph import EdgeClass, WaitKind, build_graph
from lumos.trace import load_trace

from ..conftest import SYNC_FIXTURES


def _edges_by_corr(path):
    table = load_trace(path)
    g = build_graph(table)
    corr = table.corr[g.event]
    edges = {(EdgeClass(c).label, int(corr[s]), int(corr[d])) for s, d, c in zip(g.src, g.dst, g.cls)
             if c != EdgeClass.INTRA_THREAD}
    waits = {(str(g.name[i]), int(corr[i]), WaitKind(g.wait_kind[i]).name, str(g.proc_name[g.wait_target[i]])
              if g.wait_kind[i] == WaitKind.STREAM else int(g.wait_target[i]))
             for i in np.flatnonzero(g.wait_kind)}
    return g, edges, waits


def test_multi_stream_wait_event_links_stream_20_op_to_stream_24_op():
    g, edges, waits = _edges_by_corr(SYNC_FIXTURES / "critical_path__cuda_event_sync_multi_stream__event_sync_trace.json.gz")
    # stream 24 waits on the event recorded (corr 1385) on stream 20: the sgemm (corr 27)
    # recorded before it gates the first op launched on stream 24 after the wait (memset, corr 1411).
    assert ("inter_stream", 27, 1411) in edges
    assert [e for e in edges if e[0] == "inter_stream"] == [("inter_stream", 27, 1411)]
    assert sorted(e for e in edges if e[0] == "launch") == [
        ("launch", c, c) for c in (25, 27, 55, 57, 1411, 1413)]
    assert sorted(e for e in edges if e[0] == "intra_stream") == [
        ("intra_stream", 25, 27), ("intra_stream", 55, 57), ("intra_stream", 1411, 1413)]
    # Event Sync records here belong to cudaEventQuery, which does not block: no sync edge.
    assert not [e for e in edges if e[0] == "sync"]
    assert waits == {("cudaDeviceSynchronize", 1424, "DEVICE", 0)}
    assert g.summary["inferred_edges"] == 0
    assert g.summary["violations"] == 0


def test_single_stream_event_stream_and_device_sync():
    g, edges, waits = _edges_by_corr(SYNC_FIXTURES / "critical_path__cuda_event_sync__event_sync_trace.json.gz")
    # cudaEventSynchronize (corr 1536) waits for the spin kernel (corr 1526) its event recorded;
    # the pageable device-to-host copy (corr 1511) blocks its cudaMemcpyAsync, so the thread's
    # next call (the stream sync, corr 1512) waits for the copy
    assert sorted(e for e in edges if e[0] == "sync") == [("sync", 1511, 1512), ("sync", 1526, 1536)]
    assert g.summary["blocking_copies"] == 1
    assert waits == {("cudaStreamSynchronize", 1512, "STREAM", "stream 7 (GPU 0)"),
                     ("cudaDeviceSynchronize", 1549, "DEVICE", 0)}
    assert sorted(e for e in edges if e[0] == "intra_stream") == [
        ("intra_stream", 1482, 1495), ("intra_stream", 1495, 1505), ("intra_stream", 1505, 1511),
        ("intra_stream", 1511, 1526)]
    assert g.summary["violations"] == 0
    # the event sync's replay duration is what remained after the kernel ended (8 us)
    i = int(np.flatnonzero(g.name == "cudaEventSynchronize")[0])
    assert g.dur[i] == 8.0
