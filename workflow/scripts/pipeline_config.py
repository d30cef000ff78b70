"""Glue between the Snakemake config and the Hydra groups: run names, overrides, config-file inputs.

Imported by the Snakefile (and the tests), never by the package. Two jobs:
- name the sweep: an emulated run is `{model}-{tp}x{pp}x{dp}` (e.g. `gpt3_15b-2x2x4`), with `v{V}` after it
  where the pipeline interleaves V model chunks per stage (`llama3_8b-2x8x4v2`), then `c{C}` where C
  context-parallel ranks share each sequence (`llama3_8b-2x2x2c2`), then `-torchtitan` for a run trained with
  `training=torchtitan` (`llama3_8b-2x1x4-torchtitan`; `-torchtitan_sac2` with per-layer selective AC, every
  second block checkpointed) or `-ring` for context parallelism's ring form (`training.cp_form=ring`,
  `llama3_8b-2x2x2c2-ring`) or `-overlap` for Megatron's overlapped pipeline exchange
  (`training.overlap_p2p=true`, `llama3_8b-2x8x4v2-overlap`);
- tell Snakemake which Hydra group files a job's composition reads
  (`hydra_inputs`), so touching `config/simulator/dpro.yaml` re-runs the dPRO
  replays and what depends on them, and nothing else; and which of the
  pipeline-wide `overrides` apply to a job (`overrides_for`), so
  `ablation=no_inter_stream` reaches the replays but not the emulator.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

RUN_RE = re.compile(r"^(?P<model>[A-Za-z0-9_]+)-(?P<tp>\d+)x(?P<pp>\d+)x(?P<dp>\d+)(?:v(?P<vp>\d+))?(?:c(?P<cp>\d+))?"
                    r"(?:-(?P<training>torchtitan_sac2|torchtitan|ring|overlap))?$")
RUN_WILDCARD = r"[A-Za-z0-9_]+-\d+x\d+x\d+(?:v\d+)?(?:c\d+)?(?:-torchtitan_sac2|-torchtitan|-ring|-overlap)?"
# a run trained another way than the default stack: its overrides (an FSDP run emulates every rank, whose
# collectives then wait for real peers: stand-in peers overstate an FSDP run's waits,
# docs/notes/2026-12-06-stand-in-peers.md)
TRAINING_OVERRIDES = {"torchtitan": ["training=torchtitan", "ranks=all", "write_ranks=stage", "emulator.granularity=fine"],
                      "ring": ["training.cp_form=ring"],   # Transformer Engine's p2p ring (lumos/emulator/ring_attention.py)
                      # Megatron's --overlap-p2p-communication, interleaved runs (lumos/emulator/pipeline_overlap.py)
                      "overlap": ["training.overlap_p2p=true"]}
# torchtitan's per-layer selective AC, every second block checkpointed (its configs' selective_ac_option "2")
TRAINING_OVERRIDES["torchtitan_sac2"] = TRAINING_OVERRIDES["torchtitan"] + ["training.recompute=selective_layer",
                                                                            "training.ac_every=2"]
TORCHTITAN = ("torchtitan", "torchtitan_sac2")   # the stacks that keep FSDP2's weights gathered under PP
# Keys a job sets itself: a pipeline-wide override never selects the Hydra group files for them.
PER_JOB_KEYS = {"seed", "out", "ranks", "progress", "experiment", "step"}


@dataclass(frozen=True)
class Run:
    """One emulated configuration: model config name, TP x PP x DP and model chunks per stage."""

    model: str
    tp: int
    pp: int
    dp: int
    vp: int = 1
    cp: int = 1
    training: str = ""          # "" (the config's default stack) or a key of TRAINING_OVERRIDES

    @property
    def name(self) -> str:
        return (f"{self.model}-{self.tp}x{self.pp}x{self.dp}" + (f"v{self.vp}" if self.vp > 1 else "")
                + (f"c{self.cp}" if self.cp > 1 else "") + (f"-{self.training}" if self.training else ""))

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    def emulate_overrides(self) -> list[str]:
        return [f"model={self.model}", f"parallel.tp={self.tp}", f"parallel.pp={self.pp}",
                f"parallel.dp={self.dp}"] + ([f"parallel.vp={self.vp}"] if self.vp > 1 else []) \
            + ([f"parallel.cp={self.cp}"] if self.cp > 1 else []) + TRAINING_OVERRIDES.get(self.training, [])


def parse_run(name: str) -> Run:
    m = RUN_RE.match(name)
    if not m:
        raise ValueError(f"emulated run {name!r} is not MODEL-TPxPPxDP[vV] (e.g. gpt3_15b-2x2x4, llama3_8b-2x8x4v2)")
    return Run(m["model"], int(m["tp"]), int(m["pp"]), int(m["dp"]), int(m["vp"] or 1), int(m["cp"] or 1),
               m["training"] or "")


def with_parallel(base: Run, shape: str) -> Run:
    """The base run at another TPxPPxDP (`2x4x8`)."""
    tp, pp, dp = (int(v) for v in shape.lower().split("x"))
    return Run(base.model, tp, pp, dp)


def predict_flags(base: Run, target: Run) -> list[str]:
    """`lumos predict` flags that take the base run to the target: its TPxPPxDP, and the layer count,
    width and grouped-query attention's KV heads where the target's model config differs from the base's."""
    bm, tm = _model(str(config_dir()), base.model), _model(str(config_dir()), target.model)
    flags = ["--tp", str(target.tp), "--pp", str(target.pp), "--dp", str(target.dp)]
    if target.vp != base.vp:
        flags += ["--vp", str(target.vp)]
    if target.cp != base.cp:
        flags += ["--cp", str(target.cp)]
    if target.training == base.training and base.training in TORCHTITAN and base.pp == 1 < target.pp:
        flags += ["--fsdp-strategy", "shard_grad_op"]   # torchtitan keeps the weights gathered under PP
    if tm.num_layers != bm.num_layers:
        flags += ["--layers", str(tm.num_layers)]
    if tm.hidden != bm.hidden or tm.ffn_hidden != bm.ffn_hidden:
        flags += ["--hidden", str(tm.hidden), "--ffn", str(tm.ffn_hidden)]
    kv_b, kv_t = bm.get("num_kv_heads") or bm.num_heads, tm.get("num_kv_heads") or tm.num_heads
    if kv_t != kv_b and tm.num_heads == bm.num_heads:      # (a width change carries the base's KV heads)
        flags += ["--kv-heads", str(kv_t)]
    return flags


@functools.lru_cache(maxsize=None)
def _model(config_root: str, name: str):
    """A model config, read once per parse (every prediction rule names the base's)."""
    from omegaconf import OmegaConf

    return OmegaConf.load(Path(config_root) / "model" / f"{name}.yaml")


def override_key(override: str) -> str:
    """`+model.hidden=1` -> `model.hidden`; `~trace` -> `trace`; `ablation@x=y` -> `ablation`."""
    key = override.split("=", 1)[0].lstrip("+~")
    return key.split("@", 1)[0]


def override_root(override: str) -> str:
    return override_key(override).split(".", 1)[0]


def config_dir() -> Path:
    from lumos.config import config_dir as lumos_config_dir

    return lumos_config_dir()


@functools.lru_cache(maxsize=None)
def _compose(primary: str, group_overrides: tuple[str, ...], config_root: str):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=config_root, version_base=None):
        cfg = compose(config_name=primary, overrides=list(group_overrides), return_hydra_config=True)
    choices = {k: v for k, v in cfg.hydra.runtime.choices.items() if not k.startswith("hydra") and v is not None}
    keys = {k for k in cfg.keys() if k != "hydra"} | set(choices)
    GlobalHydra.instance().clear()
    return choices, frozenset(keys)


def _group_overrides(overrides: Sequence[str]) -> tuple[str, ...]:
    """The overrides that can change which group files are read (no dotted keys, no per-job keys)."""
    return tuple(o for o in overrides if "." not in override_key(o) and override_key(o) not in PER_JOB_KEYS)


def overrides_for(primary: str, overrides: Sequence[str]) -> list[str]:
    """The pipeline-wide overrides that name a key or group of this job's config."""
    _, keys = _compose(primary, (), str(config_dir()))
    return [o for o in overrides if override_root(o) in keys]


def hydra_inputs(primary: str, overrides: Sequence[str] = ()) -> list[str]:
    """The config files a composition of `primary` with `overrides` reads (primary + chosen groups)."""
    root = config_dir()
    choices, _ = _compose(primary, _group_overrides(overrides), str(root))
    files = [root / f"{primary}.yaml"] + [root / group / f"{choice}.yaml" for group, choice in sorted(choices.items())]
    return [_display(p) for p in files]


def _display(path: Path) -> str:
    """Relative to the working directory when inside it (Snakemake prints shorter names)."""
    try:
        return os.path.relpath(path) if path.is_relative_to(Path.cwd()) else str(path)
    except ValueError:
        return str(path)
