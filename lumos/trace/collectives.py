"""One reading of a communication call, whatever the library, version or field that names it.

The same all-to-all appears as `ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t` (NCCL < 2.19),
`ncclDevKernel_SendRecv` (NCCL >= 2.19, which runs all-to-all as grouped send/recv),
a CPU op `c10d::alltoall_base_`, a range `nccl:all_to_all`, and (PyTorch >= 2.1) a
`record_param_comms` op whose args say `Collective name: all_to_all`. Coalesced calls
become one `ncclDevKernel_Generic` kernel under `nccl:coalesced`, often with no message
size or group in their args. Peer tools that read one of these spellings and not the
others pair the wrong calls or none (users' traces in HTA, Chakra and ASTRA-sim;
`tests/corpus/test_collective_names.py` has them). This module is the one place that maps
them all onto a fixed vocabulary (`KINDS`), so that the graph, the breakdown and the
what-if transforms agree on what a call is.

Where several fields speak, the most specific wins: the `Collective name` arg, then the
names of the CPU ops and ranges that launched the kernel (innermost first), then the
kernel's own name. The kernel name comes last because it names the NCCL algorithm, not
the call: a SendRecv kernel under `nccl:all_to_all` is one all-to-all over its group, not
a set of point-to-point pairs.

Message size and group come from the args where present (`In msg nelems`,
`Out msg nelems`, `Group size`, `dtype`, `Process Group Ranks`, `Process Group Name`),
else the size from the launching op's `Input Dims` and the group from the run
(`lumos.graph.run_graph` infers it from the peers' matching calls); `size_from` and
`group` say which, so nothing unknown is passed on as a number.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from . import schema
from .comm_kernels import comm_kernel_rule

__all__ = ["KINDS", "P2P_KINDS", "DTYPE_BYTES", "Call", "message_bytes", "classify_name", "classify", "classify_rows", "comm_launchers",
           "parse_ranks", "pg_config"]

# The fixed vocabulary. `sendrecv`: a point-to-point kernel seen without the op that says its direction
# (send, recv or an all-to-all); `coalesced`: several calls NCCL ran as one kernel, of kinds the trace
# does not say.
KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce", "gather",
         "scatter", "send", "recv", "sendrecv", "barrier", "coalesced")
P2P_KINDS = frozenset({"send", "recv", "sendrecv"})

# bytes per element of the `dtype` arg record_param_comms gives a collective (c10's ScalarType names,
# c10/core/ScalarType.h); a name not here is taken as 2 bytes, the training dtype of most runs
DTYPE_BYTES = {"BFloat16": 2, "c10::BFloat16": 2, "Half": 2, "c10::Half": 2, "Float": 4, "float": 4, "Double": 8,
               "Long": 8, "Int": 4, "Short": 2, "Char": 1, "Byte": 1, "Bool": 1, "ComplexFloat": 8,
               "ComplexDouble": 16, "Float8_e4m3fn": 1, "Float8_e5m2": 1, "Float8_e4m3fnuz": 1, "Float8_e5m2fnuz": 1,
               "UInt16": 2, "UInt32": 4, "UInt64": 8}


def message_bytes(call: "Call") -> int | None:
    """The call's message in bytes (elements x dtype size; a dtype not in DTYPE_BYTES, or none, as 2), None
    when the trace gives no size."""
    return None if call.nelems is None else int(call.nelems) * DTYPE_BYTES.get(str(call.dtype), 2)


# Library prefixes a name may carry (lower case, underscores removed). A name with one of them is a
# communication call; the rest of it says which.
_PREFIXES = ("void", "ncclkernel", "nccldevkernel", "ncclsymkdevkernel", "nccl::", "nccl:", "rccl:", "c10d::",
             "gloo:", "mpi:", "ucc:", "recordparamcomms")
# Stem -> kind, longest first where one stem starts another (reducescatter before reduce, allgather
# before gather, sendrecv before send).
_STEMS = (("allreduce", "all_reduce"), ("allgather", "all_gather"), ("reducescatter", "reduce_scatter"),
          ("alltoall", "all_to_all"), ("broadcast", "broadcast"), ("reduce", "reduce"), ("gather", "gather"),
          ("scatter", "scatter"), ("sendrecv", "sendrecv"), ("send", "send"), ("recv", "recv"),
          ("barrier", "barrier"), ("coalesced", "coalesced"), ("generic", "coalesced"),
          ("startcoalescing", "coalesced"), ("endcoalescing", "coalesced"))


@functools.lru_cache(maxsize=4096)   # a trace repeats a few hundred names over its thousands of calls
def classify_name(name: str | None, bare: bool = False) -> str | None:
    """The kind (one of `KINDS`) a kernel, op or range name says, else None.

    A name must carry a library prefix (`ncclKernel_`, `ncclDevKernel_`, `nccl:`, `c10d::`,
    `gloo:`, `rccl:`, ...) unless `bare` (the value of a `Collective name` arg, which is bare:
    `allreduce`, `_allgather_base`, `all_to_allv`). `base` variants and `_coalesced` suffixes
    keep their kind (`c10d::_reduce_scatter_base_`, `c10d::allreduce_coalesced_`).

    >>> classify_name("ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)")
    'all_gather'
    >>> classify_name("c10d::alltoall_base_"), classify_name("gloo:all_reduce")
    ('all_to_all', 'all_reduce')
    >>> classify_name("aten::scatter_"), classify_name("recvAnySource", bare=True)
    (None, 'recv')
    """
    if not name:
        return None
    key = str(name).split("(", 1)[0].strip().lower().replace("_", "").replace(" ", "")
    prefixed = False
    for prefix in _PREFIXES:
        if key.startswith(prefix):
            key, prefixed = key[len(prefix):], True
    if not (prefixed or bare):
        return None
    if key.startswith("base"):
        key = key[len("base"):]
    for stem, kind in _STEMS:
        if key.startswith(stem):
            return kind
    return None


def parse_ranks(text) -> tuple[int, ...] | None:
    """'[0, 4]' (the trace's "Process Group Ranks") -> (0, 4); None when absent, empty or malformed."""
    if text is None:
        return None
    if isinstance(text, str):
        return _parse_ranks_text(text)
    if isinstance(text, (list, tuple)):
        try:
            out = tuple(int(x) for x in text)
        except (TypeError, ValueError):
            return None
        return out or None
    return _parse_ranks_text(str(text))


@functools.lru_cache(maxsize=1024)   # one string per process group, over thousands of calls
def _parse_ranks_text(text: str) -> tuple[int, ...] | None:
    body = text.strip().strip("[]()")
    try:
        out = tuple(int(x) for x in body.replace(",", " ").split())
    except ValueError:
        return None
    return out or None


def pg_config(metadata: dict) -> dict[str, tuple[int, ...]]:
    """Process group name -> its ranks, from `distributedInfo.pg_config` (Kineto >= 2024 writes it:
    `[{"pg_name": "0", "pg_desc": "default_pg", "pg_size": 2, "ranks": [0, 1]}, ...]`). Groups whose
    ranks are absent or unreadable are left out: a partial config names only what it knows."""
    dist = metadata.get("distributedInfo")
    conf = dist.get("pg_config") if isinstance(dist, dict) else None
    out: dict[str, tuple[int, ...]] = {}
    for entry in conf if isinstance(conf, list) else ():
        if not isinstance(entry, dict) or entry.get("pg_name") is None:
            continue
        ranks = parse_ranks(entry.get("ranks"))
        if ranks is not None and (entry.get("pg_size") in (None, len(ranks))):
            out[str(entry["pg_name"])] = ranks
    return out


@dataclass(frozen=True)
class Call:
    """What one communication call is, as far as its trace says."""
    kind: str | None              # one of KINDS; None when no field names it
    kind_from: str                # 'args' | 'op' | 'kernel' | ''
    nelems: int | None            # message elements (the larger of in/out: the full buffer)
    size_from: str                # 'args' | 'input_dims' | ''
    dtype: str | None
    group: tuple[int, ...] | None  # the process group's ranks, None when the trace does not say
    group_from: str               # 'args' | 'pg_config' | ''
    group_size: int | None        # `Group size` arg, when given
    carrier: int                  # row of the CPU op the call was issued by (-1: the kernel alone)
    rule: str | None = None       # the rule of `comm_kernels.RULES` that made the kernel communication


def _nelems(dims) -> int | None:
    """Elements of the first tensor in an `Input Dims` list ([[6144], [], ...] -> 6144)."""
    if not isinstance(dims, (list, tuple)):
        return None
    for d in dims:
        if isinstance(d, (list, tuple)) and d and all(isinstance(x, int) and x >= 0 for x in d):
            return int(math.prod(d))
    return None


def classify(table, row: int, launchers: tuple[int, ...] = (), groups: dict | None = None) -> Call:
    """Read one communication kernel (`row`) and the ops that launched it (`launchers`, innermost
    first, from `comm_launchers`). `groups`: process group name -> ranks (`pg_config`)."""
    rows = (row,) + tuple(launchers)
    kind, kind_from = None, ""
    for r in rows:                                   # 1. a Collective name arg, wherever it is
        kind = classify_name(table.coll_name[r], bare=True)
        if kind is not None:
            kind_from = "args"
            break
    if kind is None:                                 # 2. the launching ops' names, innermost first
        for r in launchers:
            kind = classify_name(table.name[r])
            if kind is not None:
                kind_from = "op"
                break
    if kind is None:                                 # 3. the kernel's own name
        kind = classify_name(table.name[row])
        kind_from = "kernel" if kind is not None else ""
    nelems, size_from = None, ""
    for r in rows:
        n = [int(x) for x in (table.in_nelems[r], table.out_nelems[r]) if x is not None and x > 0]
        if n:
            nelems, size_from = max(n), "args"
            break
    if nelems is None:
        for r in launchers:
            nelems = _nelems(table.input_dims[r])
            if nelems is not None:
                size_from = "input_dims"
                break
    dtype = next((str(table.dtype[r]) for r in rows if table.dtype[r] is not None), None)
    group, group_from = None, ""
    for r in rows:
        group = parse_ranks(table.pg_ranks[r])
        if group is not None:
            group_from = "args"
            break
    if group is None and groups:
        for r in rows:
            if table.pg_name[r] is not None and str(table.pg_name[r]) in groups:
                group, group_from = groups[str(table.pg_name[r])], "pg_config"
                break
    size = next((int(table.group_size[r]) for r in rows if table.group_size[r] is not None
                 and table.group_size[r] > 0), None)
    carrier = next((r for r in launchers if table.coll_name[r] is not None
                    or classify_name(table.name[r]) is not None), -1)
    return Call(kind, kind_from, nelems, size_from, dtype, group, group_from, size, carrier,
                comm_kernel_rule(str(table.name[row])))


def classify_rows(table, rows: np.ndarray) -> list[Call]:
    """`classify` of each communication kernel in `rows`. A kernel whose own args name its collective
    and group (Kineto copies record_param_comms' args onto it) needs no launching op read: only the
    others go through the (slower) search for their launchers (`comm_launchers`)."""
    rows = np.asarray(rows, dtype=np.int64)
    own = np.fromiter((table.coll_name[r] is not None and table.pg_ranks[r] is not None for r in rows.tolist()),
                      bool, count=len(rows))
    launchers = comm_launchers(table, rows[~own])
    groups = pg_config(table.metadata)
    return [classify(table, r, launchers.get(r, ()), groups) for r in rows.tolist()]


def comm_launchers(table, rows: np.ndarray) -> dict[int, tuple[int, ...]]:
    """For each GPU row in `rows`: the CPU ops and ranges enclosing the runtime call that launched it
    (same correlation id, same thread), innermost first, keeping only those that speak of
    communication (a communication name or a `Collective name` arg). Found by timestamps on the
    call's thread, not by `External id`, which older traces reuse across threads."""
    rows = np.asarray(rows, dtype=np.int64)
    corr = {int(table.corr[r]): int(r) for r in rows if table.corr[r] >= 0}
    if not corr:
        return {}
    names = table.name
    said = {n: classify_name(n) is not None for n in set(names.tolist())}
    spoken = np.fromiter(map(said.__getitem__, names), bool, count=len(names))
    spoken |= np.fromiter((c is not None for c in table.coll_name), bool, count=len(names))
    ops = np.flatnonzero(np.isin(table.cat, (schema.CPU_OP, schema.ANNOTATION)) & spoken)
    calls = np.flatnonzero((table.cat == schema.RUNTIME) & np.isin(table.corr, list(corr)))
    if not len(calls):
        return {}
    cand = np.concatenate([ops, calls])
    is_call = np.concatenate([np.zeros(len(ops), bool), np.ones(len(calls), bool)])
    order = np.lexsort((-table.dur[cand], is_call, table.ts[cand], table.tid[cand], table.pid[cand]))
    ts, end = table.ts, table.ts + table.dur
    out: dict[int, tuple[int, ...]] = {}
    stack: list[int] = []
    thread = None
    for k in order:
        r = int(cand[k])
        here = (int(table.pid[r]), int(table.tid[r]))
        if here != thread:
            stack, thread = [], here
        while stack and end[stack[-1]] <= ts[r]:
            stack.pop()
        if is_call[k]:
            live = [s for s in reversed(stack) if ts[s] <= ts[r] < end[s]]
            out[corr[int(table.corr[r])]] = tuple(live)
        else:
            stack.append(r)
    return out
