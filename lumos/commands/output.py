"""How a command prints its result: the JSON document for scripts, or its table for a person."""

from __future__ import annotations

import json
import sys
from typing import Callable


def emit(doc: dict, fmt: str, table: Callable[[dict], str]) -> None:
    if fmt == "json":
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(table(doc))
