"""Shared paths and small trace builders for the tests."""

from __future__ import annotations

from pathlib import Path

import pytest

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
