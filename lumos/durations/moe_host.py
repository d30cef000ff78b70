"""What an EP change of a CPU MoE run over gloo costs on this host, from calibration recordings.

Two things of the target are in no base trace (`lumos.transform.moe_host`):
- how much slower a rank runs when the target puts more processes on the host's cores (EP 4 puts four
  ranks on two cores: each shares its core with another, and their collectives meet in lockstep);
- what gloo's collectives take at the target's group: the copies and, above all on a shared host, the
  wait for every peer; both grow with the group and with what shares the cores.
Both are properties of the host, its load and the library, like a cluster profile's bandwidths, so they
are read off calibration recordings: the same training program recorded at the base's EP and at the
target's, on the same host, in other rounds than the runs predicted and scored.

- Slowdown: the forward's dense work (`lumos.model.moe_host.dense_forward_us`: the same ops at any EP)
  at the target's EP over the base's, each the mean over every profiled step and rank of a recording;
  the mean of that ratio over the calibration pairs.
- Collectives: each gloo worker range's time at the target's EP, the mean over every profiled step and
  rank of the target's calibration recordings, per kind (`HostExchange.key`: the counts' all-to-all, each
  token exchange by its pass and its place in the layer, each all-reduce by its message).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from lumos.model.moe_host import dense_forward_us, is_host_moe, read_host_moe_step, shared_host_us
from lumos.trace import TraceTable, find_steps

__all__ = ["HostMoECosts", "fit_host_moe_costs", "key_label", "run_ep"]

# what a calibration pair may differ in besides EP (the capture's config, `lumosCapture`)
_FREE = ("ep", "seed")


def key_label(key: tuple) -> str:
    """A collective's calibration key in words."""
    if key[0] == "tokens":
        return f"token exchange {'dispatch' if key[2] == 0 else 'combine'} ({key[1]})" if key[1] == "forward" \
            else f"token exchange {key[2] + 1} of the backward"
    if key[0] == "counts":
        return f"counts all-to-all ({key[1]} elements)"
    return f"all-reduce of {key[1]} elements"


@dataclass
class HostMoECosts:
    base_ep: int
    target_ep: int
    slowdown: float                 # the target's host time over the base's (`slowdown_from`'s work)
    exchanges: dict                 # HostExchange.key -> mean worker time (us) at the target's EP
    counts: dict                    # HostExchange.key -> samples
    recordings: list                # "BASE_EP_RUN vs TARGET_EP_RUN" per pair
    per_pair_slowdown: list = field(default_factory=list)
    slowdown_from: str = "dense_forward"

    def exchange_us(self, key: tuple, where: str) -> float:
        if key not in self.exchanges:
            known = "; ".join(key_label(k) for k in sorted(self.exchanges, key=str))
            raise ValueError(f"{where}: the {key_label(key)} is in no calibration recording at EP {self.target_ep} "
                             f"(they have: {known}): not the same training program")
        return self.exchanges[key]

    def as_dict(self) -> dict:
        return {"base_ep": self.base_ep, "target_ep": self.target_ep, "slowdown": round(self.slowdown, 4),
                "slowdown_from": self.slowdown_from,
                "per_pair_slowdown": self.per_pair_slowdown, "recordings": self.recordings,
                "exchanges_us": {key_label(k): round(v, 1) for k, v in sorted(self.exchanges.items(), key=str)},
                "samples": {key_label(k): n for k, n in sorted(self.counts.items(), key=str)}}


def run_ep(tables: Sequence[TraceTable]) -> int:
    """The EP degree of a whole CPU MoE recording: its ranks (each holds E / EP experts; EP = DP), which
    must all be present."""
    t = tables[0]
    if not all(is_host_moe(x) for x in tables):
        raise ValueError(f"{t.path}: not a CPU MoE capture with expert parallelism over gloo (a moe/expert_* range "
                         "and c10d::alltoall_base_ on every rank; EP 1 exchanges no tokens)")
    world = max(int(x.world_size) for x in tables)
    if len(tables) != world:
        raise ValueError(f"{t.path}: {len(tables)} of the run's {world} ranks: a calibration recording needs "
                         "every rank")
    return world


def _config(tables: Sequence[TraceTable]) -> dict:
    cfg = (tables[0].metadata.get("lumosCapture") or {})
    return {k: v for k, v in cfg.items() if k in ("model", "layers", "hidden", "heads", "kv_heads", "experts",
                                                  "top_k", "expert_ffn", "shared_expert_ffn", "seq",
                                                  "micro_batch", "vocab", "microbatches", "threads")}


SLOWDOWN_FROM = {"dense_forward": dense_forward_us, "shared_host": shared_host_us}


def _host_mean(tables: Sequence[TraceTable], how: str) -> float:
    """The mean over every profiled step and rank of the work `how` measures (`SLOWDOWN_FROM`)."""
    return float(np.mean([SLOWDOWN_FROM[how](t, s) for t in tables for s in find_steps(t)]))


def _exchange_means(tables: Sequence[TraceTable], into: dict) -> None:
    for t in tables:
        for s in find_steps(t):
            for x in read_host_moe_step(t, s).exchanges:
                into[x.key].append(float(t.dur[x.worker]))


def fit_host_moe_costs(pairs: Sequence[tuple[Sequence[TraceTable], Sequence[TraceTable]]],
                       slowdown_from: str = "dense_forward") -> HostMoECosts:
    """`pairs`: (the program at the base's EP, the same at the target's), each every rank's table.
    `slowdown_from`: the work whose time at the two EPs gives the slowdown (`SLOWDOWN_FROM`: the forward's
    dense ops, or all the main thread's work but the collectives, the experts and their optimizer updates)."""
    if slowdown_from not in SLOWDOWN_FROM:
        raise ValueError(f"slowdown_from must be one of {', '.join(SLOWDOWN_FROM)}, not {slowdown_from!r}")
    if not pairs:
        raise ValueError("no calibration recording: give the same program recorded at the base's EP and at the "
                         "target's on this host (--ep-calibration RUN_AT_BASE_EP RUN_AT_TARGET_EP)")
    eps, ratios, names = set(), [], []
    times: dict = defaultdict(list)
    first_cfg = None
    for at_base, at_target in pairs:
        where = f"{at_base[0].path} vs {at_target[0].path}"
        a, b = run_ep(at_base), run_ep(at_target)
        if a == b:
            raise ValueError(f"{where}: both recordings run at EP {a}: a calibration pair is one program at the "
                             "base's EP and at the target's")
        eps.add((a, b))
        if len(eps) > 1:
            raise ValueError(f"{where}: calibration pairs at EP {' and '.join(f'{x} -> {y}' for x, y in sorted(eps))}: "
                             "one change at a time")
        cfgs = [_config(at_base), _config(at_target)]
        if cfgs[0] and cfgs[1] and cfgs[0] != cfgs[1]:
            diff = sorted(k for k in set(cfgs[0]) | set(cfgs[1]) if cfgs[0].get(k) != cfgs[1].get(k))
            raise ValueError(f"{where}: the two recordings train different models (they differ in {', '.join(diff)}): "
                             "a calibration pair is one program at two EP degrees")
        if first_cfg is not None and cfgs[1] and first_cfg != cfgs[1]:
            raise ValueError(f"{where}: calibration pairs of different models: one program at a time")
        first_cfg = first_cfg or cfgs[1]
        ratios.append(_host_mean(at_target, slowdown_from) / _host_mean(at_base, slowdown_from))
        _exchange_means(at_target, times)
        names.append(f"{Path(at_base[0].path).parent.name} vs {Path(at_target[0].path).parent.name}")
    (a, b), = eps
    return HostMoECosts(base_ep=a, target_ep=b, slowdown=float(np.mean(ratios)), slowdown_from=slowdown_from,
                        exchanges={k: float(np.mean(v)) for k, v in times.items()},
                        counts={k: len(v) for k, v in times.items()}, recordings=names,
                        per_pair_slowdown=[round(r, 4) for r in ratios])
