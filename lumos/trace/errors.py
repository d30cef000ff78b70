"""The one error type for bad trace input."""

from __future__ import annotations


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
