"""The error types for bad trace input."""

from __future__ import annotations

from lumos.errors import UserError


class TraceError(ValueError):
    """A trace that cannot be used, with the file, the event and the reason.

    The message is one line so the CLI can print it without a traceback.
    """

    def __init__(self, path, reason: str, event: str | None = None):
        self.path = str(path)
        self.reason = reason
        self.event = event
        where = f" (event {event})" if event else ""
        super().__init__(f"{self.path}{where}: {reason}")


class EmptyStepError(TraceError, UserError):
    """The chosen step holds nothing to replay: no CPU op, runtime call or GPU op.

    A replay of it would be a row of zeros that looks like a result; this says
    instead which steps and which events the trace does hold. It is bad input
    (a TraceError) that the user fixes by choosing another step or trace (a UserError).
    """


def format_counts(counts: dict[str, int]) -> str:
    """{'kernel': 14, 'cpu_op': 70} -> 'kernel 14, cpu_op 70', for one-line messages."""
    return ", ".join(f"{k} {n}" for k, n in counts.items())
