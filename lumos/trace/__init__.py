"""Kineto traces in and out: parse into columns, pick an iteration, write back."""

from .errors import EmptyStepError, TraceError
from .reader import load_trace, parse_document
from .run import load_run
from .steps import Step, find_steps, select_step
from .table import TraceTable
from .writer import write_trace

__all__ = ["TraceError", "EmptyStepError", "TraceTable", "Step", "load_trace", "parse_document", "load_run",
           "find_steps", "select_step", "write_trace"]
