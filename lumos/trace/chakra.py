"""MLCommons Chakra execution traces (`.et`): the protobuf wire format, written and read by hand.

A Chakra file is a sequence of length-delimited protobuf messages: one `GlobalMetadata`, then one
`Node` per node, each preceded by its length as a varint. ASTRA-sim reads rank i from
`PREFIX.i.et`; it reads the first message as the metadata whether or not it is one, so a file that
starts with a node silently loses that node. This module encodes and decodes those messages
without the protobuf package (the core stays light, and the bytes are ours to check): varints,
zig-zag, fixed-width little-endian numbers, length-delimited strings and sub-messages, packed
repeated fields (and unpacked ones, which a decoder must accept too). What the fields mean for a
graph is `lumos.graph.chakra`'s business; here a node is its fields and its attributes, each
attribute kept with the oneof field it was stored in, so a test can see that an integer went out
as an integer.

Read from the sources (commits as mirrored on 2026-12-07):
- mlcommons/chakra `schema/protobuf/et_def.proto` (21585d8): field numbers of `Node`,
  `AttributeProto` (its `value` oneof, 3..32), the list messages, `GlobalMetadata`, `NodeType`,
  `CollectiveCommType`;
- mlcommons/chakra `src/third_party/utils/protolib.py`: the length prefix (`encodeMessage`), and
  that a zero length reads as the end of the file (so no message may be empty);
- astra-sim/astra-sim `examples/workload/microbenchmarks/*/4npus_1MB/*.et` (518bd51): the bytes a
  protobuf writer gives (`version` "0.0.4"; a oneof value is written even when it is 0 or false),
  held in `tests/trace/test_chakra_wire.py`.
"""

from __future__ import annotations

import gzip
import os
import re
import struct
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path

from .errors import TraceError

__all__ = ["NodeType", "CollType", "Node", "Metadata", "encode_node", "encode_metadata", "decode_node",
           "decode_metadata", "write_et", "read_et", "et_files", "SCHEMA_VERSION"]

SCHEMA_VERSION = "0.0.4"   # GlobalMetadata.version, as ASTRA-sim's own example traces carry it


class NodeType(IntEnum):
    INVALID_NODE = 0
    METADATA_NODE = 1
    MEM_LOAD_NODE = 2
    MEM_STORE_NODE = 3
    COMP_NODE = 4
    COMM_SEND_NODE = 5
    COMM_RECV_NODE = 6
    COMM_COLL_NODE = 7


class CollType(IntEnum):
    """Chakra's CollectiveCommType."""
    ALL_REDUCE = 0
    REDUCE = 1
    ALL_GATHER = 2
    GATHER = 3
    SCATTER = 4
    BROADCAST = 5
    ALL_TO_ALL = 6
    REDUCE_SCATTER = 7
    REDUCE_SCATTER_BLOCK = 8
    BARRIER = 9


@dataclass
class Node:
    """One Chakra node. `attr`: name -> (oneof field, value), e.g. {"is_cpu_op": ("bool_val", True)}."""
    id: int
    name: str = ""
    type: int = NodeType.INVALID_NODE
    ctrl_deps: list[int] = field(default_factory=list)
    data_deps: list[int] = field(default_factory=list)
    start_time_micros: int = 0
    duration_micros: int = 0
    attr: dict[str, tuple[str, object]] = field(default_factory=dict)

    def value(self, name: str, default=None):
        got = self.attr.get(name)
        return default if got is None else got[1]


@dataclass
class Metadata:
    version: str = SCHEMA_VERSION
    attr: dict[str, tuple[str, object]] = field(default_factory=dict)

    def value(self, name: str, default=None):
        got = self.attr.get(name)
        return default if got is None else got[1]


# -- scalars: how each AttributeProto oneof field is stored -------------------------------------
# name -> (field number, codec); the list form of each is the next field number, `<stem>_list`.
_SCALARS = {"double_val": (3, "double"), "float_val": (5, "float"), "int32_val": (7, "int"),
            "int64_val": (9, "int"), "uint32_val": (11, "uint"), "uint64_val": (13, "uint"),
            "sint32_val": (15, "sint"), "sint64_val": (17, "sint"), "fixed32_val": (19, "fixed32"),
            "fixed64_val": (21, "fixed64"), "sfixed32_val": (23, "sfixed32"), "sfixed64_val": (25, "sfixed64"),
            "bool_val": (27, "bool"), "string_val": (29, "string"), "bytes_val": (31, "bytes")}
_LISTS = {k[:-4] + "_list": (n + 1, codec) for k, (n, codec) in _SCALARS.items()}
_BY_NUMBER = {n: (k, codec, False) for k, (n, codec) in _SCALARS.items()}
_BY_NUMBER.update({n: (k, codec, True) for k, (n, codec) in _LISTS.items()})
_FIXED = {"double": "<d", "float": "<f", "fixed32": "<I", "fixed64": "<Q", "sfixed32": "<i", "sfixed64": "<q"}
_WIRE = {"double": 1, "fixed64": 1, "sfixed64": 1, "float": 5, "fixed32": 5, "sfixed32": 5,
         "string": 2, "bytes": 2}   # the rest are varints (0)


def _varint(v: int) -> bytes:
    if v < 0:
        v += 1 << 64   # negative int32/int64: ten bytes of two's complement, as protobuf writes them
    out = bytearray()
    while v > 0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _key(number: int, wire: int) -> bytes:
    return _varint((number << 3) | wire)


def _len_field(number: int, payload: bytes) -> bytes:
    return _key(number, 2) + _varint(len(payload)) + payload


def _scalar_bytes(codec: str, v) -> bytes:
    """The value alone (no key): varint, fixed-width or length-delimited."""
    if codec in _FIXED:
        return struct.pack(_FIXED[codec], v)
    if codec in ("string", "bytes"):
        data = v.encode("utf-8") if codec == "string" else bytes(v)
        return _varint(len(data)) + data
    if codec == "sint":
        v = int(v)
        return _varint((v << 1) ^ (v >> 63))
    if codec == "bool":
        return b"\x01" if v else b"\x00"
    if not hasattr(v, "__index__"):   # ASTRA-sim aborts on a float where it reads an integer
        raise TypeError(f"an integer field needs an integer, not {v!r}")
    return _varint(v.__index__())


def _attr_message(name: str, payload: bytes) -> bytes:
    return _len_field(1, name.encode("utf-8")) + payload


def _packed(number: int, values) -> bytes:
    body = b"".join(_varint(v.__index__()) for v in values)
    return _len_field(number, body) if body else b""


def encode_node(n: Node) -> bytes:
    """A Node message (proto3: fields at their default are left out; attributes always written)."""
    out = bytearray()
    if n.id:
        out += _key(1, 0) + _varint(int(n.id))
    if n.name:
        out += _len_field(2, n.name.encode("utf-8"))
    if n.type:
        out += _key(3, 0) + _varint(int(n.type))
    out += _packed(4, n.ctrl_deps)
    out += _packed(5, n.data_deps)
    if n.start_time_micros:
        out += _key(6, 0) + _varint(int(n.start_time_micros))
    if n.duration_micros:
        out += _key(7, 0) + _varint(int(n.duration_micros))
    for name, (kind, value) in n.attr.items():
        out += _len_field(10, _attr_message(name, _attr_payload(name, kind, value)))
    return bytes(out)


def _attr_payload(name: str, kind: str, value) -> bytes:
    """The value part of an AttributeProto: its oneof field, keyed."""
    if kind in _SCALARS:
        number, codec = _SCALARS[kind]
        return _key(number, _WIRE.get(codec, 0)) + _scalar_bytes(codec, value)
    if kind in _LISTS:
        number, codec = _LISTS[kind]
        if codec in ("string", "bytes"):   # not packable: one field per value
            inner = b"".join(_key(1, 2) + _scalar_bytes(codec, v) for v in value)
        elif codec in _FIXED:
            body = struct.pack("<" + _FIXED[codec][1] * len(value), *value)
            inner = _len_field(1, body) if body else b""
        else:
            body = b"".join(_scalar_bytes(codec, v) for v in value)
            inner = _len_field(1, body) if body else b""
        return _len_field(number, inner)
    raise ValueError(f"attribute {name!r}: unknown value field {kind!r}")


def encode_metadata(m: Metadata) -> bytes:
    out = bytearray(_len_field(1, m.version.encode("utf-8")) if m.version else b"")
    for name, (kind, value) in m.attr.items():
        out += _len_field(2, _attr_message(name, _attr_payload(name, kind, value)))
    return bytes(out)


# -- decoding ---------------------------------------------------------------------------------
class WireError(ValueError):
    """Bytes that are not the message they should be; `read_et` names the file and the message."""


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise WireError("a varint runs past the end of its message")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise WireError("a varint longer than ten bytes")


def _fields(buf: bytes):
    """(field number, wire type, value) of each field of a message: an int for a varint, bytes for
    the rest (length-delimited payload, or the 4 or 8 raw bytes of a fixed-width field)."""
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = _read_varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _read_varint(buf, pos)
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            value, pos = buf[pos:pos + width], pos + width
            if pos > end:
                raise WireError(f"field {number}: a fixed-width value runs past the end of its message")
        elif wire == 2:
            size, pos = _read_varint(buf, pos)
            value, pos = buf[pos:pos + size], pos + size
            if pos > end:
                raise WireError(f"field {number}: {size} bytes announced, {end - pos + size} left")
        else:
            raise WireError(f"field {number}: wire type {wire} (groups) is not in the Chakra schema")
        yield number, wire, value


def _signed(v: int, bits: int) -> int:
    v &= (1 << 64) - 1
    if v >= 1 << 63:
        v -= 1 << 64
    if bits == 32:   # an int32 is written sign-extended to 64 bits; keep its low 32 as signed
        v = ((v + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)
    return v


def _scalar_value(codec: str, kind: str, wire: int, raw):
    if codec in _FIXED:
        if not isinstance(raw, bytes):
            raise WireError(f"{kind}: a varint where a fixed-width value belongs")
        return struct.unpack(_FIXED[codec], raw)[0]
    if codec == "string":
        return bytes(raw).decode("utf-8", errors="replace")
    if codec == "bytes":
        return bytes(raw)
    if not isinstance(raw, int):
        raise WireError(f"{kind}: a length-delimited value where a varint belongs")
    if codec == "sint":
        return (raw >> 1) ^ -(raw & 1)
    if codec == "bool":
        return bool(raw)
    if codec == "int":
        return _signed(raw, 32 if kind.startswith("int32") else 64)
    return raw & ((1 << 32) - 1) if kind.startswith("uint32") else raw


def _list_values(codec: str, kind: str, payload: bytes) -> list:
    out = []
    for number, wire, raw in _fields(payload):
        if number != 1:
            continue
        if wire == 2 and codec not in ("string", "bytes"):   # packed
            if codec in _FIXED:
                width = struct.calcsize(_FIXED[codec])
                out += [struct.unpack_from(_FIXED[codec], raw, i)[0] for i in range(0, len(raw), width)]
            else:
                pos = 0
                while pos < len(raw):
                    v, pos = _read_varint(raw, pos)
                    out.append(_scalar_value(codec, kind, 0, v))
        else:
            out.append(_scalar_value(codec, kind, wire, raw))
    return out


def _decode_attr(buf: bytes) -> tuple[str, tuple[str, object]]:
    name, kind, value = "", None, None
    for number, wire, raw in _fields(buf):
        if number == 1:
            name = bytes(raw).decode("utf-8", errors="replace")
        elif number in _BY_NUMBER:
            kind, codec, is_list = _BY_NUMBER[number]
            value = _list_values(codec, kind, raw) if is_list else _scalar_value(codec, kind, wire, raw)
    return name, (kind, value)


def _deps(wire: int, raw, into: list) -> None:
    if wire == 2:   # packed
        pos = 0
        while pos < len(raw):
            v, pos = _read_varint(raw, pos)
            into.append(v)
    else:
        into.append(raw)


def decode_node(buf: bytes) -> Node:
    n = Node(id=0)
    for number, wire, raw in _fields(buf):
        if number == 1:
            n.id = raw
        elif number == 2:
            n.name = bytes(raw).decode("utf-8", errors="replace")
        elif number == 3:
            n.type = raw
        elif number == 4:
            _deps(wire, raw, n.ctrl_deps)
        elif number == 5:
            _deps(wire, raw, n.data_deps)
        elif number == 6:
            n.start_time_micros = raw
        elif number == 7:
            n.duration_micros = raw
        elif number == 10:
            name, value = _decode_attr(raw)
            n.attr[name] = value
        # 8, 9 (inputs, outputs: IOInfo strings) carry nothing a replay reads
    return n


def decode_metadata(buf: bytes) -> Metadata:
    m = Metadata(version="")
    for number, _, raw in _fields(buf):
        if number == 1:
            m.version = bytes(raw).decode("utf-8", errors="replace")
        elif number == 2:
            name, value = _decode_attr(raw)
            m.attr[name] = value
    return m


# -- files ------------------------------------------------------------------------------------
def write_et(path: str | os.PathLike, metadata: Metadata, nodes) -> int:
    """Write one rank's trace atomically: the metadata, then each node; returns the bytes written."""
    from .atomic import atomic_open

    size = 0
    with atomic_open(path, "wb") as fh:
        for msg in [encode_metadata(metadata)] + [encode_node(n) for n in nodes]:
            if not msg:
                raise ValueError(f"{path}: an empty message would read as the end of the file")
            head = _varint(len(msg))
            fh.write(head)
            fh.write(msg)
            size += len(head) + len(msg)
    return size


def read_et(path: str | os.PathLike) -> tuple[Metadata, list[Node]]:
    """The metadata and nodes of one `.et` file (plain or gzipped); TraceError naming the message at fault."""
    path = Path(path)
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    msgs, pos = [], 0
    while pos < len(data):
        start = pos
        try:
            size, pos = _read_varint(data, pos)
        except WireError:
            raise TraceError(path, f"message {len(msgs)} at byte {start}: its length prefix is cut off") from None
        if size == 0:   # protolib's decoder stops here too
            break
        if pos + size > len(data):
            raise TraceError(path, f"message {len(msgs)} at byte {start}: {size} bytes announced, "
                                   f"{len(data) - pos} left (the file is cut off)")
        msgs.append(data[pos:pos + size])
        pos += size
    if not msgs:
        raise TraceError(path, "no message: a Chakra trace starts with its GlobalMetadata")
    try:
        meta = decode_metadata(msgs[0])
    except WireError as exc:
        raise TraceError(path, f"message 0 (GlobalMetadata): {exc}") from None
    nodes = []
    for i, msg in enumerate(msgs[1:], start=1):
        try:
            nodes.append(decode_node(msg))
        except WireError as exc:
            raise TraceError(path, f"message {i} (a Node): {exc}") from None
    return meta, nodes


ET_NAME = re.compile(r"^(?P<prefix>.+)\.(?P<rank>\d+)\.et(?:\.gz)?$")


def et_files(path: str | os.PathLike) -> dict[int, Path] | None:
    """{rank: file} of a Chakra trace: a `PREFIX.RANK.et` file, or a directory of them with one prefix
    (as ASTRA-sim reads them); None when `path` is neither a `.et` file nor a directory holding one."""
    path = Path(path)
    if path.is_file():
        if not path.name.endswith((".et", ".et.gz")):
            return None
        m = ET_NAME.match(path.name)
        return {int(m.group("rank")) if m else 0: path}
    if not path.is_dir():
        return None
    files = sorted(p for p in path.iterdir() if p.name.endswith((".et", ".et.gz")))
    if not files:
        return None
    named = {p: ET_NAME.match(p.name) for p in files}
    bad = [p.name for p, m in named.items() if m is None]
    if bad:
        raise TraceError(path, f"{bad[0]} is not named PREFIX.RANK.et, so its rank is unknown")
    prefixes = sorted({m.group("prefix") for m in named.values()})
    if len(prefixes) > 1:
        raise TraceError(path, f"Chakra traces of {len(prefixes)} runs ({', '.join(prefixes[:3])}); "
                               f"give a directory holding one PREFIX.RANK.et set")
    return {int(m.group("rank")): p for p, m in sorted(named.items(), key=lambda pm: int(pm[1].group("rank")))}
