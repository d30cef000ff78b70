"""`write_trace_chunks`: the document `write_trace` writes, written chunk by chunk."""

from __future__ import annotations

import gzip

import orjson

from lumos.trace.writer import write_trace, write_trace_chunks

META = {"traceName": "t", "distributedInfo": {"rank": 3, "world_size": 4}}
EVENTS = [{"ph": "X", "name": f"k{i}", "pid": 0, "tid": 7, "ts": 10.0 * i, "dur": 2.5} for i in range(5)]


def test_chunks_give_the_same_bytes_as_one_write(tmp_path):
    write_trace(tmp_path / "one.json.gz", EVENTS, META)
    n = write_trace_chunks(tmp_path / "chunks.json.gz", ([], EVENTS[:2], [], EVENTS[2:3], EVENTS[3:]), META)
    assert n == 5
    assert (tmp_path / "chunks.json.gz").read_bytes() == (tmp_path / "one.json.gz").read_bytes()
    doc = orjson.loads(gzip.decompress((tmp_path / "chunks.json.gz").read_bytes()))
    assert list(doc) == ["schemaVersion", "traceName", "distributedInfo", "traceEvents"]


def test_no_chunk_is_an_empty_event_list(tmp_path):
    assert write_trace_chunks(tmp_path / "e.json", iter(()), None) == 0
    assert orjson.loads((tmp_path / "e.json").read_bytes()) == {"schemaVersion": 1, "traceEvents": []}


def test_a_failing_chunk_leaves_no_file(tmp_path):
    def chunks():
        yield EVENTS
        raise RuntimeError("rank 1 failed")
    try:
        write_trace_chunks(tmp_path / "x.json.gz", chunks())
    except RuntimeError:
        pass
    assert list(tmp_path.iterdir()) == []
