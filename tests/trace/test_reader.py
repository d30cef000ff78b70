"""The reader on every shipped trace, on both schemas, and on bad input."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lumos.trace import TraceError, find_steps, load_run, load_trace, parse_document, schema, select_step, write_trace

from ..conftest import ALL_TRACES, DLRM, REAL


def test_every_shipped_trace_loads(real_tables):
    assert len(real_tables) == len(ALL_TRACES) == 18
    for path, table in real_tables.items():
        assert len(table) > 0, path
        assert np.all(table.dur >= 0)


def test_dlrm_rank1_counts_match_provenance(real_tables):
    table = real_tables[next(p for p in ALL_TRACES if p.name.startswith("worker1_"))]
    counts = table.category_counts()
    assert counts["kernel"] == 310
    assert counts["gpu_memcpy"] == 16
    assert counts["cpu_op"] == 1633
    assert (table.rank, table.world_size) == (1, 8)
    assert [s.number for s in find_steps(table)] == [10]


def test_legacy_schema_is_mapped():
    table = load_trace(REAL / "kineto" / "resnet50_num_workers_0__worker0.1623143566756.pt.trace.json.gz")
    counts = table.category_counts()
    # Operator/Runtime/Kernel/Memset/Memcpy, ProfilerStep moved from 'Operator' to annotations
    assert counts == {"cpu_op": 23640, "user_annotation": 6, "cuda_runtime": 11923, "kernel": 8772,
                      "gpu_memcpy": 12, "gpu_memset": 312}
    kernels = table.cat == schema.KERNEL
    assert set(np.unique(table.stream[kernels])) == {7}  # legacy tid "stream 7"
    assert [s.number for s in find_steps(table)] == [16, 17, 18, 19, 20, 21]
    assert select_step(table).number == 17  # steady state: not the first
    # legacy runtime args use lower-case 'external id'
    assert np.all(table.ext[table.cat == schema.RUNTIME] >= 0)


def test_iterations_without_profiler_steps_come_from_the_data_loader():
    table = load_trace(REAL / "param" / "resnet_1gpu" / "resnet_kineto.json.gz")
    steps = find_steps(table)
    assert len(steps) == 30
    assert {s.source for s in steps} == {"DataLoader"}
    assert all(a.end <= b.start for a, b in zip(steps, steps[1:]))


def test_directory_is_a_multi_rank_run():
    tables = load_run(DLRM)
    assert [t.rank for t in tables] == list(range(8))


def test_async_cpu_to_gpu_flow_category_trace_links_by_correlation(real_tables):
    table = real_tables[REAL / "hta" / "trace_diff__control__control.json.gz"]
    kernels = table.cat == schema.KERNEL
    runtime_corr = set(table.corr[table.cat == schema.RUNTIME].tolist())
    linked = np.isin(table.corr[kernels], list(runtime_corr))
    assert linked.mean() > 0.99


def test_collective_metadata_is_read():
    table = load_trace(REAL / "hta" / "nccl_parser_config__nccl_data.json.gz")
    nccl = np.flatnonzero((table.cat == schema.KERNEL) & np.array([schema.is_comm_kernel(n) for n in table.name]))
    assert len(nccl) == 21
    first = nccl[np.argmin(table.ts[nccl])]
    assert table.coll_name[first] in ("allreduce", "broadcast")
    assert table.group_size[first] == 2
    assert table.pg_ranks[first] == "[0, 1]"


def test_comm_kernel_mask_is_the_per_row_test_decided_once_per_name():
    table = load_trace(REAL / "hta" / "nccl_parser_config__nccl_data.json.gz")
    per_row = np.array([schema.is_comm_kernel(n) for n in table.name], dtype=bool)
    mask = schema.comm_kernel_mask(table.name)
    assert mask.dtype == bool and np.array_equal(mask, per_row)
    assert 21 <= mask.sum() < len(mask)   # the 21 NCCL kernels, and runtime calls named after them
    assert schema.comm_kernel_mask([]).shape == (0,)
    assert schema.comm_kernel_mask(["ncclDevKernel_SendRecv(...)", "sm90_xmma_gemm", "ncclKernel_AllReduce"]).tolist() \
        == [True, False, True]


@pytest.mark.parametrize("name,content,reason", [
    ("bad.json", b"{not json", "not valid JSON"),
    ("trunc.json.gz", None, "cannot decompress"),
    ("empty.json", b'{"schemaVersion": 1}', "no 'traceEvents' key"),
    ("nots.json", b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "dur": 3}]}', "missing or non-numeric 'ts'"),
    ("nodur.json", b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 3}]}', "missing or non-numeric 'dur'"),
    ("list.json", b"[1, 2]", "top level is not a JSON object"),
])
def test_bad_input_raises_one_error_naming_file_and_reason(tmp_path, name, content, reason):
    path = tmp_path / name
    if content is None:
        path.write_bytes(gzip.compress(b'{"traceEvents": [' * 50)[:40])
    else:
        path.write_bytes(content)
    with pytest.raises(TraceError) as info:
        load_trace(path)
    message = str(info.value)
    assert str(path) in message and reason in message
    assert "\n" not in message


def test_event_without_dur_names_the_event(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "ok", "ts": 1, "dur": 1},
        {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 3}]}))
    with pytest.raises(TraceError, match=r"event #1 'gemm'"):
        load_trace(path)


def test_missing_file_and_missing_step(tmp_path):
    with pytest.raises(TraceError, match="no such file"):
        load_trace(tmp_path / "nope.json.gz")
    table = load_trace(REAL / "kineto" / "resnet50_num_workers_0__worker0.1623143566756.pt.trace.json.gz")
    with pytest.raises(TraceError, match=r"step 99 is not in the trace \(steps present: 16, 17, 18, 19, 20, 21\)"):
        select_step(table, 99)


events_strategy = st.lists(st.fixed_dictionaries({
    "cat": st.sampled_from(["cpu_op", "cuda_runtime", "kernel", "gpu_memcpy", "Operator", "Kernel", "Runtime"]),
    "name": st.text(alphabet="abcdefgh_:", min_size=1, max_size=12),
    "tid": st.integers(0, 5),
    "ts": st.floats(0, 1e9, allow_nan=False, allow_infinity=False),
    "dur": st.floats(0, 1e6, allow_nan=False, allow_infinity=False),
    "corr": st.integers(-1, 1000),
}), min_size=1, max_size=40)


@settings(max_examples=60, deadline=None)
@given(events=events_strategy)
def test_write_then_read_round_trips(tmp_path_factory, events):
    raw = [{"ph": "X", "cat": e["cat"], "name": e["name"], "pid": 1, "tid": e["tid"], "ts": e["ts"],
            "dur": e["dur"], "args": {"correlation": e["corr"]}} for e in events]
    raw.append({"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 5})  # ignored
    path = tmp_path_factory.mktemp("rt") / "t.json.gz"
    write_trace(path, raw, {"distributedInfo": {"rank": 3, "world_size": 4}})
    table = load_trace(path)
    direct = parse_document({"traceEvents": raw}, path)
    assert len(table) == len(events)
    assert table.rank == 3 and table.world_size == 4
    np.testing.assert_array_equal(table.ts, np.array([e["ts"] for e in events]))
    np.testing.assert_array_equal(table.dur, direct.dur)
    np.testing.assert_array_equal(table.corr, np.array([e["corr"] for e in events]))
    assert list(table.name) == [e["name"] for e in events]
    expected = [schema.CATEGORY_CODES[e["cat"].lower()] for e in events]
    np.testing.assert_array_equal(table.cat, expected)
