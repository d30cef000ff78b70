"""Kineto traces in and out: parse into columns, pick an iteration, write back.

The names below but the errors load their modules on first use (PEP 562), so that importing a
light module of the package (`scan`, `errors`) imports no numpy: the prefetch thread scans a
trace while the main thread is still importing numpy (`lumos.cli`).
"""

from .errors import EmptyStepError, TraceError

__all__ = ["TraceError", "EmptyStepError", "TraceTable", "Step", "load_trace", "parse_document", "load_run",
           "find_steps", "select_step", "write_trace"]


def __getattr__(name: str):
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from .reader import load_trace, parse_document
    from .run import load_run
    from .steps import Step, find_steps, select_step
    from .table import TraceTable
    from .writer import write_trace

    globals().update(TraceTable=TraceTable, Step=Step, load_trace=load_trace, parse_document=parse_document,
                     load_run=load_run, find_steps=find_steps, select_step=select_step, write_trace=write_trace)
    return globals()[name]
