"""Progress for long emulations: a tqdm bar on a terminal, nothing otherwise (logs stay clean)."""

from __future__ import annotations

import sys


class Progress:
    def __init__(self, total: int, enabled: bool, desc: str = "emulate"):
        self._bar = None
        if enabled:
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=desc, unit="mb", file=sys.stderr, leave=False)

    def update(self, n: int = 1) -> None:
        if self._bar is not None:
            self._bar.update(n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
