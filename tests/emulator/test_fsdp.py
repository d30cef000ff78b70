"""The emulator's FSDP2 mode (`training.dp_sharding=fsdp`, EMULATED): per unit an all-gather before its
forward and its backward on the all-gather stream, overlapping the neighbour's compute; reduce-scatters
after the last micro-batch's backward; each rank's optimizer over its shard. The predictor's recogniser
must read it as the real FSDP2 captures (tests/model/test_dp_flavour.py)."""

from __future__ import annotations

import numpy as np
import pytest

from lumos.emulator import emulate, write_result
from lumos.emulator.engine import AG_STREAM
from lumos.emulator.settings import SettingsError
from lumos.trace import load_run, schema
from lumos.model.dp_flavour import find_dp_flavour

SETUP = ["model=tiny", "parallel.tp=1", "parallel.pp=2", "parallel.dp=2", "seed=0"]
LAYER = 3152384          # the tiny model's parameters per layer (hidden 512, FFN 2048)
ROOT = 4456448           # its embedding: vocabulary x hidden + sequence x hidden


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = {}
    for name, extra in (("fsdp", ["training.dp_sharding=fsdp"]), ("buckets", []),
                        ("grad_op", ["training.dp_sharding=fsdp_grad_op"])):
        d = tmp_path_factory.mktemp(name)
        write_result(emulate(SETUP + extra, progress=False), d)
        out[name] = {t.rank: t for t in load_run(d)}
    return out


def _kernels(t, stream):
    k = np.flatnonzero((t.cat == schema.KERNEL) & (t.stream == stream))
    return k[np.argsort(t.ts[k])]


def test_every_unit_is_gathered_for_its_forward_and_backward_and_reduce_scattered_once(runs):
    t = runs["fsdp"][0]
    f = find_dp_flavour(t)
    assert f.kind == "fsdp_full"
    assert f.unit_layers == {"root": "embedding", "layers.0": "layer_0", "layers.1": "layer_1"}
    assert f.unit_elements == {"root": ROOT, "layers.0": LAYER, "layers.1": LAYER}
    fwd = [("all_gather", u, "forward", False) for u in ("embedding", "layer_0", "layer_1")]
    bwd = [("all_gather", "embedding", "backward", False), ("all_gather", "layer_1", "backward", True),
           ("all_gather", "layer_0", "backward", True)]
    rs = [("reduce_scatter", u, "backward", False) for u in ("layer_1", "layer_0", "embedding")]
    # 1F1B on stage 0 of 2 with 2 micro-batches: forward 0, forward 1, backward 0, backward 1
    got = [(c.kind, f.unit_layers[c.unit], c.phase, c.prefetch) for c in f.collectives if c.kind != "all_reduce"]
    assert got == fwd + fwd + bwd + bwd + rs
    assert {c.group for c in f.collectives if c.kind != "all_reduce"} == {2}
    # the last stage's root is its head
    assert find_dp_flavour(runs["fsdp"][2]).unit_layers["root"] == "head"


def test_all_gathers_run_on_their_own_stream_ahead_of_the_compute_that_waits_for_them(runs):
    t = runs["fsdp"][0]
    ag = _kernels(t, AG_STREAM)
    assert len(ag) == 12 and all("AllGather" in str(t.name[k]) for k in ag)
    waits = np.flatnonzero(t.sync_kind != None)  # noqa: E711
    # the all-gather stream never waits for the compute stream (no kernel writes the parameters) ...
    assert not np.any(t.stream[waits] == AG_STREAM)
    # ... and the compute stream waits for each all-gather: one stream wait per gather
    assert int(np.sum((t.stream[waits] == 7) & (t.wait_stream[waits] == AG_STREAM))) == 12
    # a backward prefetch (layer_0's gather, issued as layer_1's backward starts) runs beside layer_1's
    # backward kernels: the overlap FSDP prefetches for
    comp = _kernels(t, 7)
    names = t.name.astype(str)
    l1 = np.flatnonzero(names == "layer_1/backward/mb0")[0]
    # issue order (previous test): forward mb0 and mb1 (3 gathers each), then backward mb0: the
    # root, layer_1 (prefetched by the root), layer_0 (prefetched by layer_1): the ninth gather
    prefetched = ag[8]
    assert [str(names[r]) for r in np.flatnonzero(np.char.startswith(names, "FSDP::backward_prefetch for"))][:2] \
        == ["FSDP::backward_prefetch for layers.1", "FSDP::backward_prefetch for layers.0"]
    busy = comp[(t.ts[comp] < t.end[prefetched]) & (t.end[comp] > t.ts[prefetched])]
    assert len(busy) >= 1 and t.ts[l1] < t.ts[prefetched]


def test_reduce_scatters_only_in_the_last_micro_batch_and_the_optimizer_updates_a_shard(runs):
    t, plain = runs["fsdp"][0], runs["buckets"][0]
    rs = [k for k in _kernels(t, 24) if "ReduceScatter" in str(t.name[k])]
    assert len(rs) == 3
    assert "AllReduce" not in {str(t.name[k]).split("_")[1] for k in rs}
    adam = lambda tab: tab.input_dims[np.flatnonzero(tab.name.astype(str) == "Optimizer.step#FusedAdam.step")[0]]  # noqa: E731
    assert adam(t)[0][0] * 2 == adam(plain)[0][0]
    # the bucketed run has no FSDP range, no all-gather stream and all-reduces its gradients
    assert not any(str(n).startswith("FSDP::") for n in plain.name) and not len(_kernels(plain, AG_STREAM))
    assert find_dp_flavour(plain).kind == "allreduce"


def test_shard_grad_op_gathers_each_unit_for_its_forward_only_and_keeps_the_backward_hooks(runs):
    # reshard_after_forward=False: the unit stays gathered, so its backward unshard and the prefetch of it
    # issue nothing; the hooks' ranges are recorded as FSDP2 records them
    full, op = runs["fsdp"][0], runs["grad_op"][0]
    f = find_dp_flavour(op)
    assert f.kind == "fsdp_grad_op" and f.unit_elements == {"root": ROOT, "layers.0": LAYER, "layers.1": LAYER}
    got = [(c.kind, f.unit_layers[c.unit], c.phase) for c in f.collectives if c.kind != "all_reduce"]
    fwd = [("all_gather", u, "forward") for u in ("embedding", "layer_0", "layer_1")]
    rs = [("reduce_scatter", u, "backward") for u in ("layer_1", "layer_0", "embedding")]
    assert got == fwd + fwd + rs
    assert len(_kernels(op, AG_STREAM)) == 6 and len(_kernels(full, AG_STREAM)) == 12
    ranges = lambda t, prefix: [str(n) for n in t.name if str(n).startswith(prefix)]  # noqa: E731
    for prefix in ("FSDP::pre_backward", "FSDP::backward_prefetch for", "FSDP::post_backward_reduce"):
        assert ranges(op, prefix) == ranges(full, prefix) != []
    # the compute stream waits for the forward's gathers only
    waits = np.flatnonzero(op.sync_kind != None)  # noqa: E711
    assert int(np.sum((op.stream[waits] == 7) & (op.wait_stream[waits] == AG_STREAM))) == 6


def test_one_replica_writes_the_ranges_but_no_collective(tmp_path):
    write_result(emulate(["model=tiny", "parallel.tp=1", "parallel.pp=1", "parallel.dp=1",
                          "training.dp_sharding=fsdp", "seed=0"], progress=False), tmp_path)
    (t,) = load_run(tmp_path)
    f = find_dp_flavour(t)
    assert f.kind == "fsdp" and [c for c in f.collectives if c.kind != "all_reduce"] == []
    assert not len(_kernels(t, AG_STREAM))


def test_fsdp_takes_no_after_backward_all_reduce_and_no_unknown_mode():
    with pytest.raises(SettingsError, match="training.dp_sharding must be one of none, fsdp, fsdp_grad_op, zero1, fsdp_default, got 'zero9'"):
        emulate(["model=tiny", "training.dp_sharding=zero9"], progress=False)
    with pytest.raises(SettingsError, match="takes no dp_allreduce=after_backward"):
        emulate(["model=tiny", "training.dp_sharding=fsdp", "training.dp_allreduce=after_backward"], progress=False)
