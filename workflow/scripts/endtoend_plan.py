"""Which jobs score predictions against hardware (table `endtoend`): one plan per data set of the
pipeline config's `endtoend:` section.

Imported by the Snakefile (workflow/rules/endtoend.smk), the table's shim and the tests, never by
the package. A data set names its published measurements (a data set of `lumos.emulator.realism`,
read with its loaders), a base and the measured layouts to predict from it. Two routes:

- the sweep's: the base is the prediction sweep's base (`predict.base`), emulated with the default
  profile, and every target is one of the sweep's scale-out targets. The sweep's own predictions
  (`results/{tag}/predict/{run}/seed{s}.json`, one per seed of the target) are scored: one
  prediction, read against the emulated actual in table `scaleout` and against the hardware here.
- its own: anything else (another base, a hardware profile, `lumos predict` flags, its own seed
  count). The base is emulated for this data set (`results/{tag}/endtoend/{name}/base/seed{s}/`,
  unless it is a plain run with the default profile: then `results/{tag}/emulated/{run}/seed{s}/`),
  and each target predicted from it (`results/{tag}/endtoend/{name}/predict/{run}/seed{s}.json`).

The base is either a run (`MODEL-TPxPPxDP`: the model config and layout, then `profile`, extra
`lumos emulate` overrides) or a layout (`TPxPPxDP`) of one of the data set's measured points: that
point's own overrides (which carry its hardware profile) emulate the base. The measured point of
every target is found by its layout; a target the data set did not measure is a config error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Mapping

import pipeline_config as pc

SHAPE_RE = re.compile(r"^(\d+)x(\d+)x(\d+)$")
PARALLEL_RE = re.compile(r"^parallel\.(tp|pp|dp)=(\d+)$")
MODEL_RE = re.compile(r"^model=([A-Za-z0-9_]+)$")


@dataclass(frozen=True)
class EndToEnd:
    """One data set's plan: how its base is emulated, which predictions are scored, and where they are."""

    name: str
    measured: str                      # the data set of `lumos.emulator.realism` (its loader)
    base: pc.Run
    base_overrides: tuple[str, ...]    # the `lumos emulate` overrides of the base (seed excluded)
    targets: tuple[pc.Run, ...]
    seeds: Mapping[str, tuple[int, ...]]   # target run -> the seeds predicted
    from_sweep: bool
    own_base: bool                     # emulated into this data set's own directory
    base_measured: bool = False        # the base is a measured point (emulated with that point's overrides)
    predict_flags: tuple[str, ...] = ()
    label: str = ""
    measured_by: str = "published"
    peer: Mapping = field(default_factory=dict)
    model: str = ""

    def base_dir(self, results: str, seed: int) -> str:
        if self.own_base:
            return f"{results}/endtoend/{self.name}/base/seed{seed}"
        return f"{results}/emulated/{self.base.name}/seed{seed}"

    def prediction_json(self, results: str, target: pc.Run, seed: int) -> str:
        if self.from_sweep:
            return f"{results}/predict/{target.name}/seed{seed}.json"
        return f"{results}/endtoend/{self.name}/predict/{target.name}/seed{seed}.json"

    def prediction_jsons(self, results: str) -> list[str]:
        return [self.prediction_json(results, t, s) for t in self.targets for s in self.seeds[t.name]]

    def base_seeds(self) -> list[int]:
        return sorted({s for seeds in self.seeds.values() for s in seeds})

    def shape(self, target: pc.Run) -> str:
        return f"{target.tp}x{target.pp}x{target.dp}"


def point_layout(point) -> str | None:
    """`TPxPPxDP` of a measured point, from its `parallel.*` overrides (or a label that is a layout)."""
    par = dict(m.groups() for m in (PARALLEL_RE.match(str(o)) for o in point.overrides) if m)
    if set(par) == {"tp", "pp", "dp"}:
        return f"{par['tp']}x{par['pp']}x{par['dp']}"
    return point.label if SHAPE_RE.match(point.label) else None


def measured_points(name: str, spec: Mapping, load: Callable | None = None) -> dict:
    """layout -> measured point of the data set `spec["measured"]` (optionally one `model` of it)."""
    if load is None:
        from lumos.emulator.realism import dataset_points as load
    points = [p for p in load(spec["measured"]) if not spec.get("model") or getattr(p, "model", "") == spec["model"]]
    out: dict = {}
    for p in points:
        layout = point_layout(p)
        if layout in out:
            raise ValueError(f"config: endtoend.{name}: two measured points of {spec['measured']!r} have layout "
                             f"{layout} ({out[layout].label}, {p.label}); name one model with `model:`")
        if layout:
            out[layout] = p
    return out


def plans(config: Mapping, seeds_of: Callable[[str], list], load: Callable | None = None) -> list[EndToEnd]:
    """The plan of every data set of `config["endtoend"]`, in config order (none without the section)."""
    sweep_base = pc.parse_run(config["predict"]["base"])
    sweep = {pc.with_parallel(sweep_base, s).name for shapes in config["predict"].get("scaleout", {}).values()
             for s in shapes}
    out = []
    for name, spec in (config.get("endtoend") or {}).items():
        points = measured_points(name, spec, load)
        missing = [t for t in spec["targets"] if t not in points]
        if missing:
            raise ValueError(f"config: endtoend.{name}: {spec['measured']!r} has no measurement of {missing} "
                             f"(measured layouts: {sorted(points)})")
        profile = tuple(spec.get("profile") or ())
        if SHAPE_RE.match(spec["base"]):
            if spec["base"] not in points:
                raise ValueError(f"config: endtoend.{name}: base {spec['base']} is not a measured layout of "
                                 f"{spec['measured']!r} (measured: {sorted(points)}); name a run MODEL-TPxPPxDP")
            if profile:
                raise ValueError(f"config: endtoend.{name}: a measured base carries its own profile; drop `profile`")
            over = tuple(str(o) for o in points[spec["base"]].overrides)
            model = next((m.group(1) for m in map(MODEL_RE.match, over) if m), None)
            if model is None:
                raise ValueError(f"config: endtoend.{name}: the measured base's overrides name no model: {over}")
            base = pc.with_parallel(pc.Run(model, 1, 1, 1), spec["base"])
            base_overrides, plain = over, False
        else:
            base = pc.parse_run(spec["base"])
            base_overrides, plain = tuple(base.emulate_overrides()) + profile, not profile
        targets = tuple(pc.with_parallel(base, t) for t in spec["targets"])
        flags = tuple(str(f) for f in spec.get("predict_flags") or ())
        from_sweep = (plain and base == sweep_base and not flags and "seeds" not in spec
                      and all(t.name in sweep for t in targets))
        if from_sweep:
            seeds = {t.name: tuple(seeds_of(t.name)) for t in targets}
        else:
            n = int(spec.get("seeds", config["seeds"]))
            seeds = {t.name: tuple(range(n)) for t in targets}
        out.append(EndToEnd(name, spec["measured"], base, base_overrides, targets, seeds, from_sweep,
                            own_base=not plain, base_measured=bool(SHAPE_RE.match(spec["base"])),
                            predict_flags=flags, label=spec.get("label", name),
                            measured_by=spec.get("measured_by", "published"),
                            peer=dict(spec.get("peer") or {}), model=spec.get("model", "")))
    return out
