"""Micro-batches per pipeline: the paper's scale-out protocol (TP x PP, MLSys 2025 Fig. 4 caption) by
default, an explicit `model.num_microbatches` over it, `model.global_batch_size` over both."""

from __future__ import annotations

import orjson
import pytest

from lumos.cli import main
from lumos.config import compose
from lumos.emulator.settings import SettingsError, from_config


def _model(*overrides):
    return from_config(compose("emulate", list(overrides))).model


@pytest.mark.parametrize("overrides, nmb, gbs", [
    (["model=gpt3_15b"], 4, 16),                                         # the 15B base, 2x2x4
    (["model=gpt3_15b", "parallel.pp=8"], 16, 64),                       # PP x4: 4x the micro-batches
    (["model=gpt3_15b", "parallel.pp=16"], 32, 128),
    (["model=gpt3_15b", "parallel.dp=16"], 4, 64),                       # DP: each replica keeps its work
    (["model=gpt3_175b", "parallel=paper_175b"], 32, 256),               # the paper's Fig. 1 layout, 8x4x8
    (["model=gpt3_44b", "parallel.tp=4", "parallel.pp=4"], 16, 64),
    (["model=gpt3_15b_v2"], 4, 16),
    (["model=tiny", "parallel.pp=4", "parallel.dp=2"], 8, 16),
])
def test_default_is_tp_x_pp(overrides, nmb, gbs):
    m = _model(*overrides)
    assert (m.num_microbatches, m.global_batch_size) == (nmb, gbs)


def test_every_gpt3_config_follows_the_protocol():
    for name in ("gpt3_15b", "gpt3_15b_v1", "gpt3_15b_v2", "gpt3_15b_v3", "gpt3_15b_v4", "gpt3_44b",
                 "gpt3_117b", "gpt3_175b"):
        cfg = compose("emulate", [f"model={name}"]).model
        assert (cfg.microbatch_rule, cfg.num_microbatches) == ("tp_x_pp", None), name


def test_explicit_count_overrides_the_rule():
    m = _model("model=gpt3_15b", "parallel.pp=8", "model.num_microbatches=6")
    assert (m.num_microbatches, m.global_batch_size) == (6, 24)


def test_global_batch_overrides_count_and_rule():
    m = _model("model=gpt3_15b", "parallel.pp=8", "model.num_microbatches=6", "model.global_batch_size=64",
               "model.micro_batch_size=2")
    assert (m.num_microbatches, m.global_batch_size) == (8, 64)        # 64 / (2 x dp 4)


def test_fixed_rule_needs_a_count():
    with pytest.raises(SettingsError, match="microbatch_rule=fixed needs model.num_microbatches"):
        _model("model=gpt3_15b", "model.microbatch_rule=fixed")
    assert _model("model=gpt3_15b", "model.microbatch_rule=fixed", "model.num_microbatches=8").num_microbatches == 8


def test_unknown_rule_is_named():
    with pytest.raises(SettingsError, match="microbatch_rule must be one of tp_x_pp, fixed, got 'tp_pp'"):
        _model("model=gpt3_15b", "model.microbatch_rule=tp_pp", "model.num_microbatches=8")


def test_manifest_records_the_count_the_cli_ran(tmp_path):
    assert main(["emulate", "model=tiny", "parallel.tp=2", "parallel.pp=4", "parallel.dp=1", f"out={tmp_path}",
                 "--quiet"]) == 0
    m = orjson.loads((tmp_path / "manifest.json").read_bytes())
    assert (m["num_microbatches"], m["global_batch_size"]) == (8, 8)
    assert m["config"]["model"]["microbatch_rule"] == "tp_x_pp"
