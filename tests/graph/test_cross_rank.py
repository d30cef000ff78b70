"""Cross-rank rendezvous on a tiny hand-written 2-rank trace: exact edges, lags, durations, replay."""

import pytest

from lumos.analysis.run_replay import replay_run_graph
from lumos.graph.edges.cross_rank import CommOp, match_ops
from lumos.graph.model import EdgeClass
from lumos.graph.run_graph import build_run_graph
from lumos.trace import load_run, write_trace
from lumos.trace.collectives import parse_ranks


def _nccl(kind, ts, dur, stream, corr):
    return {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)",
            "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": {"stream": stream, "device": 0, "correlation": corr, "Collective name": kind,
                     "In msg nelems": 1024, "Out msg nelems": 1024, "Group size": 2, "dtype": "BFloat16",
                     "Process Group Ranks": "[0, 1]"}}


def _rt(name, ts, dur, corr):
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 100, "tid": 100, "ts": ts, "dur": dur,
            "args": {"correlation": corr}}


def _step():
    return {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 100, "tid": 100,
            "ts": 0.0, "dur": 100.0, "args": {}}


@pytest.fixture()
def two_ranks(tmp_path):
    # rank 0: a compute kernel, then a send that waits 10 us for its peer
    r0 = [_step(), _rt("cudaLaunchKernel", 1.0, 2.0, 1),
          {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 5.0, "dur": 10.0,
           "args": {"stream": 7, "device": 0, "correlation": 1}},
          _rt("cudaLaunchKernelExC", 4.0, 2.0, 2), _nccl("send", 16.0, 20.0, 28, 2)]
    # rank 1: a receive posted early, spinning until the send arrives
    r1 = [_step(), _rt("cudaLaunchKernelExC", 1.0, 2.0, 1), _nccl("recv", 3.0, 33.0, 32, 1)]
    for r, ev in enumerate((r0, r1)):
        write_trace(tmp_path / f"rank{r}.json", ev, {"distributedInfo": {"rank": r, "world_size": 2}})
    return load_run(tmp_path)


def test_parse_ranks():
    assert parse_ranks("[0, 4]") == (0, 4)
    assert parse_ranks("[3]") == (3,)
    assert parse_ranks(None) is None
    assert parse_ranks("[a, b]") is None


def test_match_by_direction_and_order():
    ops = [CommOp(0, 0, "send", (0, 1)), CommOp(1, 0, "recv", (0, 1)), CommOp(2, 0, "send", (0, 1)),
           CommOp(10, 1, "recv", (0, 1)), CommOp(11, 1, "send", (0, 1)), CommOp(12, 1, "recv", (0, 1)),
           CommOp(20, 0, "allreduce", (0, 1)), CommOp(21, 1, "allreduce", (0, 1)),
           CommOp(30, 0, "allreduce", (0, 2))]        # rank 2 not included: no rendezvous
    assert match_ops(ops, [0, 1]) == [[0, 10], [1, 11], [2, 12], [20, 21]]


def test_rendezvous_edges_exact(two_ranks):
    g = build_run_graph(two_ranks)
    names = list(g.name)
    r = names.index("rendezvous #0")
    send = next(i for i in range(g.n_tasks) if g.rank[i] == 0 and g.comm[i])
    recv = next(i for i in range(g.n_tasks) if g.rank[i] == 1 and g.comm[i])
    launch0 = next(i for i in range(g.n_tasks) if g.rank[i] == 0 and g.name[i] == "cudaLaunchKernelExC")
    launch1 = next(i for i in range(g.n_tasks) if g.rank[i] == 1 and g.name[i] == "cudaLaunchKernelExC")
    cross = g.cls == EdgeClass.CROSS_RANK
    edges = sorted(zip(g.src[cross].tolist(), g.dst[cross].tolist(), g.lag[cross].round(6).tolist()))
    assert edges == sorted([(launch0, r, 10.0), (r, send, 0.0), (launch1, r, 0.0), (r, recv, 0.0)])
    assert g.summary["rendezvous"] == 1
    # peers finish together: each member lasts from the latest start (16) to the common end (36)
    assert g.dur[send] == pytest.approx(20.0, abs=1e-3)
    assert g.dur[recv] == pytest.approx(20.0, abs=1e-3)
    assert g.ts[r] == 16.0 and g.dur[r] == 0.0


def test_replay_reproduces_measured(two_ranks):
    d = replay_run_graph(two_ranks, engine="reference")
    assert d["rendezvous"] == 1
    assert d["error_pct"] == 0.0
    assert d["measured"] == d["replayed"]
    # the receive spins on its stream from 3 to 36: 33 us of exposed communication on rank 1
    r1 = next(r for r in d["ranks"] if r["rank"] == 1)
    assert r1["replayed"]["iteration_us"] == pytest.approx(33.0, abs=1e-3)
    assert r1["replayed"]["exposed_comm_us"] == pytest.approx(33.0, abs=1e-3)
