"""Context parallelism's ring form in the predictor: a ring base read as one, its degree changed (`--cp`) by re-stepping
each layer's ring (lumos/transform/cp_ring.py), against the emulator (EMULATED)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from lumos.cli import main as lumos_main
from lumos.emulator import emulate, write_result
from lumos.graph.model import EdgeClass, TaskKind
from lumos.predict.prediction import predict
from lumos.trace.run import read_manifest
from lumos.predict.whatif import base_plan, transform
from lumos.trace import load_run

QUIET = ["emulator.comm.jitter_sigma=0", "emulator.compute.jitter_sigma=0", "emulator.rank.slowness_sigma=0",
         "emulator.rank.straggler_prob=0", "emulator.peers.noise_sigma=0"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Llama 3 8B cut to 4 layers, TP 2 x PP 2 x DP 1, the ring form at CP 2 and 4, and CP 1 (sequence 8,192)."""
    root = tmp_path_factory.mktemp("ring")
    out = {}
    for cp in (1, 2, 4):
        d = root / f"cp{cp}"
        write_result(emulate(["model=llama3_8b", "model.num_layers=4", "parallel.tp=2", "parallel.pp=2",
                              "parallel.dp=1", f"parallel.cp={cp}", "training.cp_form=ring", *QUIET], progress=False), d)
        out[cp] = d
    return out


def _ring_tasks(plan):
    """(kind, bytes, how far apart the pair of ranks it runs between is) of every CP exchange, counted (a transform
    in place keeps the base's rank numbers)."""
    st = plan.st
    return Counter((str(st.coll[t]), float(st.nbytes[t]), st.group[t][1] - st.group[t][0])
                   for t in np.flatnonzero(plan.role == "cp") if plan.graph.dur[t] > 0)


def test_a_ring_base_is_read_as_one(runs):
    plan = base_plan(load_run(runs[2]))
    assert (plan.cp, plan.cp_form, plan.dp, plan.shape.seq) == (2, "ring", 2, 4096)
    roles = Counter((str(plan.st.coll[t]), plan.role[t]) for t in np.flatnonzero(plan.st.coll != None))  # noqa: E711
    # the ring's sends and receives are the CP group's; the pipeline's stay the pipeline's
    assert {k for k in roles if k[0] in ("send", "recv")} == {("send", "cp"), ("recv", "cp"), ("send", "pp"),
                                                               ("recv", "pp")}
    # 2 layers per stage x 4 micro-batches, forward 1 exchange and backward 2 per layer: sends and receives alike
    assert roles[("send", "cp")] == roles[("recv", "cp")] == 2 * 4 * 3 * 2
    # each timed on the pair it runs between (the trace names the CP group): stage 0's rank 0 and its neighbour 2
    assert {plan.st.group[t] for t in np.flatnonzero((plan.role == "cp") & (plan.graph.rank == 0))} == {(0, 2)}
    four = base_plan(load_run(runs[4]))
    st = four.st
    pairs = {(str(st.coll[t]), st.blocks[st.task_block[t]].phase, st.group[t])
             for t in np.flatnonzero((four.role == "cp") & (four.graph.rank == 0))}
    # forward: send to the next rank (2), receive from the previous (6); backward the other way
    assert pairs == {("send", "forward", (0, 2)), ("recv", "forward", (0, 6)), ("send", "backward", (0, 6)),
                     ("recv", "backward", (0, 2))}

def test_the_ring_is_re_stepped_as_the_emulator_runs_it(runs):
    """CP 2 -> 4: every layer's ring gets two more steps; the exchanges' kinds, bytes and group sizes are then
    those of the emulated CP 4 run, exchange for exchange."""
    for base, target in ((2, 4), (4, 2)):
        out = transform(base_plan(load_run(runs[base])), cp=target)
        assert _ring_tasks(out) == _ring_tasks(base_plan(load_run(runs[target])))
    out = transform(base_plan(load_run(runs[2])), cp=4)
    g, st = out.graph, out.st
    flash = [t for t in np.flatnonzero(g.kind == int(TaskKind.GPU)) if "flash_attention" in str(st.op_name[t])]
    assert len(flash) == 2 * 4 * 2 * 4 * 2           # 2 stages x 2 layers x 4 micro-batches x 2 directions x 4 steps
    # a step's flash kernel waits for the exchange of the step before (its send and its receive)
    cross = (g.cls == int(EdgeClass.INTER_STREAM))
    fwd = next(b for b in st.blocks if b.kind == "layer" and b.phase == "forward")
    steps = sorted((t for t in fwd.tasks if t in set(flash)), key=lambda t: g.stream_pos[t])
    for t in steps[1:]:
        into = {str(st.coll[s]) for s in g.src[cross & (g.dst == t)]}
        assert into == {"send", "recv"}
    assert not np.any(cross & (g.dst == steps[0]))


@pytest.mark.parametrize("base,target", [(2, 4), (4, 2), (4, 1)])
def test_the_cp_degree_as_a_what_if(runs, base, target):
    doc = predict(load_run(runs[base]), {"cp": target}, actual_tables=load_run(runs[target]),
                  actual_manifest=read_manifest(runs[target]))
    assert (doc["target"]["cp"], doc["base_config"]["cp"]) == (target, base)
    assert abs(doc["error_pct"]) < 3.0, doc["error_pct"]
    assert any(n.startswith(f"context parallelism (ring) {base} -> {target}") for n in doc["notes"])


def test_at_cp_1_one_flash_kernel_is_left(runs):
    out = transform(base_plan(load_run(runs[4])), cp=1)
    g, st = out.graph, out.st
    live = [t for t in np.flatnonzero((g.kind == int(TaskKind.GPU)) & (g.dur > 0))
            if "flash_attention" in str(st.op_name[t])]
    assert len(live) == 2 * 2 * 4 * 2                   # one per layer, micro-batch and direction
    assert not _ring_tasks(out)
    # its queries and keys are the whole sequence
    assert {st.op_dims[t][0][1] for t in live} == {8192}


@pytest.mark.parametrize("base,target", [(2, 4), (4, 2)])
def test_the_gradient_buckets_keep_the_whole_sequences_position_rows(runs, base, target):
    """A CP rank holds every position's row of the embedding (Megatron-Core's `LanguageModelEmbedding`:
    `max_sequence_length` x hidden, not split by CP), so a CP change moves no gradient: the re-issued buckets of
    stage 0 are the emulated target's, 12 of 80 MB and the rest 68.7 MB. Counting only the rank's part of the
    sequence (8,192 / CP position rows) had left the last bucket at 18.4 MB from CP 2 to 4."""
    out, act = transform(base_plan(load_run(runs[base])), cp=target), base_plan(load_run(runs[target]))

    def buckets(plan):
        mine = np.flatnonzero((plan.role == "dp") & (plan.graph.rank[:len(plan.role)] == min(plan.ranks)))
        return sorted(float(plan.st.nbytes[t]) for t in mine)
    assert buckets(out) == buckets(act) == [68_685_824.0] + [80_000_000.0] * 12
    assert out.shape.embed_params() == act.shape.embed_params() == 128_256 * 4096 / 2 + 8192 * 4096
    assert (out.shape.seq, out.shape.cp) == (8192 // target, target)


def test_the_other_form_is_refused(runs, capsys):
    assert lumos_main(["predict", str(runs[2]), "--cp", "4", "--cp-form", "allgather"]) == 2
    assert "the base ran the ring form" in capsys.readouterr().err
    assert lumos_main(["predict", str(runs[1]), "--cp", "2", "--cp-form", "ring"]) == 2
    assert "the base ran no context parallelism" in capsys.readouterr().err


def test_a_recomputed_backward_holds_two_rings(tmp_path):
    """training.recompute=full: each backward block re-runs the forward ring before its own; both are re-stepped."""
    runs = {}
    for cp in (2, 4):
        runs[cp] = tmp_path / f"cp{cp}"
        write_result(emulate(["model=llama3_8b", "model.num_layers=4", "parallel.tp=2", "parallel.pp=2",
                              "parallel.dp=1", f"parallel.cp={cp}", "training.cp_form=ring", "training.recompute=full",
                              *QUIET], progress=False), runs[cp])
    out = transform(base_plan(load_run(runs[2])), cp=4)
    g, st = out.graph, out.st
    bwd = next(b for b in st.blocks if b.kind == "layer" and b.phase == "backward")
    ops = Counter(str(st.op_name[t]) for t in bwd.tasks if g.kind[t] == int(TaskKind.GPU))
    assert ops["aten::_flash_attention_forward"] == ops["aten::_flash_attention_backward"] == 4
    assert _ring_tasks(out) == _ring_tasks(base_plan(load_run(runs[4])))
    doc = predict(load_run(runs[2]), {"cp": 4}, actual_tables=load_run(runs[4]), actual_manifest=read_manifest(runs[4]))
    assert abs(doc["error_pct"]) < 3.0, doc["error_pct"]
