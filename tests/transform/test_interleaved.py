"""Interleaved 1F1B in the predictor: the schedule's actions, its invariants, the layers of each chunk,
memory, and predictions between 1F1B and interleaved runs against the emulator (EMULATED)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from lumos.cli import main as lumos_main
from lumos.emulator import emulate, write_result
from lumos.predict.memory import inflight_microbatches
from lumos.predict.prediction import predict
from lumos.trace.run import read_manifest
from lumos.errors import UserError
from lumos.predict.whatif import base_plan, transform
from lumos.trace import load_run
from lumos.transform.schedule import (ScheduleError, check_interleaved, chunk_ranges, interleaved, one_f_one_b,
                                      pipeline_schedule, stage_chunks)

QUIET = ["emulator.comm.jitter_sigma=0", "emulator.compute.jitter_sigma=0", "emulator.rank.slowness_sigma=0",
         "emulator.rank.straggler_prob=0", "emulator.peers.noise_sigma=0"]


def _compute(acts):
    return [a for a in acts if a[0] != "p2p"]


def test_three_stages_two_chunks_six_micro_batches():
    """Megatron's table for PP 3, V 2, m 6: micro-batches in groups of 3, each group through chunk 0 then
    chunk 1; stage 0 warms up with 2 (3 - 0 - 1) + (2 - 1) 3 = 7 forwards; backward k runs forward k's
    micro-batch through the chunks in reverse."""
    fwd = [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1), (3, 0), (4, 0), (5, 0), (3, 1), (4, 1), (5, 1)]
    bwd = [(mb, 1 - c) for mb, c in fwd]
    want = [("F", *f) for f in fwd[:7]]
    for j in range(5):
        want += [("F", *fwd[7 + j]), ("B", *bwd[j])]
    want += [("B", *b) for b in bwd[5:]]
    assert _compute(interleaved(0, 3, 2, 6)) == want
    # the last stage warms up with (2 - 1) 3 = 3 forwards and opens with a receive from stage 1
    last = interleaved(2, 3, 2, 6)
    assert last[0] == ("p2p", (("recv", "fwd"),))
    assert [a[0] for a in _compute(last)][:5] == ["F", "F", "F", "F", "B"]
    # its chunk 1 is the model's last: nothing is sent forward after it; stage 0's chunk 0 sends no gradient
    # back, and its chunk 1 sends its gradient round the ring to stage 2

    def sent_after(acts, step):
        i = acts.index(step)
        nxt = next(a for a in acts[i + 1:] if a[0] == "p2p")
        return {k for k in nxt[1] if k[0] == "send"}
    assert all(("send", "fwd") not in sent_after(last, ("F", mb, 1)) for mb in range(6))
    assert all(("send", "fwd") in sent_after(last, ("F", mb, 0)) for mb in range(6))
    first = interleaved(0, 3, 2, 6)
    assert all(("send", "bwd") not in sent_after(first, ("B", mb, 0)) for mb in range(5))
    assert all(("send", "bwd") in sent_after(first, ("B", mb, 1)) for mb in range(6))


def test_one_chunk_is_1f1b():
    for s in range(4):
        assert pipeline_schedule(s, 4, 8) == pipeline_schedule(s, 4, 8, 1) == one_f_one_b(s, 4, 8)
    assert pipeline_schedule(0, 4, 8, 2) == interleaved(0, 4, 2, 8)


@settings(max_examples=60, deadline=None)
@given(pp=hs.integers(3, 6), chunks=hs.integers(1, 4), groups=hs.integers(1, 3))
def test_every_exchange_pairs_and_the_ring_drains(pp, chunks, groups):
    """Invariants of any interleaved layout: every stage runs each (micro-batch, chunk) forward and backward
    once; on every link and direction as many sends as receives; and the steps, run in each stage's order
    with a forward waiting for its virtual predecessor's and a backward for its successor's, all complete
    (the order has no step waiting on one that comes later on another stage)."""
    m = pp * groups
    acts = {s: interleaved(s, pp, chunks, m) for s in range(pp)}
    links = Counter()
    for s, a in acts.items():
        steps = _compute(a)
        assert Counter(steps) == Counter([(p, mb, c) for p in "FB" for mb in range(m) for c in range(chunks)])
        for act in a:
            if act[0] != "p2p":
                continue
            for kind, d in act[1]:
                to_next = (kind, d) in (("send", "fwd"), ("recv", "bwd"))
                link = s if to_next else (s - 1) % pp
                links[(d, link)] += 1 if kind == "send" else -1
    assert all(v == 0 for v in links.values())
    virtual = pp * chunks
    done, pos = set(), {s: 0 for s in range(pp)}
    steps = {s: _compute(a) for s, a in acts.items()}
    moved = True
    while moved:
        moved = False
        for s in range(pp):
            while pos[s] < len(steps[s]):
                p, mb, c = steps[s][pos[s]]
                v = c * pp + s
                need = (("F", mb, v - 1) if v else None) if p == "F" else \
                    (("B", mb, v + 1) if v < virtual - 1 else ("F", mb, v))
                if need is not None and need not in done:
                    break
                done.add((p, mb, v))
                pos[s] += 1
                moved = True
    assert all(pos[s] == len(steps[s]) for s in range(pp))


def test_chunks_hold_virtual_stages():
    assert stage_chunks(0, [4, 4, 4, 4], 2) == [range(0, 2), range(8, 10)]
    assert stage_chunks(3, [4, 4, 4, 4], 2) == [range(6, 8), range(14, 16)]
    with pytest.raises(ScheduleError, match="must divide every stage's layers; stage 0 holds 3"):
        check_interleaved(4, 2, 8, [3, 3, 3, 3])
    with pytest.raises(ScheduleError, match="6 micro-batches per iteration is not a multiple of 4"):
        check_interleaved(4, 2, 6, [2, 2, 2, 2])
    with pytest.raises(ScheduleError, match="more than 2 stages"):
        check_interleaved(2, 2, 4, [2, 2])


def test_interleaved_memory_is_korthikantis():
    """Stage 0 of PP 4 holds 1F1B's 4 micro-batches; interleaved with V 2, 2 x 3 + 4 + 1 = 11 chunk-steps of
    half a stage, 5.5 micro-batches: (1 + (p - 1) / (p V)) = 1.375 times as many."""
    assert inflight_microbatches(0, 4, 8) == 4
    assert inflight_microbatches(0, 4, 8, 2) == 5.5 == 4 * (1 + 3 / 8)
    assert inflight_microbatches(3, 4, 8, 2) == 2.5
    assert inflight_microbatches(0, 4, 2, 2) == 2.0     # no more than the micro-batches there are


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """tiny at 8 layers over 4 stages, 8 micro-batches: 1F1B, and 2 and 4 chunks per stage."""
    root = tmp_path_factory.mktemp("interleaved")
    out = {}
    for vp in (1, 2):
        d = root / f"vp{vp}"
        write_result(emulate(["model=tiny", "model.num_layers=8", "parallel.tp=1", "parallel.pp=4", "parallel.dp=1",
                              "model.microbatch_rule=fixed", "model.num_microbatches=8", f"parallel.vp={vp}", *QUIET],
                             progress=False), d)
        out[vp] = d
    return out


def test_an_interleaved_base_is_read_as_one(runs):
    plan = base_plan(load_run(runs[2]))
    assert (plan.pp, plan.chunks, plan.stage_layers, plan.layers) == (4, 2, (2, 2, 2, 2), 8)
    assert base_plan(load_run(runs[1])).chunks == 1


@pytest.mark.parametrize("base,target", [(1, 2), (2, 1)])
def test_the_schedule_as_a_what_if(runs, base, target):
    doc = predict(load_run(runs[base]), {"vp": target}, actual_tables=load_run(runs[target]),
                  actual_manifest=read_manifest(runs[target]))
    assert (doc["target"]["vp"], doc["base_config"]["vp"]) == (target, base)
    assert abs(doc["error_pct"]) < 4.0
    assert any(n.startswith("pipeline schedule: ") for n in doc["notes"])


def test_the_unchanged_interleaved_base_replays_as_measured(runs):
    doc = predict(load_run(runs[2]), {}, actual_tables=load_run(runs[2]), actual_manifest=read_manifest(runs[2]))
    assert doc["predicted"]["iteration_us"] == doc["measured"]["iteration_us"]


def test_the_cli_refuses_chunks_that_do_not_divide(runs, capsys):
    assert lumos_main(["predict", str(runs[2]), "--vp", "3"]) == 2
    err = capsys.readouterr().err
    assert "--vp 3" in err and "must divide every stage's layers; stage 0 holds 2" in err


def test_llama3s_layout_is_read_and_kept(tmp_path):
    """Llama 3 405B's layout in small: 6 layers with the embedding and the loss counted in the split, 8 slots
    over 4 stages of 2 chunks of one; stage 0's first chunk holds only the embedding, stage 3's last only the
    output and loss. The base is read with those empty chunks, a DP change keeps them, and the prediction
    meets the emulated actual (EMULATED)."""
    runs = {}
    for dp in (1, 2):
        d = tmp_path / f"dp{dp}"
        write_result(emulate(["model=tiny", "model.num_layers=6", "parallel.tp=1", "parallel.pp=4", f"parallel.dp={dp}",
                              "parallel.vp=2", "parallel.embedding_in_split=true", "parallel.loss_in_split=true",
                              "model.microbatch_rule=fixed", "model.num_microbatches=8", *QUIET], progress=False), d)
        runs[dp] = d
    plan = base_plan(load_run(runs[1]))
    assert (plan.chunks, plan.stage_layers, plan.chunk_layers) == (2, (1, 2, 2, 1), ((0, 1), (1, 1), (1, 1), (1, 0)))
    assert [list(map(list, chunk_ranges(s, plan.chunk_layers))) for s in range(4)] == [
        [[], [3]], [[0], [4]], [[1], [5]], [[2], []]]
    doc = predict(load_run(runs[1]), {"dp": 2}, actual_tables=load_run(runs[2]), actual_manifest=read_manifest(runs[2]))
    assert abs(doc["error_pct"]) < 4.0
    # a schedule change keeps the base's rule, embedding and loss in the split: 8 slots do not make 4 x 4 chunks
    with pytest.raises(UserError, match="--vp 4 at pp 4, 6 layers, 8 micro-batches: the base's embedding and loss "
                                        r"each take a layer's place .* 6 layers \+ 2 do not split evenly over 4 stages x 4"):
        transform(plan, vp=4)


def _llama3_layout_runs(tmp_path, layers: int) -> dict:
    """V -> run dir of Llama 3 8B at `layers` layers, sequence 1,024, PP 4, embedding and loss in the split, at
    V 2 and at V 1 (1F1B), every random draw off (EMULATED)."""
    common = ["model=llama3_8b", f"model.num_layers={layers}", "model.seq_length=1024", "parallel.tp=1",
              "parallel.pp=4", "parallel.dp=1", "parallel.embedding_in_split=true", "parallel.loss_in_split=true",
              "model.microbatch_rule=fixed", "model.num_microbatches=8", *QUIET]
    runs = {}
    for vp in (2, 1):
        runs[vp] = tmp_path / f"vp{vp}"
        write_result(emulate([*common, f"parallel.vp={vp}"], progress=False), runs[vp])
    return runs


def test_llama3s_layout_kept_by_a_schedule_change(tmp_path):
    """From a Llama 3 layout (14 layers of Llama 3 8B at sequence 1,024, embedding and loss in the split, PP 4 x
    V 2: chunks 1/2 | 2/2 | 2/2 | 2/1) to 1F1B: Megatron lays 16 slots over 4 stages as 3 / 4 / 4 / 3 layers; the
    emulated run with the same switches is the actual (EMULATED). Cut evenly, 14 layers would be 4 / 4 / 3 / 3."""
    runs = _llama3_layout_runs(tmp_path, 14)
    doc = predict(load_run(runs[2]), {"vp": 1}, actual_tables=load_run(runs[1]), actual_manifest=read_manifest(runs[1]))
    assert doc["target"]["stage_layers"] == [3, 4, 4, 3]
    assert any("embedding and loss each in a layer's place" in n and "layers per chunk 3 | 4 | 4 | 3" in n
               for n in doc["notes"])
    assert abs(doc["error_pct"]) < 2.0, doc["error_pct"]
    # the base's own replay, not the target's: a schedule change is a change (it was read as none)
    from lumos.predict.base_measured import measured_base
    from lumos.predict.options import PredictOptions

    base = load_run(runs[2])
    m = measured_base(base, base_plan(base), PredictOptions(), doc)
    assert m["replayed_unchanged_us"] == pytest.approx(m["iteration_us"], rel=1e-6)
    assert abs(m["replayed_unchanged_us"] / doc["predicted"]["iteration_us"] - 1) > 0.1


def test_uneven_end_stages_as_a_what_if(tmp_path):
    """Megatron's num_layers_in_first/last_pipeline_stage from an even base: tiny at 6 layers over 3 stages,
    2/2/2 -> 1/4/1, against the emulator run with parallel.first/last_stage_layers (EMULATED)."""
    runs = {}
    for name, extra in (("even", []), ("uneven", ["parallel.first_stage_layers=1", "parallel.last_stage_layers=1"])):
        d = tmp_path / name
        write_result(emulate(["model=tiny", "model.num_layers=6", "parallel.tp=1", "parallel.pp=3", "parallel.dp=1",
                              "model.microbatch_rule=fixed", "model.num_microbatches=6", *extra, *QUIET],
                             progress=False), d)
        runs[name] = d
    doc = predict(load_run(runs["even"]), {"first_stage_layers": 1, "last_stage_layers": 1},
                  actual_tables=load_run(runs["uneven"]), actual_manifest=read_manifest(runs["uneven"]))
    assert doc["target"]["stage_layers"] == [1, 4, 1] and doc["base_config"]["layers"] == 6
    assert abs(doc["error_pct"]) < 4.0
    assert "layers per stage 1/4/1 (--first-stage-layers / --last-stage-layers)" in doc["notes"]
    # read back from the uneven run, its split is kept by a change that keeps PP and the layers
    assert base_plan(load_run(runs["uneven"])).stage_layers == (1, 4, 1)
    with pytest.raises(UserError, match="6 layers do not split over 3 stages with 6 on the first and 1 on the last"):
        transform(base_plan(load_run(runs["even"])), first_stage_layers=6, last_stage_layers=1)


def test_structure_says_the_schedule(runs, capsys):
    assert lumos_main(["replay", str(runs[2]), "--structure"]) == 0
    out = capsys.readouterr().out
    assert "  pipeline: interleaved 1F1B, 2 model chunks per stage; layers per stage 2/2/2/2" in out
    assert lumos_main(["replay", str(runs[1]), "--structure"]) == 0
    assert "pipeline:" not in capsys.readouterr().out      # even 1F1B: nothing more to say


def test_chunks_of_one_layer_to_1f1b(tmp_path):
    """Llama 3 405B's chunks hold one layer each: a step of its base runs one layer block, so the base has no
    sample of the host time between two layers of a step, and a 1F1B target runs two per step. Entering the
    second on its template's own lead (the whole step's host time) predicted +35% (6 layers of Llama 3 8B at
    sequence 1,024, PP 4 x V 2, embedding and loss in the split); the host time between two ops inside the
    layers stands in for it (`Templates.interior_lag`) (EMULATED)."""
    runs = _llama3_layout_runs(tmp_path, 6)
    plan = base_plan(load_run(runs[2]))
    assert plan.chunk_layers == ((0, 1), (1, 1), (1, 1), (1, 0))
    doc = predict(load_run(runs[2]), {"vp": 1}, plan=plan, actual_tables=load_run(runs[1]),
                  actual_manifest=read_manifest(runs[1]))
    assert doc["target"]["stage_layers"] == [1, 2, 2, 1]
    assert abs(doc["error_pct"]) < 2.0, doc["error_pct"]
