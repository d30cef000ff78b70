"""Fuzz targets: the C kernels (lumos/kernels/) against their plain twins, on hostile input.

Three targets, each a strategy (Hypothesis, already a test dependency: nothing new to install) and
a check. The oracle is the plain path: what the C kernels give must be what the pure-Python
definitions give (`LUMOS_JIT=never`: orjson + parse_document, simulate_reference,
critical_path_reference), and the only errors allowed are the clean ones.

- `trace`: one of the small shipped traces (`SEEDS`), mutated: a window of its events, fields set
  to hostile values (huge, negative, fractional and string numbers, wrong types, numbers JSON
  cannot hold), keys dropped, events duplicated, reordered or swapped field for field,
  `distributedInfo` and the top level bent, then bytes edited or cut, gzipped or not. The file is
  loaded, its graph built, replayed and walked (critical paths of the replay and of the
  measurement) with the C kernels (`LUMOS_JIT=always`) and without (`never`): the same table,
  graph, schedule and paths, or the same error (type and message) at the same stage; and an error
  must be a TraceError, UserError or SimulationError (what `lumos replay` prints as one line) or
  at worst a ValueError (counted apart: a traceback in the CLI).
- `arrays`: a random execution graph (ranks, threads, streams, launches, stream and device syncs,
  cycles, floors) as `prepare()` flattens it, then at most one hostile edit of the SimArrays (a
  value out of its table, a pointer array going down, a length, a dtype, a count) or a valid but
  unusual one (stream ops that are not GPU ops or are listed twice, in-degrees that do not count
  the edges, ranks without streams). simulate_compiled and simulate_reference must give the same
  schedule (where the arrays describe one graph and every time is ordered: `_one_graph`,
  `_ordered`) or the same error type, a ValueError or TypeError; the kernel called directly (no
  Python check, each work array its own allocation, so AddressSanitizer sees a write past any of
  them) agrees; on a graph that finishes, the compiled and reference critical-path walks agree.
- `kernels`: every kernel of the replay (simulate, longest_path, walk, leaf_walk) called
  directly with valid arguments of a random graph and one of them bent: a wrong value, length,
  dtype, layout (strided, 2-D, read-only), an argument that shares memory with another, a count
  that is not one. A result or a ValueError / TypeError, nothing else (walk's IndexError for a
  device wait on a rank without streams is the reference's own).

`LUMOS_KERNELS_DIR=DIR` (fuzz/run.sh sets it) loads `lumos._kernels` from DIR/lumos (the
AddressSanitizer build of fuzz/asan_build.sh) in place of the installed one; import this module
before anything imports the kernels. The driver is fuzz/run.py; tests/fuzz/ runs each target for a
few examples in CI.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gzip
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _use_kernels_from_env() -> str | None:
    """Load lumos._kernels from $LUMOS_KERNELS_DIR/lumos (a sanitizer build) in place of the installed one."""
    where = os.environ.get("LUMOS_KERNELS_DIR")
    if not where:
        return None
    pkg = str(Path(where).resolve() / "lumos")
    if "lumos._kernels" in sys.modules and not sys.modules["lumos._kernels"].__file__.startswith(pkg):
        raise RuntimeError("lumos._kernels was imported before fuzz.harness could load it from LUMOS_KERNELS_DIR")
    import lumos

    if pkg not in lumos.__path__:
        lumos.__path__.insert(0, pkg)
    from lumos import _kernels

    if not _kernels.__file__.startswith(pkg):
        raise RuntimeError(f"LUMOS_KERNELS_DIR={where}: no lumos/_kernels*.so there (fuzz/asan_build.sh builds it)")
    return _kernels.__file__


KERNELS_FILE = _use_kernels_from_env()

import numpy as np  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from lumos import jit  # noqa: E402

# The small shipped traces (tests/conftest.py lists them all): every one loads, builds and replays.
_REAL = ROOT / "resources" / "traces" / "real"
SEEDS = [
    _REAL / "hta" / "more" / "cpu_only__rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
    _REAL / "hta" / "more" / "triton_example__triton_example.json.gz",
    _REAL / "hta" / "more" / "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    _REAL / "hta" / "sync_fixtures" / "critical_path__cuda_event_sync__event_sync_trace.json.gz",
    _REAL / "hta" / "sync_fixtures" / "critical_path__cuda_event_sync_multi_stream__event_sync_trace.json.gz",
    *sorted((_REAL / "param" / "dlrm_8rank" / "kineto").glob("*.json.gz"))[:2],
]

# Errors a malformed input may end in. CLEAN: what `lumos replay` prints as one line (a
# SimulationError becomes a UserError there). A plain ValueError is allowed but counted apart.
ALLOWED_ARRAY_ERRORS = (ValueError, TypeError)


def clean_errors() -> tuple[type, ...]:
    from lumos.errors import UserError
    from lumos.sim import SimulationError
    from lumos.trace import TraceError
    return TraceError, UserError, SimulationError


class Finding(AssertionError):
    """The oracle failed: the paths disagree, or an error that is not allowed."""


@contextlib.contextmanager
def jit_mode(mode: str):
    old = os.environ.get("LUMOS_JIT")
    os.environ["LUMOS_JIT"] = mode
    try:
        yield
    finally:
        if old is None:
            del os.environ["LUMOS_JIT"]
        else:
            os.environ["LUMOS_JIT"] = old


def _work_dir() -> Path:
    """Where the input being run is written ($FUZZ_OUT/current: after a crash, the reproducer)."""
    out = os.environ.get("FUZZ_OUT")
    d = Path(out) / "current" if out else Path(tempfile.gettempdir()) / f"lumos-fuzz-{os.getpid()}"
    d.mkdir(parents=True, exist_ok=True)
    return d


# ============================================================================================
# trace: mutated shipped traces, the whole replay pipeline on both paths
# ============================================================================================

@functools.cache
def seed_docs() -> tuple[dict, ...]:
    import orjson
    return tuple(orjson.loads(gzip.decompress(p.read_bytes())) for p in SEEDS)


class Raw:
    """A JSON token written as is (numbers JSON parsers disagree on, escapes, broken tokens)."""

    def __init__(self, text: bytes):
        self.text = text


RAW_TOKENS = [b"1e400", b"-1e400", b"1e-400", b"99999999999999999999999", b"-99999999999999999999",
              b"9223372036854775807", b"9223372036854775808", b"-9223372036854775809", b"18446744073709551616",
              b"1" * 320, b"0.000000000000000000000000000001", b"1.5e308", b"1e", b"1e+", b"-", b"01", b"1.", b".5",
              b"NaN", b"Infinity", b"-Infinity", b"0x10", b"+1", b'"\\ud800"', b'"\\udc00\\ud800x"',
              b'"\\u0000"', b'"\\""', b'"a\\/b"', b'"\\u00e9\\u4e2d"', b'"\xc3\xa9"', b'"\xff\xfe"', b'"\xed\xa0\x80"',
              b"[" * 40 + b"]" * 40, b"{" * 3 + b"}" * 3, b"tru", b"nul", b'"' + b"{" * 500 + b'"']
VALUES = [None, True, False, 0, 1, -1, 2, 3, 7, 255, 2**31 - 1, 2**31, -2**31 - 1, 2**32, 2**53 + 1, 2**62,
          2**63 - 1, 2**63, -2**63, -2**63 - 1, 2**64, 10**20, 10**300, 0.5, -0.0, 3.75, 1e15, 1e30, -1e30, 1e-300,
          1.7976931348623157e308, "", "0", "7", "-3", "stream 7", "1e30", "99999999999999999999", "x" * 200,
          "\u00e9\u4e2d", [], [1], [0, 1], {}, {"a": 1}, {"device": 0, "stream": 7}, [[[[]]]]]
CATS = ["kernel", "Kernel", "cpu_op", "operator", "cuda_runtime", "cuda_driver", "runtime", "gpu_memcpy",
        "gpu_memset", "user_annotation", "gpu_user_annotation", "python_function", "ac2g", "cuda_sync",
        "fwdbwd", "Trace", "overhead", ""]
NAMES = ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#-1", "ProfilerStep#99999999999999999999",
         "cudaLaunchKernel", "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
         "cudaEventRecord", "cudaStreamWaitEvent", "cudaMemcpyAsync", "cudaGraphLaunch", "hipLaunchKernel",
         "ncclKernel_AllReduce_RING_LL_Sum_float", "nccl:all_reduce", "record_param_comms", "aten::mm",
         "Memcpy HtoD (Pageable -> Device)", "## forward ##", "Optimizer.step#SGD.step", "Event Sync"]
EVENT_KEYS = ["ph", "cat", "name", "ts", "dur", "pid", "tid", "args", "id", "s", "bp"]


def _arg_keys() -> list[str]:
    from lumos.trace import scan
    return list(scan.ARG_KEYS)


@st.composite
def hostile_values(draw, key: str | None = None):
    pick = draw(st.integers(0, 9))
    if pick == 0:
        return Raw(draw(st.sampled_from(RAW_TOKENS)))
    if pick == 1 and key in ("cat", None):
        return draw(st.sampled_from(CATS))
    if pick == 2 and key in ("name", "Collective name", None):
        return draw(st.sampled_from(NAMES))
    if pick == 3 and key == "ph":
        return draw(st.sampled_from(["X", "B", "E", "i", "f", "s", "t", "M", "x", ""]))
    return draw(st.sampled_from(VALUES))


def _dump(doc, style: int) -> bytes:
    """JSON text of `doc`, Raw tokens in place."""
    raws: list[bytes] = []

    def enc(o):
        if isinstance(o, Raw):
            raws.append(o.text)
            return f"\x00RAW{len(raws) - 1}\x00"
        raise TypeError(type(o).__name__)

    seps = [(",", ":"), (", ", ": "), (" , ", " :\t"), (",\n", ":")][style % 4]
    text = json.dumps(doc, separators=seps, default=enc, ensure_ascii=bool(style & 4), allow_nan=False)
    data = text.encode("utf-8", "surrogatepass")
    for i, raw in enumerate(raws):
        data = data.replace(f'"\\u0000RAW{i}\\u0000"'.encode(), raw, 1)
    return data


@st.composite
def traces(draw) -> tuple[bytes, bool]:
    """(bytes, gzipped) of a mutated shipped trace."""
    seeds = seed_docs()
    doc = dict(seeds[draw(st.integers(0, len(seeds) - 1))])
    events = doc.get("traceEvents", [])
    if len(events) > 60 and draw(st.integers(0, 2)) > 0:   # a window of events, cut anywhere
        at = draw(st.integers(0, len(events) - 1))
        events = events[at:at + draw(st.integers(1, 300))]
    events = list(events)
    doc["traceEvents"] = events
    arg_keys = _arg_keys()

    def event(i):
        ev = events[i]
        if isinstance(ev, dict):
            ev = events[i] = dict(ev, args=dict(ev["args"])) if isinstance(ev.get("args"), dict) else dict(ev)
        return ev

    for _ in range(draw(st.integers(0, 8))):
        op = draw(st.integers(0, 10))
        if not events and op < 8:
            continue
        i = draw(st.integers(0, max(0, len(events) - 1)))
        if op <= 2:    # an event field
            ev = event(i)
            if isinstance(ev, dict):
                key = draw(st.sampled_from(EVENT_KEYS))
                ev[key] = draw(hostile_values(key))
        elif op <= 4:  # an args field
            ev = event(i)
            if isinstance(ev, dict):
                if not isinstance(ev.get("args"), dict):
                    ev["args"] = {}
                key = draw(st.sampled_from(arg_keys))
                ev["args"][key] = draw(hostile_values(key))
        elif op == 5:  # drop a key
            ev = event(i)
            if isinstance(ev, dict) and ev:
                ev.pop(draw(st.sampled_from(sorted(ev))), None)
        elif op == 6:  # a field copied from another event (values that make sense somewhere else)
            ev, other = event(i), events[draw(st.integers(0, len(events) - 1))]
            if isinstance(ev, dict) and isinstance(other, dict) and other:
                key = draw(st.sampled_from(sorted(other)))
                ev[key] = other[key]
        elif op == 7:  # duplicate, move or replace an event
            j = draw(st.integers(0, len(events)))
            how = draw(st.integers(0, 2))
            if how == 0:
                events.insert(j, events[i])
            elif how == 1:
                events.insert(j, events.pop(i))
            else:
                events[i] = draw(hostile_values())
        elif op == 8:  # distributedInfo
            info = doc.get("distributedInfo")
            info = dict(info) if isinstance(info, dict) else {}
            key = draw(st.sampled_from(["rank", "world_size", "backend", "pg_count", "pg_config", "nccl_version"]))
            info[key] = draw(hostile_values())
            doc["distributedInfo"] = info if draw(st.integers(0, 5)) else draw(hostile_values())
        elif op == 9:  # the top level
            key = draw(st.sampled_from(["traceEvents", "distributedInfo", "deviceProperties", "schemaVersion",
                                        "displayTimeUnit", "baseTimeNanoseconds", "nodes"]))
            if key != "traceEvents" or draw(st.integers(0, 3)) == 0:
                doc[key] = draw(hostile_values())
        else:          # many events under one name (the interner)
            name = draw(st.sampled_from(NAMES))
            for k in range(i, min(len(events), i + 50)):
                ev = event(k)
                if isinstance(ev, dict):
                    ev["name"] = name
    data = bytearray(_dump(doc, draw(st.integers(0, 7))))
    for _ in range(draw(st.integers(1, 3)) if draw(st.integers(0, 4)) == 0 else 0):   # byte edits
        at = draw(st.integers(0, max(0, len(data) - 1)))
        how = draw(st.integers(0, 2))
        ch = draw(st.sampled_from(b'{}[]",:\\ 0123456789.eE+-tfnulx\x00\x1f\xc3\xa9\xff'))
        if how == 0 and data:
            del data[at]
        elif how == 1:
            data.insert(at, ch)
        elif data:
            data[at] = ch
    if draw(st.integers(0, 15)) == 0:
        data = data[:draw(st.integers(0, len(data)))]
    return bytes(data), draw(st.booleans())


def _pipeline(path: Path) -> tuple[list, tuple | None]:
    """What `lumos replay` computes of one file, stage by stage: (results, error as (stage, type, message))."""
    from lumos.analysis.critical_path import critical_path, measured_critical_path
    from lumos.graph import build_graph
    from lumos.sim import simulate
    from lumos.trace import load_trace

    got: list = []
    stage = "load"
    try:
        table = load_trace(path)
        got.append(table)
        stage = "build"
        graph = build_graph(table)
        got.append(graph)
        stage = "replay"
        schedule = simulate(graph)
        got.append(schedule)
        stage = "critical path"
        got.append(critical_path(graph, schedule.start, schedule.end))
        stage = "measured critical path"
        got.append(measured_critical_path(graph))
    except Exception as exc:  # noqa: BLE001 - every error is compared and classified
        return got, (stage, type(exc), str(exc))
    return got, None


def _same_array(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype == object:
        return a.tolist() == b.tolist() and [type(x) for x in a.ravel()] == [type(x) for x in b.ravel()]
    return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))


def _differences(plain, fast) -> list[str]:
    """Where two pipeline results differ (empty: the same)."""
    from lumos.graph import Graph
    from lumos.sim import Schedule
    from lumos.trace import TraceTable

    if type(plain) is not type(fast):
        return [f"{type(plain).__name__} vs {type(fast).__name__}"]
    if isinstance(plain, TraceTable):
        out = [c for c in plain.columns() if not _same_array(getattr(plain, c), getattr(fast, c))]
        for attr in ("path", "rank", "world_size", "metadata", "unmodelled", "unmodelled_us"):
            if getattr(plain, attr) != getattr(fast, attr):
                out.append(attr)
        return [f"table.{c}" for c in out]
    if isinstance(plain, Graph):
        out = [f for f in Graph.TASK_FIELDS + Graph.PROC_FIELDS + Graph.EDGE_FIELDS
               if not _same_array(getattr(plain, f), getattr(fast, f))]
        if (plain.finish_floor is None) != (fast.finish_floor is None) or (
                plain.finish_floor is not None and not _same_array(plain.finish_floor, fast.finish_floor)):
            out.append("finish_floor")
        return [f"graph.{f}" for f in out]
    if isinstance(plain, Schedule):
        out = [f for f in ("start", "end") if not _same_array(getattr(plain, f), getattr(fast, f))]
        if plain.abandoned_waits != fast.abandoned_waits:
            out.append("abandoned_waits")
        return [f"schedule.{f}" for f in out]
    return [] if _same_array(plain, fast) else ["critical path"]


STAGES = ("table", "graph", "schedule", "critical path", "measured critical path")


def check_trace(case: tuple[bytes, bool]) -> dict:
    """Both paths on one mutated trace; a Finding unless they agree and end cleanly. Returns what
    happened (for the driver's counts)."""
    data, gz = case
    path = _work_dir() / ("trace.json.gz" if gz else "trace.json")
    path.write_bytes(gzip.compress(data, compresslevel=1) if gz else data)
    with jit_mode("never"):
        plain, plain_err = _pipeline(path)
    with jit_mode("always"):
        fast, fast_err = _pipeline(path)
    for stage, p, f in zip(STAGES, plain, fast):
        diff = _differences(p, f)
        if diff:
            raise Finding(f"trace: the C and plain paths differ at {stage}: {', '.join(diff[:6])}")
    if (plain_err is None) != (fast_err is None) or len(plain) != len(fast):
        raise Finding(f"trace: one path failed, the other not: plain {_brief(plain_err)}, C {_brief(fast_err)}")
    if plain_err is not None:
        if plain_err != fast_err:
            raise Finding(f"trace: the paths fail differently: plain {_brief(plain_err)}, C {_brief(fast_err)}")
        stage, kind, message = plain_err
        if not issubclass(kind, clean_errors() + (ValueError,)):
            raise Finding(f"trace: {kind.__name__} at {stage} (not a clean error): {message[:300]}")
        clean = issubclass(kind, clean_errors())
        return {"outcome": "error" if clean else "ValueError", "stage": stage, "type": kind.__name__,
                "message": message}
    return {"outcome": "ok"}


def _brief(err) -> str:
    return "ok" if err is None else f"{err[1].__name__} at {err[0]}: {err[2][:200]}"


# ============================================================================================
# arrays: random execution graphs, their SimArrays bent, both replay cores
# ============================================================================================

@st.composite
def graphs(draw):
    """A random execution graph: ranks with threads and streams, launches, syncs, maybe cycles."""
    from lumos.graph import EdgeClass, Graph, TaskKind, WaitKind

    CPU, GPU = int(TaskKind.CPU), int(TaskKind.GPU)
    n_ranks = draw(st.integers(1, 3))
    proc_kind, proc_rank = [], []
    for r in range(n_ranks):
        for _ in range(draw(st.integers(1, 2))):
            proc_kind.append(CPU)
            proc_rank.append(r)
        for _ in range(draw(st.integers(0, 3))):
            proc_kind.append(GPU)
            proc_rank.append(r)
    n_procs = len(proc_kind)
    n = draw(st.integers(0, 40))
    proc = [draw(st.integers(0, n_procs - 1)) for _ in range(n)]
    kind = [proc_kind[p] for p in proc]
    times = st.sampled_from([0.0, 0.0, 0.5, 1.0, 1.0, 2.0, 3.0, 7.0, 10.0, 1e-9, 1e6])
    dur = [draw(times) for _ in range(n)]
    ts = [draw(st.sampled_from([0.0, 1.0, 1.0, 2.0, 5.0, 5.0, 9.0])) for _ in range(n)]
    cyclic = draw(st.integers(0, 7)) == 0
    edges = []
    for _ in range(draw(st.integers(0, 2 * n)) if n > 1 else 0):
        s, d = draw(st.integers(0, n - 1)), draw(st.integers(0, n - 1))
        if s == d:
            continue
        if not cyclic and s > d:
            s, d = d, s
        launch = kind[s] == CPU and kind[d] == GPU and draw(st.booleans())
        cls = EdgeClass.LAUNCH if launch else draw(st.sampled_from(list(EdgeClass)))
        edges.append((s, d, int(cls), draw(st.sampled_from([0.0, 0.0, 0.5, 1.0, 3.0]))))
    has_in = {d for _, d, _, _ in edges}
    release = [(-np.inf if v in has_in else 0.0) if draw(st.integers(0, 3)) else draw(times) for v in range(n)]
    wait_kind, wait_target = [0] * n, [-1] * n
    streams = [p for p in range(n_procs) if proc_kind[p] == GPU]
    for v in range(n):
        if kind[v] == CPU and draw(st.integers(0, 3)) == 0:
            if draw(st.booleans()):
                wait_kind[v] = int(WaitKind.STREAM)
                wait_target[v] = (draw(st.sampled_from(streams)) if streams and draw(st.integers(0, 5))
                                  else draw(st.integers(-1, n_procs - 1)))
            else:
                wait_kind[v] = int(WaitKind.DEVICE)
                wait_target[v] = draw(st.integers(-1, n_ranks))
    stream_pos = np.full(n, -1, np.int32)
    for p in streams:
        idx = [v for v in range(n) if proc[v] == p]
        stream_pos[idx] = np.arange(len(idx))
    floor = None
    if draw(st.integers(0, 4)) == 0:
        floor = np.array([draw(st.sampled_from([-np.inf, -np.inf, 0.0, 4.0, 12.0])) for _ in range(n)])
    src = np.array([e[0] for e in edges], np.int64)
    return Graph(
        name=np.array([f"t{i}" for i in range(n)], dtype=object), kind=np.array(kind, np.int8),
        proc=np.array(proc, np.int32), dur=np.array(dur, float), ts=np.array(ts, float),
        release=np.array(release, float), comm=np.zeros(n, bool), in_step=np.array(kind, np.int8) == GPU,
        rank=np.array([proc_rank[p] for p in proc], np.int32), stream_pos=stream_pos,
        wait_kind=np.array(wait_kind, np.int8), wait_target=np.array(wait_target, np.int32),
        event=np.arange(n), layer=np.full(n, -1, np.int32), phase=np.full(n, -1, np.int8),
        proc_kind=np.array(proc_kind, np.int8), proc_rank=np.array(proc_rank, np.int32),
        proc_key=np.arange(n_procs, dtype=np.int64), proc_name=np.array([f"p{i}" for i in range(n_procs)], object),
        src=src, dst=np.array([e[1] for e in edges], np.int64), cls=np.array([e[2] for e in edges], np.int8),
        lag=np.array([e[3] for e in edges], np.float64), inferred=np.zeros(len(edges), bool), finish_floor=floor)


INT_POOL = [-2**63, -2**32, -2**31 - 1, -2**31, -3, -2, -1, 0, 1, 2, 3, 5, 40, 41, 2**31 - 1, 2**31, 2**32, 2**62,
            2**63 - 1]
FLOAT_POOL = [np.nan, np.inf, -np.inf, -1.0, 0.0, -0.0, 1e308, -1e308, 5e-324, 2.5]
INT_FIELDS = ("proc", "out_ptr", "out_dst", "indeg", "wait_kind", "wait_target", "stream_ptr", "stream_ops",
              "rank_streams_ptr", "rank_streams", "rank_index")
FLOAT_FIELDS = ("dur", "release", "tiebreak", "out_lag", "floor")
ALL_FIELDS = INT_FIELDS + FLOAT_FIELDS + ("out_launch", "is_gpu")


@st.composite
def bent_arrays(draw):
    """(graph, SimArrays, what was bent): prepare(graph), then at most one edit."""
    from lumos.sim import prepare

    graph = draw(graphs())
    a = prepare(graph)
    how = draw(st.integers(0, 12))
    if how <= 3:
        return graph, a, "none"
    f = {k.name: getattr(a, k.name) for k in dataclasses.fields(a)}
    if how <= 6:    # a value
        name = draw(st.sampled_from(INT_FIELDS + FLOAT_FIELDS))
        x = f[name]
        if x is None or not len(x):
            return graph, a, "none"
        x = x.copy()
        x[draw(st.integers(0, len(x) - 1))] = draw(st.sampled_from(INT_POOL if name in INT_FIELDS else FLOAT_POOL))
        f[name] = x
        what = f"value of {name}"
    elif how == 7:  # a length
        name = draw(st.sampled_from(ALL_FIELDS))
        x = f[name]
        if x is None:
            return graph, a, "none"
        f[name] = x[:-1] if len(x) and draw(st.booleans()) else np.concatenate([x, x[-1:] if len(x) else
                                                                                np.zeros(1, x.dtype)])
        what = f"length of {name}"
    elif how == 8:  # a pointer array out of order
        name = draw(st.sampled_from(["out_ptr", "stream_ptr", "rank_streams_ptr"]))
        x = f[name].copy()
        if len(x) < 2:
            return graph, a, "none"
        i = draw(st.integers(0, len(x) - 2))
        x[i], x[i + 1] = x[i + 1] + draw(st.integers(0, 2)), x[i]
        f[name] = x
        what = f"order of {name}"
    elif how == 9:  # a count
        name = draw(st.sampled_from(["n", "n_procs"]))
        f[name] = draw(st.sampled_from([-1, 0, f[name] + 1, max(f[name] - 1, 0), 2**40, 2**63, 2.0, None, "3"]))
        what = f"count {name}"
    elif how == 10:  # a dtype
        name = draw(st.sampled_from(ALL_FIELDS))
        x = f[name]
        if x is None:
            return graph, a, "none"
        f[name] = x.astype(draw(st.sampled_from([np.int32, np.float64, np.float32, np.uint64, np.int8, object])))
        what = f"dtype of {name}"
    else:           # valid but unusual: the checks allow it, so both cores must run it alike
        n = a.n
        pick = draw(st.integers(0, 3))
        if pick == 0 and n:   # stream ops that are not GPU ops, or listed on two streams
            ops = np.array([draw(st.integers(0, n - 1)) for _ in range(draw(st.integers(0, 2 * n)))], np.int64)
            ptr = np.sort(np.array([draw(st.integers(0, len(ops))) for _ in range(a.n_procs - 1)] + [0, len(ops)],
                                   np.int64)) if a.n_procs else np.zeros(1, np.int64)
            f["stream_ops"], f["stream_ptr"] = ops, ptr if a.n_procs else np.zeros(1, np.int64)
            if a.n_procs == 0:
                f["stream_ops"] = ops[:0]
        elif pick == 1 and n:  # in-degrees that do not count the edges
            f["indeg"] = np.array([draw(st.integers(0, len(a.out_dst))) for _ in range(n)], np.int64)
        elif pick == 2:        # ranks without streams, streams named twice, -1 entries
            k = len(a.rank_streams)
            f["rank_streams"] = np.array([draw(st.integers(-1, a.n_procs - 1)) for _ in range(k)], np.int64)
            f["rank_index"] = np.array([draw(st.integers(-1, len(a.rank_streams_ptr) - 2))
                                        for _ in range(len(a.rank_index))], np.int64)
        else:                  # out_ptr not starting at 0 nor ending at the edge count
            m = len(a.out_dst)
            f["out_ptr"] = np.sort(np.array([draw(st.integers(0, m)) for _ in range(n + 1)], np.int64))
        what = "unusual but valid"
    from lumos.sim import SimArrays
    return graph, SimArrays(**f), what


def _ordered(a) -> bool:
    """Whether every time the replay computes is ordered: durations and lags finite (-inf + inf is NaN)
    and measured starts not NaN. Otherwise the two cores, which keep their queues differently, may
    pick in different orders (NaN orders nothing); the checks do not refuse such arrays (a trace
    cannot carry them: its numbers are finite JSON numbers), so there only memory safety and the
    errors are checked."""
    def finite(x):
        x = np.asarray(x)
        return x.dtype.kind not in "fc" or bool(np.isfinite(x).all())

    tb = np.asarray(a.tiebreak)
    return finite(a.dur) and finite(a.out_lag) and not (tb.dtype.kind in "fc" and np.isnan(tb).any())


def _one_graph(a) -> bool:
    """Whether the arrays describe one graph: out_ptr spans every edge and each in-degree counts the
    edges into its task. Arrays that pass the checks without this (the checks make sure of what
    memory safety needs, not of this) replay without any wild access, but the two cores need not
    agree on them: the compiled one assumes a queued task's earliest start no longer moves."""
    n, ptr, dst = a.n, np.asarray(a.out_ptr), np.asarray(a.out_dst)
    return (len(ptr) > 0 and ptr[0] == 0 and ptr[-1] == len(dst)
            and np.array_equal(np.bincount(dst, minlength=n), np.asarray(a.indeg)))


def _run_core(run, a):
    try:
        start, end, done, abandoned = run(a)
    except Exception as exc:  # noqa: BLE001 - compared and classified
        return exc
    return start, end, done, abandoned


def _separate_workspace(n: int) -> list[np.ndarray]:
    """simulate's outputs, each its own allocation (AddressSanitizer then sees a write past any of
    them), holding what they may: the core must set each item before it reads it."""
    f64, i64, b = np.float64, np.int64, np.bool_
    return [np.empty(n, f64), np.empty(n, f64), np.ones(n, b), np.empty(n, f64), np.full(n, 2**62, i64),
            np.empty(n, f64)]


def _raw_args(a) -> list:
    """SimArrays fields as they are (no cast, no check) in simulate's order."""
    n = a.n
    floor = a.floor
    if floor is None:   # as long as n says, where n can be a length at all
        floor = np.full(n if isinstance(n, int) and 0 <= n <= 10**6 else 0, -np.inf)
    return [n, a.proc, a.dur, a.release, a.tiebreak, a.out_ptr, a.out_dst, a.out_lag, a.out_launch, a.indeg,
            a.wait_kind, a.wait_target, a.is_gpu, a.stream_ptr, a.stream_ops, a.rank_streams_ptr, a.rank_streams,
            a.rank_index, a.n_procs, floor]


def _same_schedule(r, c) -> bool:
    return r[3] == c[3] and all(_same_array(x, y) for x, y in zip(r[:3], c[:3]))


def check_arrays(case) -> dict:
    """Both replay cores (and the kernel called directly) on one SimArrays; the walks on a graph that finishes."""
    from lumos.sim.compiled import longest_path_bound, simulate_compiled
    from lumos.sim.reference import simulate_reference

    graph, a, what = case
    ref = _run_core(simulate_reference, a)
    comp = _run_core(simulate_compiled, a)
    for name, got in (("reference", ref), ("compiled", comp)):
        if isinstance(got, Exception) and not isinstance(got, ALLOWED_ARRAY_ERRORS):
            raise Finding(f"arrays ({what}): {name} raised {type(got).__name__}: {got}")
    if isinstance(ref, Exception) or isinstance(comp, Exception):
        if type(ref) is not type(comp):
            raise Finding(f"arrays ({what}): reference {_name(ref)}, compiled {_name(comp)}")
    elif not _same_schedule(ref, comp) and _ordered(a) and _one_graph(a):
        raise Finding(f"arrays ({what}): the compiled schedule differs from the reference's")
    n = a.n if isinstance(a.n, int) and 0 <= a.n < 10**6 else 0
    try:   # the kernel itself, no Python check in between
        work = _separate_workspace(n)
        abandoned = jit.kernels().simulate(*_raw_args(a), *work)
    except ALLOWED_ARRAY_ERRORS:
        pass
    else:
        if isinstance(comp, Exception):
            raise Finding(f"arrays ({what}): the kernel ran what simulate_compiled refused ({_name(comp)})")
        if not _same_schedule(comp, (work[0], work[1], work[2], abandoned)):
            raise Finding(f"arrays ({what}): the kernel called directly differs from simulate_compiled")
    try:
        longest_path_bound(a)
    except ALLOWED_ARRAY_ERRORS:
        pass
    if what == "none" and not isinstance(comp, Exception) and comp[2].all():
        _check_walks(graph, comp[0], comp[1])
    return {"outcome": "error" if isinstance(comp, Exception) else "ok", "bent": what}


def _check_walks(graph, start, end) -> None:
    from lumos.analysis.critical_path import (MEASURED_TOLERANCE_US, critical_path, critical_path_reference)

    for s, e, tol in ((start, end, 0.0), (graph.ts, graph.end, MEASURED_TOLERANCE_US)):
        with jit_mode("always"):
            fast = _run_core(lambda g: (critical_path(g, s, e, tol), 0, 0, 0), graph)
        plain = _run_core(lambda g: (critical_path_reference(g, s, e, tol), 0, 0, 0), graph)
        if isinstance(fast, Exception) or isinstance(plain, Exception):
            if type(fast) is not type(plain):
                raise Finding(f"walk: compiled {_name(fast)}, reference {_name(plain)}")
        elif not _same_array(fast[0], plain[0]):
            raise Finding(f"walk: the compiled critical path {fast[0].tolist()} differs from the reference's "
                          f"{plain[0].tolist()}")


def _name(x) -> str:
    return f"{type(x).__name__}: {x}" if isinstance(x, Exception) else "a schedule"


# ============================================================================================
# kernels: each kernel called directly, one argument bent
# ============================================================================================

def _valid_calls(graph, a) -> dict[str, list]:
    """Valid arguments of each kernel for one graph (outputs separate arrays)."""
    from lumos.analysis import critical_path as cp

    n = a.n
    floor = np.full(n, -np.inf) if a.floor is None else a.floor
    sim = _raw_args(a)[:19] + [floor] + _separate_workspace(n)
    lp = [n, a.dur, a.release, floor, a.out_ptr, a.out_dst, a.out_lag, a.indeg, np.empty(n), np.empty(n),
          np.empty(n, np.int64), np.empty(n, np.int64)]
    end = graph.end
    in_ptr, in_src, in_lag, prev = cp._candidates(graph, graph.ts, end)
    s_ptr, s_ops, s_end = cp._stream_csr(graph, end)
    gpu_procs = np.flatnonzero(graph.proc_kind == 1)
    ranks = graph.proc_rank[gpu_procs].astype(np.int64)
    order = np.argsort(ranks, kind="stable")
    n_rank = int(max(graph.proc_rank.max(initial=0), graph.wait_target.max(initial=0))) + 1
    r_ptr = np.searchsorted(ranks[order], np.arange(n_rank + 1)).astype(np.int64)
    r_procs = gpu_procs[order].astype(np.int64)
    walk = [max(n - 1, 0), graph.ts.astype(np.float64), end.astype(np.float64), in_ptr, in_src, in_lag, prev,
            graph.wait_kind.astype(np.int64), graph.wait_target.astype(np.int64), s_ptr, s_ops, s_end, r_ptr, r_procs,
            1.0, np.empty(n, np.int64)]
    order_ts = np.argsort(graph.ts, kind="stable")
    leaf = [graph.ts[order_ts].copy(), end[order_ts].copy(), np.zeros(n, bool), 0.5, np.empty(n, bool)]
    return {"simulate": sim, "longest_path": lp, "walk": walk, "leaf_walk": leaf}


SCALARS = {"simulate": (0, 18), "longest_path": (0,), "walk": (0, 14), "leaf_walk": (3,)}
OUTPUTS = {"simulate": range(20, 26), "longest_path": range(8, 12), "walk": (15,), "leaf_walk": (4,)}


@st.composite
def kernel_calls(draw):
    """(kernel name, arguments, what was bent)."""
    graph = draw(graphs())
    from lumos.sim import prepare
    a = prepare(graph)
    name = draw(st.sampled_from(sorted(SCALARS)))
    args = list(_valid_calls(graph, a)[name])
    if name == "walk" and a.n == 0:
        args[0] = 0
    at = draw(st.integers(0, len(args) - 1))
    x = args[at]
    how = draw(st.integers(0, 9))
    if at in SCALARS[name]:
        args[at] = draw(st.sampled_from([-1, 0, 1, 2**31, 2**40, 2**63, -2**63, 2**70, 0.5, np.nan, np.inf, "1",
                                         None, np.int64(3), True, [1], np.zeros(1)]))
        what = f"{name} argument {at} = {args[at]!r}"
    elif how <= 3 and len(x):
        x = x.copy()
        if x.dtype.kind == "f":
            x[draw(st.integers(0, len(x) - 1))] = draw(st.sampled_from(FLOAT_POOL))
        elif x.dtype.kind == "b":
            x[draw(st.integers(0, len(x) - 1))] = draw(st.booleans())
        else:
            x[draw(st.integers(0, len(x) - 1))] = draw(st.sampled_from(INT_POOL + [len(x), len(x) + 1]))
        args[at] = x
        what = f"{name} argument {at}: a value"
    elif how == 4:
        longer = np.concatenate([x, x[:1] if len(x) else np.zeros(1, x.dtype)])
        args[at] = x[:-1] if len(x) and draw(st.booleans()) else longer
        what = f"{name} argument {at}: a length"
    elif how == 5:
        args[at] = x.astype(draw(st.sampled_from([np.int32, np.int64, np.float64, np.float32, np.bool_, np.uint8,
                                                   np.int8, np.uint64, np.complex128])))
        what = f"{name} argument {at}: a dtype"
    elif how == 6:
        layout = draw(st.integers(0, 3))
        if layout == 0:
            args[at] = np.repeat(x, 2)[::2]          # strided
        elif layout == 1:
            args[at] = x.reshape(1, -1) if len(x) else x.reshape(0, 1)
        elif layout == 2:
            y = x.copy()
            y.setflags(write=False)
            args[at] = y
        else:
            args[at] = x.tolist()
        what = f"{name} argument {at}: layout {layout}"
    elif how == 7:
        other = draw(st.sampled_from([i for i in range(len(args)) if i not in SCALARS[name]]))
        args[at] = args[other]
        what = f"{name} argument {at}: the array of argument {other}"
    elif how == 8 and at in OUTPUTS[name] and len(x) > 1:
        block = np.zeros(2 * len(x) + 2, x.dtype)    # two outputs overlapping in one block
        other = draw(st.sampled_from([i for i in OUTPUTS[name] if i != at] or [at]))
        if args[other].dtype == x.dtype and len(args[other]) == len(x):
            args[at], args[other] = block[:len(x)], block[len(x) // 2:len(x) // 2 + len(x)]
        what = f"{name} argument {at}: overlapping {other}"
    else:
        args[at] = draw(st.sampled_from([None, 3, "x", b"abc", bytearray(8), memoryview(b"12345678")]))
        what = f"{name} argument {at} = {type(args[at]).__name__}"
    return name, args, what


def check_kernel_call(case) -> dict:
    name, args, what = case
    try:
        getattr(jit.kernels(), name)(*args)
    except ALLOWED_ARRAY_ERRORS as exc:
        return {"outcome": "error", "type": type(exc).__name__}
    except IndexError as exc:
        if name == "walk" and "names a rank with no streams" in str(exc):
            return {"outcome": "error", "type": "IndexError"}
        raise Finding(f"kernels ({what}): IndexError: {exc}") from None
    except Exception as exc:  # noqa: BLE001
        raise Finding(f"kernels ({what}): {type(exc).__name__}: {exc}") from None
    return {"outcome": "ok"}


# target name -> (strategy, check)
TARGETS = {
    "trace": (traces, check_trace),
    "arrays": (bent_arrays, check_arrays),
    "kernels": (kernel_calls, check_kernel_call),
}
