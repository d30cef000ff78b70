"""Python's cycle collector paused around work that builds many acyclic objects.

Reference counting frees such objects; the cycle collector's passes over them only cost time
(decoding a 35 MB trace: twice orjson's own time; a `lumos predict`: some 200 passes freeing
under a thousand objects, ~5% of the command). It runs again when the work is done.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager

__all__ = ["paused"]


@contextmanager
def paused():
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
