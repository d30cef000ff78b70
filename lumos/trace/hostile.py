"""Hostile trace documents, built to cost the reader what an ordinary trace of their size does not
(findings of a fuzz campaign against the reader): for tests/trace/test_hostile.py and
benchmarks/bench_hostile_load.py, which time them against ordinary documents of the same size.

- `colliding_names`: event names whose raw JSON strings all fall in one slot of the name interner's
  table under the hash it had before it was keyed (`old_span_hash`: lumos/kernels/decode.c, fixed,
  unseeded and invertible). With them, interning was quadratic: 80,000 events took 59 s against 1.1 s
  down the plain path. The interner still hashes with it first (`fast_hash`, free for ordinary names),
  but a lookup that passes 64 taken slots has the table built again under SipHash-1-3 with a key
  drawn per process, in which no name can be built to collide: these names load as fast as any.
- `braces_document`: one event whose args hold a string of `count` '{' (or, `ordinary`, of as many
  'a'). The scanner once sized its table by the document's count of '{' (368 bytes of address space
  each): 80 million of them, 78 KB gzipped, asked for 29 GB. It now grows its table with the events.
"""

from __future__ import annotations

import numpy as np
import orjson

__all__ = ["old_span_hash", "colliding_names", "ordinary_names", "names_document", "braces_document"]

M64 = (1 << 64) - 1
_C0, _C1, _C2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
PREFIX = b"hostile"   # with the opening quote, the raw string's first 8-byte word
SAFE = np.array([c for c in range(0x20, 0x7F) if c not in b'"\\'], dtype=np.uint8)   # plain JSON string bytes
_TAIL = 6             # characters after PREFIX: raw string = '"' + PREFIX + 6 characters + '"' (15 bytes)


def old_span_hash(raw: bytes) -> int:
    """The interner's hash of a raw JSON string (quotes included) before it was keyed."""
    h = _C0 ^ len(raw)
    full = len(raw) - len(raw) % 8
    for k in range(0, full, 8):
        h = ((h ^ int.from_bytes(raw[k:k + 8], "little")) * _C1) & M64
        h ^= h >> 31
    h = ((h ^ int.from_bytes(raw[full:], "little")) * _C2) & M64
    return h ^ (h >> 29)


def colliding_names(count: int, bits: int = 18, seed: int = 0) -> list[str]:
    """`count` distinct names ("hostile" and 6 characters) whose raw strings share their lowest
    `bits` bits of `old_span_hash`, hence one slot of any table of up to 2**bits slots (the interner's
    table has 2**18 for up to 131,072 names).

    The hash's low `bits` bits are those of y ^ (y >> 29), y = x * C2, where x is the state after the
    first word xor the last (the tail): they depend on x mod 2**(29 + bits) only. So draw y with those
    bits as wanted, invert the multiplication, and keep the tails that are plain characters."""
    width = 29 + bits
    assert width <= 8 * (_TAIL - 1) + 7, "the tail holds the bits the slot depends on"
    mask = (1 << width) - 1
    h = _C0 ^ (len(PREFIX) + _TAIL + 2)
    h = ((h ^ int.from_bytes(b'"' + PREFIX, "little")) * _C1) & M64
    first = h ^ (h >> 31)
    inverse = pow(_C2, -1, 1 << 64) & mask
    rng = np.random.default_rng(seed)
    low = np.uint64((1 << bits) - 1)
    safe = np.zeros(256, dtype=bool)
    safe[SAFE] = True
    found: dict[bytes, None] = {}
    while len(found) < count:
        y = rng.integers(0, 1 << width, size=1 << 20, dtype=np.uint64)
        y = (y & ~low) | ((y >> np.uint64(29)) & low)   # slot 0: the low bits equal bits 29.. of y
        x = (y * np.uint64(inverse)) & np.uint64(mask)
        tail = x ^ np.uint64(first & mask)
        chars = np.stack([(tail >> np.uint64(8 * k)) & np.uint64(0xFF) for k in range(_TAIL)], axis=1)
        chars = chars.astype(np.uint8)
        ok = safe[chars].all(axis=1)
        for row in chars[ok]:
            found[bytes(row)] = None
            if len(found) == count:
                break
    names = [(PREFIX + t).decode() for t in found]
    raw = ('"' + names[0] + '"').encode()
    assert old_span_hash(raw) & int(low) == 0 and len(raw) == len(PREFIX) + _TAIL + 2
    return names


def ordinary_names(count: int, seed: int = 0) -> list[str]:
    """`count` distinct names of the same form and length as `colliding_names`, drawn at random."""
    rng = np.random.default_rng(seed + 1)
    found: dict[bytes, None] = {}
    while len(found) < count:
        for row in SAFE[rng.integers(0, len(SAFE), size=(count, _TAIL))]:
            found[bytes(row)] = None
            if len(found) == count:
                break
    return [(PREFIX + t).decode() for t in found]


def names_document(names: list[str]) -> bytes:
    """A trace of one CPU op per name, in order."""
    return orjson.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": n, "ts": k, "dur": 1, "pid": 1,
                                          "tid": 1} for k, n in enumerate(names)]})


def braces_document(count: int, ordinary: bool = False) -> bytes:
    """A trace of one CPU op whose args hold a string of `count` '{' (`ordinary`: 'a')."""
    head = b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "op", "ts": 1, "dur": 2, "pid": 1, "tid": 1, ' \
           b'"args": {"note": "'
    return head + (b"a" if ordinary else b"{") * count + b'"}}]}'
