"""Which kernels run compiled: C for the hot ones, numba for the rest.

The kernels every `lumos replay` and `lumos predict` runs (the trace scanner, the replay core,
the critical-path and call-tree walks) are C, built with the package as `lumos._kernels`
(lumos/kernels/kernels.h). They load in microseconds, so they run wherever they are built: numba
had cost every process 0.4-0.6 s to start before its first compiled call returned, more than
the work on most traces (docs/notes/2026-12-03-startup-against-hta.md; docs/performance.md).
Each has a plain twin in Python (the scanner's is `orjson` plus `parse_document`, the simulator's
`simulate_reference`, the critical path's `critical_path_reference`, the call-tree walk's its own
Python body) that the tests hold it to.

`LUMOS_JIT=auto|always|never` (default auto): auto takes the C kernels where they are built and
the twins otherwise (with one warning: a checkout used without `pip install -e .`); always
requires them; never takes the twins (tests and benchmarks). Kernels without a C twin (sampling
for intervals, the emulator's column writer) stay numba (`njit`), started without the imports
it looks for and no kernel here uses (`_start`).
"""

from __future__ import annotations

import functools
import os
import sys

__all__ = ["compiled", "kernels", "njit", "MODES"]

MODES = ("auto", "always", "never")


def _mode() -> str:
    mode = os.environ.get("LUMOS_JIT", "auto") or "auto"
    if mode not in MODES:
        raise ValueError(f"LUMOS_JIT={mode!r}: expected one of {', '.join(MODES)}")
    return mode


@functools.cache
def _native():
    """`lumos._kernels`, or None where it was not built (a warning says how to build it)."""
    try:
        from lumos import _kernels
    except ImportError as exc:
        print(f"lumos: the compiled kernels (lumos._kernels) are not built ({exc}); running their plain-Python "
              "twins, which are slow on large traces. Build them with `python -m pip install -e .`.",
              file=sys.stderr)
        return None
    return _kernels


def compiled() -> bool:
    """Run the C kernels (where built, unless LUMOS_JIT=never)."""
    mode = _mode()
    if mode == "never":
        return False
    if mode == "always":
        kernels()
        return True
    return _native() is not None


def kernels():
    """The C kernels module; an error saying how to build it where it is missing."""
    k = _native()
    if k is None:
        raise ImportError("lumos._kernels is not built: run `python -m pip install -e .` in the repository")
    return k


# Optional packages numba looks for as it starts, which no kernel here uses: scipy's BLAS
# (np.dot, np.linalg; `numba/np/arraymath.py` checks for it on import, importing scipy.linalg,
# about 0.3 s) and cffi (`numba/core/typing/cffi_utils.py` builds an FFI, about 0.05 s).
_NOT_NEEDED = ("scipy.linalg.cython_blas", "cffi")


@functools.cache
def _start():
    """Import numba with `_NOT_NEEDED` hidden while it looks for them (a process that imported
    one of them before keeps it for numba too)."""
    hidden = [m for m in _NOT_NEEDED if m not in sys.modules and m.rpartition(".")[0] not in sys.modules]
    for m in hidden:
        sys.modules[m] = None   # `import m` raises ImportError: numba takes it as absent
    try:
        import numba
        import numba.core.typing.cffi_utils  # noqa: F401  (where each looks, once)
        import numba.np.arraymath  # noqa: F401
    finally:
        for m in hidden:
            del sys.modules[m]
    return numba


def njit(*args, **options):
    """`numba.njit`, numba started as `_start` does. Importing a module that uses it starts
    numba, so such modules are imported where they are needed, not at the top."""
    return _start().njit(*args, **options)
