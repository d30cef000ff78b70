"""The emulated actual of many seeds of one configuration, without writing traces.

Checking interval coverage needs the actual iteration over tens of seeds per
configuration; writing and re-reading their traces would cost far more than
emulating them. This module measures each seed's run the way
`lumos.predict.prediction.measure_run` measures its traces (the longest GPU span
over the emulated ranks, and that rank's four parts), from the recorders
directly. The tests hold the two equal on written traces.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from lumos.config import compose

from .breakdown import breakdown_recorder
from .emulate import emulate_config

__all__ = ["PARTS", "run_actual", "emulate_actuals"]

PARTS = ("exposed_compute", "overlapped", "exposed_comm", "other")


def run_actual(result) -> dict:
    """Run-level breakdown of one emulation: the rank whose GPU span is longest, its parts (us)."""
    per_rank = {r: breakdown_recorder(result.recorders[r]) for r in result.ranks}
    rank = max(per_rank, key=lambda r: (per_rank[r]["total"], -r))
    b = per_rank[rank]
    row = {"iteration_us": round(float(b["total"]), 3), "critical_rank": int(rank)}
    row.update({f"{p}_us": round(float(b[p]), 3) for p in PARTS})
    return row


def emulate_actuals(overrides: Sequence[str], seeds: Iterable[int], log=None) -> list[dict]:
    """One row per seed (`seed`, `iteration_us`, the four parts, `critical_rank`), each seed
    emulated in this process (one start, one config composition)."""
    rows = []
    cfg = compose("emulate", [str(o) for o in overrides] + ["progress=false"])
    for seed in seeds:
        cfg.seed = int(seed)
        result = emulate_config(cfg, progress=False)
        rows.append({"seed": int(seed), **run_actual(result)})
        if log is not None:
            log(f"seed {seed}: iteration {rows[-1]['iteration_us'] / 1e3:.3f} ms (emulated), "
                f"{result.wall_s:.2f} s")
        del result
    return rows
