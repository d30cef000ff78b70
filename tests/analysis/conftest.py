"""Emulated runs more than one analysis test module reads (EMULATED)."""

from __future__ import annotations

import pytest

from lumos.emulator import emulate, write_result
from lumos.trace import load_run

QUIET = ["emulator.comm.jitter_sigma=0", "emulator.compute.jitter_sigma=0", "emulator.rank.slowness_sigma=0",
         "emulator.rank.straggler_prob=0", "emulator.peers.noise_sigma=0"]


@pytest.fixture(scope="session")
def quiet_fsdp(tmp_path_factory):
    """A 15B FSDP base inside hosts (TP 2, PP 2, DP 4) and DP 16 across four hosts, every random draw off."""
    out = {}
    for dp in (4, 16):
        d = tmp_path_factory.mktemp(f"fsdp_dp{dp}")
        write_result(emulate(["model=gpt3_15b", "parallel.tp=2", "parallel.pp=2", f"parallel.dp={dp}",
                              "training.dp_sharding=fsdp", "seed=0", *QUIET], progress=False), d)
        out[dp] = load_run(d)
    return out
