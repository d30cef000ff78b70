"""The NVML clock log: samples placed on profiled steps, summarized, and never a failure.

A fake NVML stands in for the GPU (no real one here). Its SM clock falls from 1980 to
1755 MHz, under SW_POWER_CAP, at t = 0.85 s: what our H200 recordings showed after
~0.85 s of continuous work.
"""

from __future__ import annotations

import gzip
import json
import sys
import time
import types

import pytest

from lumos.capture.clocks import FIELDS, ClockSampler, decode_reasons
from lumos.capture.profile import profile_steps

DROP_AT_S = 0.85        # the fake GPU clocks down from here
SW_POWER_CAP = 0x4
GPU_IDLE = 0x1


class FakeNVML(types.SimpleNamespace):
    """pynvml's calls the sampler makes, answering from a clock the test sets (`now`)."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0

    def __init__(self, now=lambda: 0.0, fail_init=None, throttle_only=False):
        super().__init__(now=now, fail_init=fail_init, inits=0, shutdowns=0, handles=[])
        if not throttle_only:
            self.nvmlDeviceGetCurrentClocksEventReasons = self._reasons

    def nvmlInit(self):
        if self.fail_init:
            raise RuntimeError(self.fail_init)
        self.inits += 1

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetHandleByIndex(self, i):
        self.handles.append(i)
        return ("gpu", i)

    def nvmlDeviceGetHandleByUUID(self, uuid):
        self.handles.append(uuid)
        return ("gpu", uuid)

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return 700_000                       # mW

    def nvmlDeviceGetMaxClockInfo(self, h, kind):
        return 1980 if kind == self.NVML_CLOCK_SM else 3201

    def nvmlDeviceGetClockInfo(self, h, kind):
        if kind == self.NVML_CLOCK_MEM:
            return 3201
        return 1980 if self.now() < DROP_AT_S else 1755

    def nvmlDeviceGetPowerUsage(self, h):
        return 650_500 if self.now() < DROP_AT_S else 700_250     # mW

    def nvmlDeviceGetTemperature(self, h, sensor):
        return 60 if self.now() < DROP_AT_S else 64

    def _reasons(self, h):
        return 0 if self.now() < DROP_AT_S else SW_POWER_CAP

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h):
        return GPU_IDLE


class Clock:
    """A perf_counter the test moves by hand."""

    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def _run(sampler: ClockSampler, clock: Clock, step_starts: dict[int, float], end: float, every: float):
    """Mark each step at its start and sample every `every` s, as the thread would, then stop."""
    assert sampler.open()
    marks = sorted(step_starts.items(), key=lambda kv: kv[1])
    t, i = 0.0, 0
    while t < end:
        while i < len(marks) and marks[i][1] <= t:
            clock.t = marks[i][1]
            sampler.mark(marks[i][0])
            i += 1
        clock.t = t
        sampler.sample()
        t = round(t + every, 9)
    clock.t = end
    sampler.stop()
    return sampler.metadata()


def test_samples_fall_in_their_step_and_the_drop_shows_in_the_summary(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    clock = Clock()
    nvml = FakeNVML(now=clock)
    s = ClockSampler(0, nvml=nvml, clock=clock)
    # ProfilerStep#2 runs 0.0-0.5 s, #3 0.5-1.0 s; a sample every 0.1 s
    block = _run(s, clock, {2: 0.0, 3: 0.5}, end=1.0, every=0.1)

    assert block["source"] == "nvml" and block["device_index"] == 0 and block["interval_ms"] == 10
    assert block["power_limit_w"] == 700.0 and block["max_sm_mhz"] == 1980
    assert block["fields"] == ["step", "t_ms", "sm_mhz", "mem_mhz", "power_w", "temp_c", "reasons"]
    assert block["fields"] == list(FIELDS) and block["truncated"] is False
    rows = block["samples"]
    assert len(rows) == 10
    # t = 0.6 s: step 3, 100 ms after its start, still at full clock
    assert rows[6] == [3, 100.0, 1980, 3201, 650.5, 60, 0]
    # t = 0.9 s: after the drop, power-capped
    assert rows[9] == [3, 400.0, 1755, 3201, 700.25, 64, SW_POWER_CAP]
    assert [r[0] for r in rows] == [2] * 5 + [3] * 5
    assert [r[1] for r in rows[:5]] == [0.0, 100.0, 200.0, 300.0, 400.0]

    step2, step3 = block["per_step"]
    assert step2 == {"step": 2, "samples": 5, "sm_mhz_mean": 1980.0, "sm_mhz_min": 1980,
                     "power_w_mean": 650.5, "power_w_max": 650.5, "temp_c_max": 60, "reasons": []}
    # 0.5, 0.6, 0.7, 0.8 s at 1980 MHz; 0.9 s at 1755: (4 * 1980 + 1755) / 5 = 1935
    assert step3 == {"step": 3, "samples": 5, "sm_mhz_mean": 1935.0, "sm_mhz_min": 1755,
                     "power_w_mean": 660.45, "power_w_max": 700.25, "temp_c_max": 64,
                     "reasons": ["SW_POWER_CAP"]}
    assert nvml.inits == 1 and nvml.shutdowns == 1
    json.dumps(block)   # it goes into the trace as it is


def test_samples_outside_the_profiled_steps_are_dropped():
    clock = Clock()
    s = ClockSampler(0, nvml=FakeNVML(now=clock), clock=clock)
    assert s.open()
    clock.t = 0.1
    s.sample()           # before the first step began
    s.mark(5, t=0.2)
    clock.t = 0.25
    s.sample()
    s.stop(t=0.3)
    clock.t = 0.4
    s.sample()           # no-op: NVML is released at stop
    assert [r[:2] for r in s.metadata()["samples"]] == [[5, 50.0]]


def test_reason_bits_decode_to_pynvml_names():
    # the values of pynvml's nvmlClocksEventReason* constants (nvidia-ml-py 13.615)
    assert decode_reasons(0) == [] and decode_reasons(None) == []
    assert decode_reasons(0x4 | 0x8 | 0x80) == ["SW_POWER_CAP", "HW_SLOWDOWN", "HW_POWER_BRAKE"]
    assert decode_reasons(0x1 | 0x20 | 0x40) == ["GPU_IDLE", "SW_THERMAL", "HW_THERMAL"]
    assert decode_reasons(0x800) == ["0x800"]   # a bit a newer driver may add


def test_reason_bits_match_the_installed_pynvml():
    pynvml = pytest.importorskip("pynvml")
    from lumos.capture.clocks import REASONS

    by_name = {"GPU_IDLE": "GpuIdle", "SW_POWER_CAP": "SwPowerCap", "HW_SLOWDOWN": "HwSlowdown",
               "SW_THERMAL": "SwThermalSlowdown", "HW_THERMAL": "HwThermalSlowdown",
               "HW_POWER_BRAKE": "HwPowerBrakeSlowdown", "SYNC_BOOST": "SyncBoost"}
    for bit, name in REASONS.items():
        if name in by_name:
            assert getattr(pynvml, "nvmlClocksThrottleReason" + by_name[name]) == bit, name


def test_older_pynvml_falls_back_to_throttle_reasons():
    clock = Clock()
    s = ClockSampler(0, nvml=FakeNVML(now=clock, throttle_only=True), clock=clock)
    block = _run(s, clock, {1: 0.0}, end=0.05, every=0.1)
    assert block["per_step"][0]["reasons"] == ["GPU_IDLE"]


def test_the_device_is_found_through_cuda_visible_devices(monkeypatch):
    nvml = FakeNVML()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert ClockSampler(1, nvml=nvml).open() and nvml.handles == [5]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-abc,GPU-def")
    assert ClockSampler(0, nvml=nvml).open() and nvml.handles[-1] == "GPU-abc"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-xyz")
    s = ClockSampler(0, nvml=nvml)
    assert not s.open()
    assert s.metadata() == {"source": None, "why": "no NVML device for cuda:0: a MIG instance has no clocks of its own"}


def test_unavailable_nvml_is_a_reason_not_an_error(monkeypatch):
    s = ClockSampler(0, nvml=FakeNVML(fail_init="NVML Shared Library Not Found"))
    s.start()
    s.mark(2)
    s.stop()
    assert s.metadata() == {"source": None, "why": "nvmlInit failed: NVML Shared Library Not Found"}
    monkeypatch.setitem(sys.modules, "pynvml", None)   # as if nvidia-ml-py were not installed
    s = ClockSampler(0)
    s.start()
    s.stop()
    assert s.metadata() == {"source": None, "why": "pynvml is not installed (pip install nvidia-ml-py)"}


def test_the_sample_list_is_bounded():
    clock = Clock()
    s = ClockSampler(0, nvml=FakeNVML(now=clock), clock=clock, max_samples=3)
    block = _run(s, clock, {2: 0.0}, end=1.0, every=0.1)
    assert len(block["samples"]) == 3 and block["truncated"] is True and block["max_samples"] == 3
    assert block["why_truncated"] == "sampling stopped after 3 samples"


def _profiled_with_fake_gpu(tmp_path, monkeypatch, **kwargs):
    """A CPU loop recorded as if it ran on cuda:0, with the fake NVML installed as pynvml."""
    import torch

    from lumos.capture.profile import lumos_profile

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    start = time.perf_counter()
    monkeypatch.setitem(sys.modules, "pynvml", FakeNVML(now=lambda: time.perf_counter() - start))
    with lumos_profile(tmp_path, steps=2, warmup=1, device="cuda:0", **kwargs) as cap:
        for _ in range(cap.total_iterations):
            torch.randn(64, 64).sum()
            time.sleep(0.06)
            cap.step()
    return json.loads(gzip.decompress(cap.path.read_bytes()))


def test_lumos_profile_samples_only_the_recorded_steps(tmp_path, monkeypatch):
    doc = _profiled_with_fake_gpu(tmp_path, monkeypatch)
    clocks = doc["lumosCapture"]["clocks"]
    assert clocks["source"] == "nvml" and clocks["device_index"] == 0
    # wait 1 + warmup 1: the recorded iterations are ProfilerStep#2 and #3
    steps = {e["name"]: e["dur"] / 1000.0 for e in doc["traceEvents"]
             if e.get("name", "").startswith("ProfilerStep#") and e.get("ph") == "X"}
    assert sorted(steps) == ["ProfilerStep#2", "ProfilerStep#3"]
    assert [p["step"] for p in clocks["per_step"]] == [2, 3]
    # ~60 ms a step, a sample every 10 ms; a loaded CI machine may take fewer
    assert all(2 <= p["samples"] <= 8 for p in clocks["per_step"]), clocks["per_step"]
    for step, t_ms, *_ in clocks["samples"]:
        # every sample lies inside its ProfilerStep range (1 ms for profiler.step()'s own cost)
        assert 0.0 <= t_ms <= steps[f"ProfilerStep#{step}"] + 1.0


def test_lumos_profile_off_or_on_the_cpu_says_why(tmp_path, monkeypatch):
    doc = _profiled_with_fake_gpu(tmp_path / "off", monkeypatch, log_clocks=False)
    assert doc["lumosCapture"]["clocks"] == {"source": None, "why": "off (log_clocks=False)"}
    # asked for, but the model runs on the CPU: NVML is not even opened
    nvml = FakeNVML()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    path = profile_steps(lambda: None, steps=1, warmup=1, out_dir=tmp_path / "cpu",
                         log_clocks=True)
    doc = json.loads(gzip.decompress(path.read_bytes()))
    assert doc["lumosCapture"]["clocks"] == {"source": None, "why": "the capture's device is cpu, not a CUDA GPU"}
    assert nvml.inits == 0


def test_gpt_capture_on_cpu_records_why_there_are_no_clocks(gpt_trace):
    assert gpt_trace["lumosCapture"]["clocks"] == {
        "source": None, "why": "the capture's device is cpu, not a CUDA GPU"}


def test_gpt_log_clocks_flag(tmp_path, tiny_args):
    from lumos.cli import build_parser, main

    args = [a for a in tiny_args]
    args[args.index("--steps") + 1] = "1"
    parser = build_parser("capture")
    ns = parser.parse_args(["capture", "gpt", *args, "--out", str(tmp_path)])
    assert ns.log_clocks is None
    assert parser.parse_args(["capture", "gpt", "--log-clocks", "--out", "x"]).log_clocks is True
    assert main(["capture", "gpt", *args, "--device", "cpu", "--no-log-clocks", "--out", str(tmp_path)]) == 0
    doc = json.loads(gzip.decompress((tmp_path / "rank0.json.gz").read_bytes()))
    assert doc["lumosCapture"]["clocks"] == {"source": None, "why": "off (log_clocks=False)"}


def test_importing_the_capture_imports_no_pynvml():
    import subprocess

    code = ("import sys, lumos.cli; lumos.cli.build_parser('capture'); "
            "import lumos.capture.profile, lumos.capture.gpt, lumos.capture.clocks; "
            "sys.exit(int('pynvml' in sys.modules or 'torch' in sys.modules))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
