"""The columnar event table every later stage reads.

One row per complete ('X') event of a category Lumos uses; the columns are the
fields the graph builder, the analysis and the what-if transforms need, and
nothing else, so a 10^6-event trace stays a handful of numpy arrays.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import schema
from .errors import format_counts

INT_COLUMNS = ("cat", "pid", "tid", "corr", "ext", "stream", "device",
               "wait_stream", "wait_corr", "in_nelems", "out_nelems", "group_size", "seq")
FLOAT_COLUMNS = ("ts", "dur")
OBJECT_COLUMNS = ("name", "sync_kind", "coll_name", "dtype", "pg_ranks", "input_dims", "pg_name")


def devices(metadata: dict) -> list[dict]:
    """The entries of a trace's `deviceProperties` (Kineto, our emulator and capture write one per GPU)
    that are objects; [] where it has none."""
    dev = metadata.get("deviceProperties")
    return [d for d in dev if isinstance(d, dict)] if isinstance(dev, list) else []


def gpu_name(metadata: dict) -> str | None:
    """The first device's name in a trace's `deviceProperties`."""
    dev = metadata.get("deviceProperties")
    first = dev[0] if isinstance(dev, list) and dev else None
    name = first.get("name") if isinstance(first, dict) else None
    return name if isinstance(name, str) else None


@dataclass
class TraceTable:
    """Events of one rank's trace, as parallel arrays (row i is event i).

    Times are microseconds (float64), as in the file. Integer fields that an
    event lacks are -1; object fields it lacks are None.
    """

    path: str
    name: np.ndarray
    cat: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    ts: np.ndarray
    dur: np.ndarray
    corr: np.ndarray
    ext: np.ndarray
    stream: np.ndarray
    device: np.ndarray
    wait_stream: np.ndarray
    wait_corr: np.ndarray
    sync_kind: np.ndarray
    coll_name: np.ndarray
    in_nelems: np.ndarray
    out_nelems: np.ndarray
    group_size: np.ndarray
    seq: np.ndarray           # autograd sequence number (a forward op and the backward of its node share it)
    dtype: np.ndarray
    pg_ranks: np.ndarray
    input_dims: np.ndarray
    pg_name: np.ndarray        # "Process Group Name": a key of distributedInfo.pg_config
    rank: int = 0
    world_size: int = 1
    metadata: dict[str, Any] = field(default_factory=dict)
    # Device events (a `device` or `stream` arg) of a category Lumos does not model,
    # counted by category as the file spells it: not rows of the table, but named
    # in every replay so that nothing on a device is dropped unseen.
    unmodelled: dict[str, int] = field(default_factory=dict)
    unmodelled_us: dict[str, float] = field(default_factory=dict)   # their summed durations

    def __len__(self) -> int:
        return len(self.ts)

    @property
    def end(self) -> np.ndarray:
        return self.ts + self.dur

    def is_gpu(self) -> np.ndarray:
        return np.isin(self.cat, schema.GPU_CATEGORIES)

    def columns(self) -> tuple[str, ...]:
        return INT_COLUMNS + FLOAT_COLUMNS + OBJECT_COLUMNS

    def take(self, index: np.ndarray) -> "TraceTable":
        """A new table holding the rows `index` (a boolean mask or integer indices)."""
        kw = {c: getattr(self, c)[index] for c in self.columns()}
        return TraceTable(path=self.path, rank=self.rank, world_size=self.world_size,
                          metadata=self.metadata, unmodelled=self.unmodelled,
                          unmodelled_us=self.unmodelled_us, **kw)

    @property
    def gpu_name(self) -> str | None:
        return gpu_name(self.metadata)

    def unmodelled_note(self) -> str | None:
        """'N device events of categories Lumos does not model (cat n, ...), X ms, Y% of the trace's
        device time' (device time: theirs plus the kernels, copies and sets Lumos models); None if
        there are none."""
        if not self.unmodelled:
            return None
        total = sum(self.unmodelled_us.values())
        device_us = total + float(self.dur[np.isin(self.cat, schema.GPU_CATEGORIES)].sum())
        share = 100.0 * total / device_us if device_us > 0 else 0.0
        return (f"{sum(self.unmodelled.values())} device events of categories Lumos does not model "
                f"({format_counts(self.unmodelled)}), {total / 1e3:.3f} ms, {share:.1f}% of the trace's device time")

    def category_counts(self) -> dict[str, int]:
        codes, counts = np.unique(self.cat, return_counts=True)
        return {schema.CATEGORY_NAMES[c]: int(n) for c, n in zip(codes, counts)}

