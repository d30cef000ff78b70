"""lumos.capture.profile on a plain training loop: schedule, file naming, metadata."""

from __future__ import annotations

import gzip
import json
import warnings

import pytest
import torch

from lumos.capture import profile as cap_profile
from lumos.capture.profile import lumos_profile, profile_steps, trace_path_for_rank


def _tiny_step():
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(4, 8)
    calls = []

    def step():
        calls.append(1)
        with torch.profiler.record_function("layer_0/forward"):
            loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step, calls


def _load(path):
    return json.loads(gzip.decompress(path.read_bytes()))


def test_profile_steps_runs_wait_warmup_active(tmp_path):
    step, calls = _tiny_step()
    path = profile_steps(step, steps=3, warmup=2, out_dir=tmp_path / "out", rank=1, world_size=4)
    assert path == trace_path_for_rank(tmp_path / "out", 1) == tmp_path / "out" / "rank1.json.gz"
    assert len(calls) == 1 + 2 + 3
    doc = _load(path)
    steps = [e for e in doc["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")]
    assert len(steps) == 3
    assert doc["distributedInfo"] == {"backend": None, "rank": 1, "world_size": 4}
    assert doc["lumosCapture"]["enable_cuda_sync_events"] is True  # torch 2.13 has it
    assert doc["lumosCapture"]["activities"] == ["CPU"]
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["rank1.json.gz"]


def test_context_manager_form(tmp_path):
    step, _ = _tiny_step()
    with lumos_profile(tmp_path, steps=1, warmup=1, metadata={"run": "cm"}) as cap:
        assert cap.total_iterations == 3 and cap.path is None
        for _ in range(cap.total_iterations):
            step()
            cap.step()
    assert cap.path == tmp_path / "rank0.json.gz"
    doc = _load(cap.path)
    assert doc["lumosCapture"]["run"] == "cm"
    assert doc["distributedInfo"]["rank"] == 0 and doc["distributedInfo"]["world_size"] == 1


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError):
        profile_steps(lambda: None, steps=0, out_dir=tmp_path)
    with pytest.raises(ValueError):
        profile_steps(lambda: None, steps=1, out_dir=tmp_path, rank=4, world_size=2)


def test_finish_trace_keeps_torch_distributed_info():
    raw = json.dumps({"distributedInfo": {"backend": "nccl", "rank": 5, "world_size": 8},
                      "traceEvents": []}).encode()
    doc = json.loads(cap_profile._finish_trace(raw, 0, 1, None))
    assert doc["distributedInfo"] == {"backend": "nccl", "rank": 5, "world_size": 8}
    doc = json.loads(cap_profile._finish_trace(b'{"traceEvents": [], "x": NaN}', 3, 4, {"a": 1}))
    assert doc["distributedInfo"]["rank"] == 3 and doc["x"] is None and doc["lumosCapture"] == {"a": 1}


def test_experimental_config_guard(monkeypatch):
    class Old:  # an _ExperimentalConfig from before enable_cuda_sync_events
        def __init__(self, profiler_metrics=()):
            pass

    monkeypatch.setattr(torch._C._profiler, "_ExperimentalConfig", Old)
    with pytest.warns(UserWarning, match="enable_cuda_sync_events"):
        assert cap_profile.experimental_config() is None
    monkeypatch.delattr(torch._C._profiler, "_ExperimentalConfig")
    with pytest.warns(UserWarning, match="_ExperimentalConfig"):
        assert cap_profile.experimental_config() is None
    monkeypatch.undo()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cap_profile.experimental_config() is not None
