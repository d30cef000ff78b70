"""The Chakra wire format, held against bytes a protobuf writer produced.

GOLDEN is astra-sim/astra-sim `examples/workload/microbenchmarks/all_reduce/4npus_1MB/all_reduce.0.et`
(commit 518bd51, MIT license): a GlobalMetadata with version "0.0.4", then one COMM_COLL node
whose id is 0 (so proto3 leaves it out) and whose `is_cpu_op` is false and `comm_type` 0 (written
anyway: they are oneof values). Our encoder must give those bytes exactly, and read them back.
"""

from __future__ import annotations

import pytest

from lumos.trace import TraceError
from lumos.trace.chakra import (CollType, Metadata, Node, NodeType, decode_node, encode_metadata, encode_node,
                                et_files, read_et, write_et)

GOLDEN = bytes.fromhex("070a05302e302e34481214616c6c5f7265647563655f346e7075735f314d421807520e0a0969735f637075"
                       "5f6f70d80100520d0a09636f6d6d5f747970654800520f0a09636f6d6d5f73697a6548808040")


def test_reads_astra_sims_example_trace(tmp_path):
    f = tmp_path / "all_reduce.0.et"
    f.write_bytes(GOLDEN)
    meta, nodes = read_et(f)
    assert meta.version == "0.0.4" and meta.attr == {}
    assert len(nodes) == 1
    n = nodes[0]
    assert (n.id, n.name, n.type) == (0, "all_reduce_4npus_1MB", NodeType.COMM_COLL_NODE)
    assert n.attr == {"is_cpu_op": ("bool_val", False), "comm_type": ("int64_val", CollType.ALL_REDUCE),
                      "comm_size": ("int64_val", 1 << 20)}


def test_writes_the_same_bytes(tmp_path):
    node = Node(id=0, name="all_reduce_4npus_1MB", type=NodeType.COMM_COLL_NODE,
                attr={"is_cpu_op": ("bool_val", False), "comm_type": ("int64_val", 0),
                      "comm_size": ("int64_val", 1048576)})
    size = write_et(tmp_path / "x.0.et", Metadata(), [node])
    assert (tmp_path / "x.0.et").read_bytes() == GOLDEN
    assert size == len(GOLDEN)


def test_every_value_field_round_trips():
    attrs = {"d": ("double_val", -1.25), "f": ("float_val", 0.5), "i32": ("int32_val", -7),
             "i64": ("int64_val", -(1 << 40)), "u32": ("uint32_val", 4_000_000_000), "u64": ("uint64_val", 1 << 63),
             "s32": ("sint32_val", -3), "s64": ("sint64_val", -(1 << 50)), "fx32": ("fixed32_val", 7),
             "fx64": ("fixed64_val", 1 << 60), "sfx32": ("sfixed32_val", -9), "sfx64": ("sfixed64_val", -(1 << 60)),
             "b": ("bool_val", True), "s": ("string_val", "pg 1 ü"), "by": ("bytes_val", b"\x00\xff"),
             "dl": ("double_list", [0.1, -2.0]), "i32l": ("int32_list", [-1, 2]), "i64l": ("int64_list", [-5, 1 << 33]),
             "u64l": ("uint64_list", [0, 1 << 64 - 1]), "s64l": ("sint64_list", [-1, 1]),
             "fx32l": ("fixed32_list", [1, 2]), "bl": ("bool_list", [True, False]), "sl": ("string_list", ["a", ""]),
             "empty": ("int64_list", [])}
    node = Node(id=12345678901, name="n", type=NodeType.COMP_NODE, ctrl_deps=[1, 300], data_deps=[2],
                start_time_micros=10, duration_micros=1 << 35, attr=attrs)
    back = decode_node(encode_node(node))
    assert back == node


def test_unpacked_repeated_fields_read_too():
    # data_deps = [3, 4] written unpacked (field 5, varint each), as older writers may
    assert decode_node(bytes([0x08, 0x07, 0x28, 0x03, 0x28, 0x04])).data_deps == [3, 4]


def test_an_integer_field_refuses_a_float():
    with pytest.raises(TypeError, match="integer"):
        encode_node(Node(id=1, name="x", type=NodeType.COMP_NODE, attr={"comm_size": ("int64_val", 1.5)}))


def test_a_cut_file_is_one_line_naming_the_message(tmp_path):
    f = tmp_path / "t.0.et"
    f.write_bytes(GOLDEN[:-5])
    with pytest.raises(TraceError, match=r"message 1 at byte 8: 72 bytes announced, 67 left"):
        read_et(f)


def test_metadata_attributes_round_trip(tmp_path):
    meta = Metadata(attr={"lumos_format": ("int64_val", 1), "names": ("string_list", ["stream 7", "thread 1"])})
    assert encode_metadata(meta).startswith(b"\x0a\x05" + b"0.0.4")
    write_et(tmp_path / "a.3.et", meta, [Node(id=1, name="k", type=NodeType.COMP_NODE)])
    assert read_et(tmp_path / "a.3.et")[0] == meta


def test_et_files_read_ranks_from_names(tmp_path):
    for r in (0, 1, 10):
        write_et(tmp_path / f"run.{r}.et", Metadata(), [Node(id=1, name="k", type=NodeType.COMP_NODE)])
    assert list(et_files(tmp_path)) == [0, 1, 10]
    assert et_files(tmp_path / "run.10.et") == {10: tmp_path / "run.10.et"}
    write_et(tmp_path / "other.0.et", Metadata(), [Node(id=1, name="k", type=NodeType.COMP_NODE)])
    with pytest.raises(TraceError, match="2 runs"):
        et_files(tmp_path)
    assert et_files(tmp_path / "missing") is None
