"""`lumos.studies.prereg` (`python studies/prereg/prereg_h200.py`): the pre-registered H200 check,
everything but the GPU.

The configuration list keeps its promises (new sizes only, some outside what was recorded, the
capture and predict commands of a row describe the same model, as `lumos`'s own parsers read
them); the committed predictions file is the one the code would write now; `score` computes the
exact error of a made-up prediction against two tiny CPU recordings made by the same `record`
the GPU will run; and it refuses a predictions file changed after it was committed.
"""

from __future__ import annotations

import csv
import shutil
import subprocess
import sys

import pytest

from lumos.cli import build_parser

from ..conftest import ROOT


@pytest.fixture(scope="module")
def prereg():
    from lumos.studies import prereg

    return prereg


def parsed_sizes(capture: str, predict: str) -> tuple[dict, dict]:
    """What `lumos capture gpt` and `lumos predict` themselves read from the two command lines."""
    c = build_parser("capture").parse_args(capture.split()[1:])
    p = build_parser("predict").parse_args(predict.split()[1:])
    cap = {"layers": c.layers, "hidden": c.hidden, "ffn": c.ffn, "micro_batch": c.micro_batch,
           "microbatches": c.micro_batches, "heads": c.heads, "seq": c.seq}
    pred = {"layers": p.layers, "hidden": p.hidden, "ffn": p.ffn, "micro_batch": p.micro_batch,
            "microbatches": p.global_batch // p.micro_batch}
    return cap, pred


def test_the_configurations_are_new_and_some_outside_what_was_recorded(prereg):
    confs = prereg.configurations(prereg.BASE)
    recorded = prereg.recorded_sizes()
    assert len(confs) >= 6
    assert len(recorded) == 9 and prereg.BASE in recorded
    for name, sizes in confs.items():
        assert sizes not in recorded, name
        assert sizes["hidden"] // sizes["heads"] == 128 and sizes["hidden"] % sizes["heads"] == 0, name
        assert sizes["seq"] == 2048, name        # lumos predict cannot change the sequence
    outside = {n for n, s in confs.items() if prereg.outside_recorded(s)}
    assert {"layers_3x", "width_2.5x", "mbs_16"} <= outside and len(outside) >= 2
    assert len({tuple(sorted(s.items())) for s in confs.values()}) == len(confs)


def test_capture_and_predict_commands_describe_the_same_model(prereg):
    for name, sizes in prereg.configurations(prereg.BASE).items():
        cap, pred = parsed_sizes(prereg.capture_command(name, sizes),
                                 " ".join(prereg.predict_argv("resources/traces/h200/base_r0", sizes)))
        assert cap == sizes, name
        assert pred == {k: sizes[k] for k in pred}, name


def test_recording_order_base_first_then_largest_memory_last(prereg):
    for base in (prereg.BASE, prereg.TINY):
        order = prereg.recording_order(base)
        assert order[0] == ("base_r2", base, 2)
        assert order[1] == ("base_long", base, 3) and prereg.LONG[2] == 20   # clock calibration, 2.8 s of work
        assert [n for n, _, _ in order[2:]] == list(prereg.configurations(prereg.BASE))
    mem = [prereg.memory_gib(s) for _, s, _ in prereg.recording_order(prereg.BASE)[2:]]
    assert mem == sorted(mem) and mem[-1] < prereg.H200_GIB / 2


def test_record_needs_no_more_than_torch_and_the_capture(prereg):
    """The GPU machine's Python has torch; what `lumos.transform` and `lumos.trace` import it need not have."""
    code = ("import sys; import lumos.studies.prereg as p; p.recording_order(p.BASE); "
            "import lumos.capture.gpt; bad = {'numba', 'scipy', 'pandas', 'yaml'} & set(sys.modules); "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


@pytest.mark.parametrize("pooled", [False, True])
def test_the_committed_predictions_are_what_the_code_would_ask(prereg, pooled):
    name = prereg.POOLED if pooled else prereg.PREDICTIONS
    path = ROOT / name
    assert path.exists(), f"{name} not committed (python studies/prereg/prereg_h200.py predict{' --pooled' * pooled})"
    rows = prereg.read_predictions(path)
    confs = prereg.configurations(prereg.BASE)
    assert sorted((r["config"], r["base"]) for r in rows) == sorted((n, b) for n in confs for b in prereg.BASES)
    for r in rows:
        sizes = confs[r["config"]]
        assert r["capture_command"] == prereg.capture_command(r["config"], sizes)
        others = prereg.other_bases(r["base"], pooled)
        assert r["predict_command"] == " ".join(prereg.predict_argv(f"{prereg.H200_DIR}/{r['base']}", sizes, others))
        assert ("--other-recordings" in r["predict_command"]) == pooled
        assert r["fits_h200"] == "true" and 0 < float(r["memory_gib"]) < prereg.H200_GIB
        parts = [float(r[f"{p}_ms"]) for p in prereg.PARTS]
        assert parts[0] > 0 and sum(parts[1:]) == pytest.approx(parts[0], abs=0.01)
    assert len({(r["commit"], r["dirty"], r["code_digest"]) for r in rows}) == 1


@pytest.fixture(scope="module")
def tiny_recordings(prereg, tmp_path_factory):
    """Two tiny configurations recorded on CPU by `record` itself (one torch thread: ~1 s each)."""
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        out = tmp_path_factory.mktemp("prereg")
        summary = prereg.record(out, device="cpu", tiny=True, only=["ffn_0.5x", "mbcount_3"],
                                predictions=out / "none.csv")
    finally:
        torch.set_num_threads(threads)
    return out, summary


def fake_predictions(prereg, path, rows):
    """A predictions CSV for the tiny sizes, values made up: `rows` is [(config, base, iteration ms)]."""
    confs = prereg.configurations(prereg.TINY)
    out = []
    for name, base, ms in rows:
        out.append({"config": name, "capture_command": prereg.capture_command(name, confs[name]),
                    "predict_command": " ".join(prereg.predict_argv(f"{prereg.H200_DIR}/{base}", confs[name])),
                    "base": base, "iteration_ms": f"{ms:.3f}", "exposed_compute_ms": f"{ms - 1:.3f}",
                    "overlapped_ms": "0.000", "exposed_comm_ms": "0.000", "other_ms": "1.000",
                    "memory_gib": "0.01", "fits_h200": "true", "commit": "0" * 40, "dirty": "no",
                    "code_digest": "x"})
    path.write_text(prereg.to_csv(out))
    return path


def test_score_gives_the_exact_error_against_tiny_recordings(prereg, tiny_recordings, tmp_path):
    from lumos.predict.prediction import measured_steps

    traces, summary = tiny_recordings
    assert [r["config"] for r in summary["runs"]] == ["ffn_0.5x", "mbcount_3"]
    assert all((traces / "traces" / n / "rank0.json.gz").is_file() for n in ("ffn_0.5x", "mbcount_3"))
    pred = fake_predictions(prereg, tmp_path / "p.csv", [("ffn_0.5x", "base_r0", 5.0), ("mbcount_3", "base_r1", 9.0),
                                                         ("width_2.5x", "base_r0", 7.0)])
    rows, head = prereg.score_rows(traces, pred)
    assert head["committed_in"] == "unverified: not in a git checkout"
    expected = {}
    for name, ms in (("ffn_0.5x", 5.0), ("mbcount_3", 9.0)):
        steps = measured_steps(traces / "traces" / name)
        assert len(steps) == 3
        its = [s["iteration_us"] / 1e3 for s in steps]
        mean = sum(its) / 3
        other = sum(s["other_us"] for s in steps) / 3e3
        row = next(r for r in rows if r["config"] == name)
        expected[name] = 100.0 * (ms - mean) / mean
        assert row["error_pct"] == pytest.approx(expected[name], rel=1e-12)
        assert row["measured"]["spread_pct"] == pytest.approx(100.0 * (max(its) - min(its)) / mean, rel=1e-12)
        assert row["measured"]["other"] == pytest.approx(other, rel=1e-12)
    assert next(r for r in rows if r["config"] == "width_2.5x")["measured"] is None
    text = prereg.score(traces, pred, tmp_path / "scores.md")
    assert (tmp_path / "scores.md").read_text() == text
    assert "| ffn_0.5x | base_r0 | 5.000 | " in text and f"| {expected['ffn_0.5x']:+.2f} |" in text
    assert "| width_2.5x | base_r0 | 7.000 | not recorded |" in text
    assert f"From base_r0: mean |error| {abs(expected['ffn_0.5x']):.2f}% over 1 configurations" in text
    assert f"worst mbcount_3 {expected['mbcount_3']:+.2f}%" in text


def test_score_refuses_recordings_of_other_sizes(prereg, tiny_recordings, tmp_path, capsys):
    traces, _ = tiny_recordings
    pred = fake_predictions(prereg, tmp_path / "p.csv", [("ffn_0.5x", "base_r0", 5.0)])
    text = pred.read_text().replace("--ffn 128", "--ffn 256")   # both commands, so they agree with each other
    pred.write_text(text)
    assert prereg.main(["score", "--traces", str(traces), "--predictions", str(pred), "--out", ""]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "was recorded with" in err and "'ffn': 128" in err


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_predictions_file_changed_after_its_commit_is_refused(prereg, tmp_path):
    def git(*args):
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path,
                              check=True, capture_output=True, text=True).stdout.strip()

    git("init", "-q")
    (tmp_path / "lumos").mkdir()
    (tmp_path / "lumos" / "model.py").write_text("speed = 1\n")
    git("add", "."), git("commit", "-qm", "code")
    code = git("rev-parse", "HEAD")
    pred = fake_predictions(prereg, tmp_path / "p.csv", [("ffn_0.5x", "base_r0", 5.0)])
    pred.write_text(pred.read_text().replace("0" * 40, code))
    with pytest.raises(prereg.PreregError, match="uncommitted"):
        prereg.committed_check(pred, code)
    git("add", "."), git("commit", "-qm", "predictions")
    registered = git("rev-parse", "HEAD")
    assert prereg.committed_check(pred, code) == registered
    assert prereg.code_digest(registered, cwd=tmp_path) == prereg.code_digest(cwd=tmp_path)
    rows = list(csv.DictReader(pred.open()))
    rows[0]["iteration_ms"] = "4.000"
    pred.write_text(prereg.to_csv(rows))
    with pytest.raises(prereg.PreregError, match="uncommitted"):
        prereg.committed_check(pred, code)
    git("commit", "-qam", "better numbers")
    with pytest.raises(prereg.PreregError, match=f"modified after it was committed in {registered[:12]}"):
        prereg.committed_check(pred, code)
