"""Compose one resolved configuration from the Hydra groups under `config/`.

Every command that takes `key=value` overrides (`lumos emulate model=gpt3_15b
parallel.dp=8 seed=3`) goes through `compose`, so the CLI and the Snakemake
pipeline resolve configurations the same way.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:   # omegaconf costs a command ~0.1 s to import; only composing needs it
    from omegaconf import DictConfig


def config_dir() -> Path:
    """`$LUMOS_CONFIG_DIR`, else the repository's `config/` beside the package."""
    env = os.environ.get("LUMOS_CONFIG_DIR")
    if env:
        return Path(env).resolve()
    return (Path(__file__).resolve().parent.parent / "config").resolve()


def compose(config_name: str, overrides: Sequence[str] = ()) -> DictConfig:
    """Hydra compose without changing the working directory or logging setup."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir()), version_base=None):
        cfg = hydra_compose(config_name=config_name, overrides=list(overrides))
    return cfg


def to_yaml(cfg: DictConfig) -> str:
    from omegaconf import OmegaConf

    return OmegaConf.to_yaml(cfg, resolve=True)
