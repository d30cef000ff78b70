"""What FSDP2 or DDP over host collectives (gloo) costs at a DP degree, from recordings of another model.

A one-rank capture holds FSDP2's hook ranges, or DDP's bucket all-reduces over a group of one, but
none of the work a larger group does in them (`lumos.transform.dp_host`), and nothing in it says
how long gloo takes per byte on this host, how long FSDP2's copy-in / copy-out take, or how much
slower two or four processes run on cores they share. Those are properties of the host and the
library, like a cluster profile's link bandwidths, so they are read off calibration recordings:
the same training program on the same host at another model size, recorded once at the target's
DP degree and once at one rank.

For each hook range the two recordings share (the same name, the same occurrence in the step;
`lumos.model.dp_hooks.dp_ranges`: FSDP2's hooks, or DDP's finalize), its self time
at DP N minus its self time at one rank, averaged over the profiled steps (and the DP run's ranks),
is one point: (the hook, whether its unit is the root) -> (the unit's parameter count, the added
time); for DDP the finalize (the wait for the buckets) -> (its buckets, all their elements, the
added time). A line through each hook's points, over
every calibration pair, gives its added time for a unit of any size (a constant where every
point has the same size). The time outside every hook (the model's own ops and the Python around
them) is scaled by the calibration's ratio at DP N over one rank: the other processes sharing
the host's cores.

The cost of a hook is a line: a time per unit it holds plus a time per element,
`HookCost.at(elements, parts)`. An FSDP2 hook holds one unit, so each hook role's points give a
line in the unit's size. DDP's finalize holds every bucket of the step: its time is fitted as
the time per bucket times the buckets plus the time per element times their elements (least
squares over the pairs), so a model with another number of buckets (another size, another
`bucket_cap_mb`) is priced per bucket, not as one lump that grows with the parameters only.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from lumos.model.dp_flavour import find_dp_flavour, host_dp_degree
from lumos.model.dp_hooks import dp_ranges, outside_hooks_us, role_label
from lumos.trace import TraceTable, find_steps

__all__ = ["HookCost", "HookSpec", "HostCollectiveCosts", "fit_host_collective_costs"]


@dataclass
class HookCost:
    """Added self time of one hook at DP N: `intercept_us` per unit it holds (`parts`: DDP's finalize
    holds every bucket, an FSDP2 hook one unit) plus `slope_us_per_element` per parameter."""
    intercept_us: float
    slope_us_per_element: float
    elements: tuple        # the sizes it was fitted on (min, max)
    points: int

    def at(self, elements: int, parts: int = 1) -> float:
        return self.intercept_us * parts + self.slope_us_per_element * elements


@dataclass(frozen=True)
class HookSpec:
    """One hook range (FSDP2's, or DDP's): its role (`HookRange.role`), its unit's parameter count, the DP
    degree, the units it holds."""
    role: tuple
    elements: int
    dp: int
    parts: int = 1


@dataclass
class HostCollectiveCosts:
    """Per hook role (`HookRange.role`), its `HookCost`; the scale of the time outside the hooks."""
    dp: int
    sharding: str               # the calibration runs' DP flavour at `dp` (dp_flavour: fsdp_full, ...)
    hooks: dict                 # (what, is_root) -> HookCost
    outside_scale: float
    recordings: list            # "DP_RUN vs ONE_RUN" per pair
    per_pair_outside: list = field(default_factory=list)

    def cost(self, role: tuple[str, bool], elements: int, where: str, parts: int = 1) -> float:
        if role not in self.hooks:
            known = ", ".join(sorted(role_label(r) for r in self.hooks))
            raise ValueError(f"{where}: DP hook {role[0]}{' of the root' if role[1] else ''} is in no "
                             f"calibration recording (they have {known}): not the same training program")
        return self.hooks[role].at(elements, parts)

    def retime(self, measured_us: float, old: HookSpec, new: HookSpec) -> float:
        """A hook's self time measured at one rank (`old`), at the calibration's DP degree (`new`): what
        the larger group adds in it is added; the model knows no other change."""
        if old == new:
            return measured_us
        if old.dp != 1 or new.dp != self.dp or old.role != new.role:
            raise ValueError(f"host collective costs take a hook from DP 1 to DP {self.dp}, not {old} -> {new}")
        return measured_us + self.cost(new.role, new.elements, "retime", new.parts)

    def as_dict(self) -> dict:
        return {"dp": self.dp, "sharding": self.sharding, "outside_scale": round(self.outside_scale, 4),
                "recordings": self.recordings, "per_pair_outside": self.per_pair_outside,
                "hooks": {role_label(r): {"intercept_us": round(c.intercept_us, 2),
                                          "us_per_element": c.slope_us_per_element,
                                          "elements": list(c.elements), "points": c.points}
                          for r, c in sorted(self.hooks.items())}}


def _hook_means(tables: Sequence[TraceTable]) -> tuple[dict, float, dict, str]:
    """Per hook key, (role, unit, parts, mean self time) over every profiled step of every rank; the mean
    time outside the hooks; the units' elements (of the lowest rank's first step); fsdp2 or ddp."""
    times, outside = defaultdict(list), []
    roles, elements, kinds = {}, None, set()
    for t in tables:
        for s in find_steps(t):
            found = dp_ranges(t, s)
            if found is None:
                raise ValueError(f"{t.path}: no FSDP2 hook range or DDP bucket in step {s.number}: not an FSDP2 "
                                 "or DDP recording")
            elements = found.elements if elements is None else elements
            kinds.add(found.kind)
            outside.append(outside_hooks_us(found.hooks, s))
            for h in found.hooks:
                times[h.key].append(h.self_us)
                roles[h.key] = (h.role, h.unit, h.parts)
    return ({k: (*roles[k], float(np.mean(v))) for k, v in times.items()}, float(np.mean(outside)),
            elements or {}, "/".join(sorted(kinds)))


def fit_host_collective_costs(pairs: Sequence[tuple[Sequence[TraceTable], Sequence[TraceTable]]]
                              ) -> HostCollectiveCosts:
    """`pairs`: (the run at DP N, the same program at one rank), each a list of rank tables."""
    if not pairs:
        raise ValueError("no calibration recording: give the same program at another size, recorded at the "
                         "target's DP degree and at one rank")
    points = defaultdict(list)
    scales, names, degree, sharding = [], [], None, None
    for at_dp, at_one in pairs:
        where = f"{at_dp[0].path} vs {at_one[0].path}"
        flavours_dp = {t.rank: find_dp_flavour(t) for t in at_dp}
        flavour_one = {t.rank: find_dp_flavour(t) for t in at_one}
        dp, one = host_dp_degree(at_dp, flavours=flavours_dp), host_dp_degree(at_one, flavours=flavour_one)
        if one != 1 or len(at_one) != 1:
            raise ValueError(f"{where}: the second recording of a calibration pair must be one rank "
                             f"(it shows DP {one} over {len(at_one)} ranks)")
        if dp < 2:
            raise ValueError(f"{where}: the first recording of a calibration pair shows no host collective "
                             "(DP 1): nothing to calibrate")
        if degree is not None and dp != degree:
            raise ValueError(f"{where}: calibration recordings at DP {degree} and {dp}: one degree at a time")
        degree = dp
        kind = flavours_dp[min(flavours_dp)].kind
        if sharding is not None and kind != sharding:
            raise ValueError(f"{where}: calibration recordings of {sharding} and {kind}: one strategy at a time")
        sharding = kind
        shapes = [(t.metadata.get("lumosCapture") or {}).get("config") for t in (at_dp[0], at_one[0])]
        if all(shapes) and shapes[0] != shapes[1]:
            raise ValueError(f"{where}: the two recordings train different models ({shapes[0]} vs {shapes[1]}): "
                             "a calibration pair is one program at two DP degrees")
        hooks_dp, out_dp, _, kind_dp = _hook_means(at_dp)
        hooks_one, out_one, elements, kind_one = _hook_means(at_one)
        if kind_dp != kind_one:
            raise ValueError(f"{where}: {kind_dp} at DP {dp} and {kind_one} at one rank: a calibration pair is "
                             "one program at two DP degrees")
        if set(hooks_dp) != set(hooks_one):
            diff = sorted(set(hooks_dp) ^ set(hooks_one))[:3]
            raise ValueError(f"{where}: the two recordings' DP hooks differ ({diff} ...): not the same "
                             "program at two DP degrees")
        for key, (role, unit, parts, t_one) in hooks_one.items():
            if unit not in elements:
                raise ValueError(f"{at_one[0].path}: the size of DP unit {unit!r} is not in the trace "
                                 "(no fsdp::chunk_cat inside its hooks)")
            points[role].append((elements[unit], parts, hooks_dp[key][3] - t_one))
        scales.append(out_dp / out_one)
        names.append(f"{Path(at_dp[0].path).parent.name} vs {Path(at_one[0].path).parent.name}")
    hooks = {role: _fit(pts) for role, pts in points.items()}
    return HostCollectiveCosts(dp=int(degree), sharding=str(sharding), hooks=hooks, outside_scale=float(np.mean(scales)),
                               recordings=names, per_pair_outside=[round(s, 4) for s in scales])


def _fit(pts: list) -> HookCost:
    """A hook role's (elements, parts, added us) points as a time per part plus a time per element: a
    line in the elements where every point holds one part (FSDP2), least squares over parts and
    elements where they differ (DDP's buckets); a time per part alone where the points cannot tell
    the two apart (one size)."""
    x = np.array([p[0] for p in pts], dtype=float)
    parts = np.array([p[1] for p in pts], dtype=float)
    y = np.array([p[2] for p in pts], dtype=float)
    span = (int(x.min()), int(x.max()))
    if np.ptp(x / parts) == 0:       # elements in proportion to parts: no telling the two terms apart
        return HookCost(float(np.mean(y / parts)), 0.0, span, len(pts))
    if np.all(parts == 1):
        slope, intercept = np.polyfit(x, y, 1)
        return HookCost(float(intercept), float(slope), span, len(pts))
    (per_part, slope), *_ = np.linalg.lstsq(np.column_stack([parts, x]), y, rcond=None)
    return HookCost(float(per_part), float(slope), span, len(pts))
