"""No silent numbers: what `lumos predict` refuses, says and measures beside a prediction.

- a what-if that would change nothing it was asked to change is refused with the reason
  (`lumos.predict.no_op`): DP of a base without DP collectives, network speed of a base without
  collectives, shape and speed changes of a CPU-only base;
- memory is judged against the base's own GPU (`lumos.predict.device_memory`): the H200
  recording's deviceProperties, no GPU at all for a CPU-only capture;
- the base's measured iteration beside its unchanged replay (`lumos.predict.base_measured`).
The H200 recordings are resources/traces/h200 (MEASURED); the CPU capture is `lumos capture gpt`'s.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from lumos.cli import main as lumos_main

ROOT = Path(__file__).resolve().parents[2]
H200 = ROOT / "resources" / "traces" / "h200" / "base_r0"
TINY = ["--layers", "2", "--hidden", "32", "--ffn", "128", "--heads", "2", "--seq", "16",
        "--micro-batch", "2", "--vocab", "128", "--steps", "2", "--warmup", "1", "--quiet"]


def _predict(capsys, *argv) -> tuple[int, str, str]:
    rc = lumos_main(["predict", *map(str, argv)])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _json(capsys, *argv) -> dict:
    rc, out, err = _predict(capsys, *argv, "--format", "json")
    assert rc == 0, err
    return json.loads(out)


@pytest.fixture(scope="module")
def cpu_capture(tmp_path_factory):
    """A CPU-only `lumos capture gpt` run (no GPU kernel, one rank, no collective)."""
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("cpu_capture")
    assert lumos_main(["capture", "gpt", *TINY, "--device", "cpu", "--out", str(out)]) == 0
    return out


# --- item 1: a DP (or network) change of a base with nothing to re-time ---

def test_dp_of_a_one_gpu_base_inserts_its_gradient_buckets(capsys):
    doc = _json(capsys, H200, "--dp", "2")
    assert doc["predicted"]["exposed_comm_us"] + doc["predicted"]["overlapped_us"] > 0
    assert doc["predicted"]["iteration_us"] > doc["measured_base"]["replayed_unchanged_us"]
    assert ("inserted (the base has none): DP gradient buckets of 40M parameters overlapped with backward; timed by "
            "h100_roce's alpha-beta model (docs/prediction.md, \"From one GPU to a cluster\")") in doc["notes"]


def test_network_speed_of_a_base_without_collectives_is_refused(capsys):
    rc, _, err = _predict(capsys, H200, "--network-speed", "2")
    assert rc == 2
    assert err == ("lumos predict: error: --network-speed 2: the base has no collective to re-time (a one-GPU run): "
                   "a faster network changes nothing in it\n")


def test_tp_of_a_one_gpu_base_inserts_its_all_reduces(capsys):
    # TP re-shards the GEMMs and adds the all-reduces a TP 2 layout runs: said, not silent
    doc = _json(capsys, H200, "--tp", "2")
    assert doc["predicted"]["exposed_comm_us"] > 0.0
    assert ("inserted (the base has none): TP all-reduces (4 per layer: row-parallel outputs, column-parallel input "
            "gradients; one after the embedding); timed by h100_roce's alpha-beta model (docs/prediction.md, \"From "
            "one GPU to a cluster\")") in doc["notes"]


def test_the_same_degree_is_not_refused(capsys):
    assert _json(capsys, H200, "--dp", "1", "--tp", "1")["predicted"]["iteration_us"] > 0


# --- item 2: a CPU-only base ---

@pytest.mark.parametrize("flags, line", [
    (["--compute-speed", "2"], "--compute-speed 2: the base is a CPU-only trace (no GPU kernel), and the compute "
                               "speed scales GPU kernels only: the base's CPU ops would keep their time"),
    (["--tp", "2"], "--tp 2: the base is a CPU-only trace (no GPU kernel), and a TP change re-shards GPU kernels and "
                    "re-groups TP collectives only: the base's CPU ops would keep their time"),
    (["--dp", "2"], "--dp 2: the base has no data-parallel collective to re-time (a one-rank CPU run); a CPU "
                    "capture's collectives are host ops, which are not inserted (from a one-rank FSDP2 or DDP capture, "
                    "--dp with --dp-calibration predicts them)"),
    (["--network-speed", "2"], "--network-speed 2: the base has no collective to re-time (a one-rank CPU run): a "
                               "faster network changes nothing in it"),

])
def test_cpu_only_what_ifs_that_change_nothing_are_refused(cpu_capture, capsys, flags, line):
    rc, out, err = _predict(capsys, cpu_capture, *flags)
    assert rc == 2 and out == "" and err == f"lumos predict: error: {line}\n"


def test_a_cpu_only_prediction_says_what_is_re_timed(cpu_capture, capsys):
    base = _json(capsys, cpu_capture)
    layers = _json(capsys, cpu_capture, "--layers", "4")   # the rebuild copies the layers' CPU ops: this changes
    assert layers["predicted"]["iteration_us"] > base["predicted"]["iteration_us"]
    note = ("a CPU-only base (no GPU kernel): its ops and the time inside them (lumos/model/host_gaps.py) are "
            "re-timed for a new width or micro-batch size by their work (FLOPs for GEMMs and attention, elements for "
            "the rest); the rebuild copies layers and micro-batches, and the optimizer's host loop scales with the "
            "parameters; the Python between ops keeps its time")
    assert note in base["notes"] and note in layers["notes"]


# --- item 3: the base's own GPU memory ---

def test_memory_is_judged_against_the_traces_gpu(capsys):
    rc, out, _ = _predict(capsys, H200)
    assert rc == 0
    assert "  memory per GPU (peak stage): 17.7 GiB of 139.8 -> fits\n" in out
    doc = _json(capsys, H200)
    assert doc["memory"]["gpu_memory_gib"] == 139.8 and doc["memory"]["fits"] is True
    assert doc["memory"]["gpu_memory_source"] == ("trace: NVIDIA H200 deviceProperties totalGlobalMem "
                                                  "150,109,880,320 B (139.80 GiB, floored to 0.1)")
    given = _json(capsys, H200, "--gpu-memory-gib", "16")
    assert (given["memory"]["gpu_memory_gib"], given["memory"]["fits"]) == (16.0, False)
    assert given["memory"]["gpu_memory_source"] == "given (--gpu-memory-gib)"


def test_a_cpu_only_trace_has_no_gpu(cpu_capture, capsys):
    rc, out, _ = _predict(capsys, cpu_capture)
    assert rc == 0
    assert ("  memory (peak stage, the model's estimate): 1.0 GiB; no GPU (a CPU-only trace): no capacity, "
            "no fit verdict\n") in out
    doc = _json(capsys, cpu_capture)
    assert doc["memory"]["gpu_memory_gib"] is None and doc["memory"]["fits"] is None
    assert doc["memory"]["gpu_memory_source"] == "none: a CPU-only trace (no GPU)"
    # its measured base: the CPU span, its replay's medians of host work only (a CPU trace has no kernels)
    assert doc["measured_base"]["medians_of"] == ["host work"] and doc["measured_base"]["exposed_compute_us"] == 0.0


def test_search_refuses_a_cpu_only_base(cpu_capture, capsys):
    assert lumos_main(["search", str(cpu_capture), "--gpus", "1", "--workers", "1"]) == 2
    assert "a CPU-only trace (no GPU kernel): lumos search ranks layouts of GPUs" in capsys.readouterr().err


def test_an_emulated_h100_reads_exactly_the_profiles_capacity():
    # the pipeline's search table ranks the layouts that fit: an emulated H100 base (config/cluster/h100_roce,
    # the search base's cluster) must read the very capacity the profile gave before
    from types import SimpleNamespace

    from lumos.durations.collectives import load_profile
    from lumos.predict.device_memory import trace_capacity

    emulated = yaml.safe_load((ROOT / "config" / "cluster" / "h100_roce.yaml").read_text())["total_mem_bytes"]
    table = SimpleNamespace(metadata={"deviceProperties": [{"name": "NVIDIA H100 80GB HBM3",
                                                            "totalGlobalMem": emulated}] * 8})
    gib, _ = trace_capacity([table])
    assert emulated == 85049802752 and gib == 79.2 == load_profile()["memory"]["gpu_memory_gib"]
    assert trace_capacity([SimpleNamespace(metadata={"deviceProperties": []})]) is None


# --- item 4: the base's measured iteration beside its unchanged replay ---

def test_the_base_is_measured_beside_its_unchanged_replay(capsys):
    rc, out, _ = _predict(capsys, H200)
    assert rc == 0
    # the host work's medians keep the median step's total: the unchanged replay lands among the steps
    assert ("  base: measured 129.983 ms (step 3), replayed unchanged 130.402 ms; its profiled steps 2, 3, 4 measured "
            "127.407, 129.983, 131.397 ms (the replay's host work and kernels: medians over them)\n") in out
    # measured as `lumos replay --iteration gpu` measures the same step
    assert lumos_main(["replay", str(H200), "--iteration", "gpu", "--format", "json"]) == 0
    replay = json.loads(capsys.readouterr().out)
    doc = _json(capsys, H200, "--layers", "18")
    m = doc["measured_base"]
    assert m["iteration_us"] == replay["measured"]["iteration_us"] == 129982.91 and m["step"] == 3
    # a changed target: the base replayed unchanged is the unchanged prediction, the prediction itself untouched
    unchanged = _json(capsys, H200)
    assert m["replayed_unchanged_us"] == unchanged["predicted"]["iteration_us"] == 130401.601
    from lumos.predict.prediction import predict
    from lumos.trace import load_run
    assert doc["predicted"] == predict(load_run(H200), {"layers": 18})["predicted"]


def test_one_step_replays_say_no_median(capsys):
    rc, out, _ = _predict(capsys, H200, "--host", "step", "--kernels", "step")
    assert rc == 0 and "  base: measured 129.983 ms (step 3), replayed unchanged 129.983 ms\n" in out


def test_a_host_collective_base_is_measured_over_its_ranks(capsys):
    doc = _json(capsys, ROOT / "resources" / "traces" / "fsdp_cpu" / "full_2rank_r0", "--dp", "1")
    m = doc["measured_base"]
    assert (m["step"], m["critical_rank"], m["iteration_us"], m["replayed_unchanged_us"]) == (3, 1, 36062.95,
                                                                                             35760.612)
    assert m["profiled_steps"] == {"2": 34150.42, "3": 36062.95, "4": 36940.433} and m["medians_of"] == ["host work"]


@pytest.mark.parametrize("kw, line", [({"tp": 0}, "tp must be a positive integer or None (the base's), got 0"),
                                      ({"dp": -2}, "dp must be a positive integer or None (the base's), got -2"),
                                      ({"layers": 2.5}, "layers must be a positive integer or None (the base's), "
                                                        "got 2.5")])
def test_library_callers_get_no_number_for_an_impossible_degree(tiny_plan, kw, line):
    # `transform(plan, tp=0)` once meant "the base's TP": only None does
    from lumos.predict.whatif import transform

    with pytest.raises(ValueError) as err:
        transform(tiny_plan, **kw)
    assert str(err.value) == line


def test_a_cpu_trace_without_step_marks_says_what_its_iteration_is(cpu_capture, tmp_path, capsys):
    # every profiled step replayed as one iteration: said, and not called a GPU span on a trace without a GPU
    import gzip

    doc = json.load(gzip.open(next(cpu_capture.glob("*.json.gz")), "rt"))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep#")]
    (tmp_path / "nostep").mkdir()
    with gzip.open(tmp_path / "nostep" / "rank0.json.gz", "wt") as fh:
        json.dump(doc, fh)
    assert lumos_main(["replay", str(tmp_path / "nostep")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert ("  note: no step annotation (ProfilerStep#N): the whole trace is replayed as one iteration, every step "
            "it holds together") in out
    assert "  (iteration = the span of the CPU tasks over the whole trace (it marks no step))" in out


def test_a_cpu_capture_is_re_timed_for_a_new_width_or_micro_batch(cpu_capture, capsys):
    # its ops and the time inside them (the BLAS call of an aten::mm sits after its children) grow with the work
    base = _json(capsys, cpu_capture)["predicted"]["iteration_us"]
    wider = _json(capsys, cpu_capture, "--hidden", "64", "--ffn", "256")
    bigger = _json(capsys, cpu_capture, "--micro-batch", "8")
    assert wider["predicted"]["iteration_us"] > base and bigger["predicted"]["iteration_us"] > base
    assert any(n.startswith("a CPU-only base (no GPU kernel): its ops and the time inside them") for n in wider["notes"])
