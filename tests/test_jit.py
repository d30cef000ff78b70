"""Which kernels run compiled (`lumos.jit`): the C kernels wherever they are built, their plain
twins with LUMOS_JIT=never or without them; a replay that never starts numba; numba (for the
kernels that stay numba) started without scipy and cffi; both twins giving the same graph,
schedule and path."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from lumos import jit
from lumos.analysis.critical_path import critical_path
from lumos.graph import build_graph
from lumos.graph.tasks import _compiled_leaf_walk, _leaf_walk
from lumos.sim import simulate
from lumos.trace import load_trace

from .conftest import REAL

SMALL_REAL = REAL / "hta" / "nccl_parser_config__nccl_data.json.gz"   # 9.3 MiB of JSON, 6,171 tasks
LARGE_REAL = REAL / "hta" / "trace_diff__control__control.json.gz"    # 33 MiB of JSON


def test_the_kernels_are_built_and_taken_unless_never(monkeypatch):
    monkeypatch.delenv("LUMOS_JIT", raising=False)
    assert jit.compiled() and jit.kernels().__name__ == "lumos._kernels"
    monkeypatch.setenv("LUMOS_JIT", "never")
    assert not jit.compiled()
    monkeypatch.setenv("LUMOS_JIT", "always")
    assert jit.compiled()


def test_without_the_kernels_auto_takes_the_twins_and_always_says_how_to_build_them(monkeypatch):
    monkeypatch.setattr(jit, "_native", lambda: None)
    monkeypatch.delenv("LUMOS_JIT", raising=False)
    assert not jit.compiled()
    monkeypatch.setenv("LUMOS_JIT", "always")
    with pytest.raises(ImportError, match=r"pip install -e \."):
        jit.compiled()


def test_an_unknown_lumos_jit_mode_is_named(monkeypatch):
    monkeypatch.setenv("LUMOS_JIT", "sometimes")
    with pytest.raises(ValueError, match=r"LUMOS_JIT='sometimes': expected one of auto, always, never"):
        jit.compiled()


def test_count_byte_counts_as_bytes_count_does():
    data = b'{"traceEvents": [{"ph": "X", "args": {}}, {"ph": "i"}]}' * 3 + b"{"
    assert jit.kernels().count_byte(np.frombuffer(data, np.uint8), ord("{")) == data.count(b"{") == 13
    assert jit.kernels().count_byte(np.frombuffer(b"", np.uint8), ord("{")) == 0


def test_a_kernel_refuses_an_array_of_the_wrong_type_or_length():
    k = jit.kernels()
    keep = np.empty(3, dtype=np.bool_)
    with pytest.raises(TypeError, match="ts must be a contiguous float64 array"):
        k.leaf_walk(np.zeros(3, dtype=np.float32), np.ones(3), np.zeros(3, bool), 1e-3, keep)
    with pytest.raises(ValueError, match="arrays differ in length"):
        k.leaf_walk(np.zeros(3), np.ones(2), np.zeros(3, bool), 1e-3, keep)
    with pytest.raises(TypeError, match=r"keep must be a contiguous writable bool array \(ndarray is not C-contiguous\)"):
        k.leaf_walk(np.zeros(3), np.ones(3), np.zeros(3, bool), 1e-3, np.empty(6, dtype=np.float64)[::2])


def _python(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.split()


def test_numba_starts_without_scipy_linalg_and_cffi_and_leaves_no_trace_of_hiding_them():
    # cffi is not a dependency (a fresh environment may lack it): its entry must simply be gone
    out = _python(
        "import sys\n"
        "from lumos.jit import njit\n"
        "f = njit(cache=False)(lambda a: a.sum() * 2)\n"
        "import numpy as np\n"
        "hidden = [m for m in ('scipy.linalg', 'scipy.linalg.cython_blas', 'cffi') if m in sys.modules]\n"
        "print(f(np.arange(4.0)), hidden == [])\n"
        "import scipy.linalg\n"
        "print(scipy.linalg.blas is not None)\n")
    assert out == ["12.0", "True", "True"]


@pytest.mark.parametrize("path", [SMALL_REAL, LARGE_REAL], ids=["9 MiB", "33 MiB"])
def test_a_replay_never_starts_numba_or_scipy(monkeypatch, path):
    monkeypatch.delenv("LUMOS_JIT", raising=False)
    out = _python(
        "import sys, io, contextlib\n"
        "from lumos.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as text:\n"
        f"    rc = main(['replay', {str(path)!r}])\n"
        "print(rc, 'numba' in sys.modules, 'scipy' in sys.modules, 'iteration time error: +0.000%' in text.getvalue())\n")
    assert out == ["0", "False", "False", "True"]


@pytest.mark.parametrize("path", [SMALL_REAL, REAL / "hta" / "sync_fixtures"
                                  / "critical_path__cuda_event_sync_multi_stream__event_sync_trace.json.gz"],
                         ids=lambda p: p.name[:30])
def test_plain_and_compiled_twins_give_the_same_graph_schedule_and_path(monkeypatch, path):
    runs = {}
    for mode in ("never", "always"):
        monkeypatch.setenv("LUMOS_JIT", mode)
        g = build_graph(load_trace(path))
        s = simulate(g)
        runs[mode] = (g, s, critical_path(g, s.start, s.end), critical_path(g, g.ts, g.end, 1.0))
    (g0, s0, p0, m0), (g1, s1, p1, m1) = runs["never"], runs["always"]
    for col in ("event", "kind", "proc", "dur", "ts", "release", "src", "dst", "cls", "lag", "inferred"):
        assert np.array_equal(getattr(g0, col), getattr(g1, col)), col
    assert np.array_equal(s0.start, s1.start) and np.array_equal(s0.end, s1.end)
    assert p0.tolist() == p1.tolist() and m0.tolist() == m1.tolist() and len(p0) >= 30


def test_the_leaf_walk_twins_agree_on_nested_and_runtime_calls():
    # op 0 holds op 1 (not a leaf) and runtime 2, whose inner driver call 3 is folded into it;
    # op 4 starts after all of them end
    ts = np.array([0.0, 1.0, 5.0, 5.5, 20.0])
    end = np.array([10.0, 4.0, 8.0, 6.0, 21.0])
    runtime = np.array([False, False, True, False, False])
    plain = _leaf_walk(ts.tolist(), end.tolist(), runtime.tolist(), 1e-3)
    compiled = _compiled_leaf_walk(ts, end, runtime, 1e-3)
    assert plain.tolist() == compiled.tolist() == [False, True, True, False, True]
