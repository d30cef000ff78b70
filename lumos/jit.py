"""numba only where compiled code pays back its start-up.

Starting numba cost a process about 1.3 s before its first compiled call returned (2-core
machine): 0.3-0.5 s to import it, the rest to build its compiled-code target and load the
cached machine code, with 0.3 s of it spent importing scipy.linalg and cffi, which numba looks
for and no kernel here uses (`_start` hides them: 0.5-0.7 s now,
`python benchmarks/bench_startup.py --kernels`). That is still more than plain Python and
numpy take to parse, build and replay a trace of a few thousand tasks. So the kernels that
have a plain twin (the trace scanner's is `orjson` plus `parse_document`, the simulator's
`simulate_reference`, the critical path's `critical_path_reference`, the call-tree walk's its
own Python body) run compiled only when the work is large enough (`pays`), or when numba is
running in the process anyway. Both twins give the same result, which the tests hold them to.

`LUMOS_JIT=always|never|auto` (default auto) overrides the choice for kernels with a plain
twin, for benchmarks and tests; kernels without one (sampling, the emulator's column writer)
always compile.
"""

from __future__ import annotations

import functools
import os
import sys

__all__ = ["pays", "running", "njit", "MODES"]

MODES = ("auto", "always", "never")


def _mode() -> str:
    mode = os.environ.get("LUMOS_JIT", "auto") or "auto"
    if mode not in MODES:
        raise ValueError(f"LUMOS_JIT={mode!r}: expected one of {', '.join(MODES)}")
    return mode


def running() -> bool:
    """numba is imported in this process: its start-up is paid, compiled code costs nothing more."""
    return "numba" in sys.modules


def pays(work: int, threshold: int) -> bool:
    """Run the compiled twin for `work` units (bytes, tasks) when numba is running already or
    the work reaches `threshold`, the size above which compiled code wins even with its
    start-up (each call site measures its own)."""
    mode = _mode()
    if mode != "auto":
        return mode == "always"
    return running() or work >= threshold


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
    numba, so such modules are imported where compiled code pays, not at the top."""
    return _start().njit(*args, **options)
