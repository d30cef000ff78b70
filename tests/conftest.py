"""Shared paths and small trace builders for the tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from lumos.cli import main as lumos_main
from lumos.emulator import emulate, write_result
from lumos.trace import load_run

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT / "resources" / "traces" / "real"
SYNC_FIXTURES = REAL / "hta" / "sync_fixtures"
DLRM = REAL / "param" / "dlrm_8rank" / "kineto"
MORE = REAL / "hta" / "more"
AMD = MORE / "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz"
CPU_ONLY = MORE / "cpu_only__rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
TRITON = MORE / "triton_example__triton_example.json.gz"

# Every shipped real training trace (one rank each; DLRM as its 8 rank files).
TRAINING_TRACES = sorted(DLRM.glob("*.json.gz")) + [
    REAL / "param" / "resnet_1gpu" / "resnet_kineto.json.gz",
    REAL / "hta" / "negative_queue_length_values_check__rank0.json.gz",
    REAL / "hta" / "trace_diff__control__control.json.gz",
    REAL / "hta" / "nccl_parser_config__nccl_data.json.gz",
    REAL / "kineto" / "resnet50_num_workers_0__worker0.1623143566756.pt.trace.json.gz",
    AMD, CPU_ONLY,
]
ALL_TRACES = TRAINING_TRACES + sorted(SYNC_FIXTURES.glob("*.json.gz")) + [TRITON]


@pytest.fixture(scope="session")
def real_tables():
    from lumos.trace import load_trace
    return {p: load_trace(p) for p in ALL_TRACES}


# Emulated `tiny` runs (EMULATED, not measured) the transform and prediction tests share.
def _emulate(root, tp, pp, dp, seed=0):
    out = root / f"tiny_{tp}x{pp}x{dp}"
    assert lumos_main(["emulate", "model=tiny", f"parallel.tp={tp}", f"parallel.pp={pp}", f"parallel.dp={dp}",
                       f"seed={seed}", f"out={out}", "progress=false", "--quiet"]) == 0
    return out


@pytest.fixture(scope="session")
def tiny_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    return {"base": _emulate(root, 2, 2, 2), "pp4": _emulate(root, 2, 4, 2), "dp4": _emulate(root, 2, 2, 4),
            "tp4": _emulate(root, 4, 2, 2)}


@pytest.fixture(scope="session")
def tiny_plan(tiny_runs):
    from lumos.predict.whatif import base_plan

    return base_plan(load_run(tiny_runs["base"]))


# Emulated FSDP runs the prediction tests share (EMULATED).
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
