"""`training=torchtitan` (EMULATED): FSDP2 with torchtitan's reshard policy, TP inside the host, full activation
checkpointing; and a DP change predicted from such a base against the emulator."""

from __future__ import annotations

from lumos.emulator import emulate, write_result
from lumos.predict.prediction import predict, read_manifest
from lumos.trace import load_run

QUIET = ["emulator.comm.jitter_sigma=0", "emulator.compute.jitter_sigma=0", "emulator.rank.slowness_sigma=0",
         "emulator.rank.straggler_prob=0", "emulator.peers.noise_sigma=0"]
BASE = ["model=llama3_8b", "model.num_layers=4", "training=torchtitan", "parallel.tp=2", "emulator.granularity=fine",
        "model.microbatch_rule=fixed", "model.num_microbatches=2", *QUIET]


def _names(result, rank=None):
    rec = result.recorders[result.ranks[0] if rank is None else rank]
    return [n for _, _, cat, n, _, _ in rec.cpu]


def test_the_reshard_policy_follows_pipeline_parallelism():
    """torchtitan's "default" reshard_after_forward: FULL_SHARD without PP (the backward gathers again),
    SHARD_GRAD_OP with it (no gather in the backward); every block's forward recomputed in its backward."""
    flat = emulate([*BASE, "parallel.pp=1", "parallel.dp=4"], progress=False)
    piped = emulate([*BASE, "parallel.pp=2", "parallel.dp=2"], progress=False)
    assert (flat.settings.training.dp_sharding, piped.settings.training.dp_sharding) == ("fsdp", "fsdp_grad_op")
    gathers = {k: sum(n.startswith("FSDP::all_gather") for n in _names(r)) for k, r in (("flat", flat), ("piped", piped))}
    # flat: 4 blocks + the root, gathered before each of 2 forwards and again for each backward: 2 x (5 + 5);
    # stage 0 of the pipeline: 2 blocks + the root, before each forward only: 2 x 3
    assert gathers == {"flat": 20, "piped": 6}
    assert sum("/recompute/" in n for n in _names(flat)) == 4 * 2


def test_a_dp_change_of_a_torchtitan_base(tmp_path):
    runs = {}
    for dp in (2, 4):
        d = tmp_path / f"dp{dp}"
        write_result(emulate([*BASE, "parallel.pp=1", f"parallel.dp={dp}"], progress=False), d)
        runs[dp] = d
    doc = predict(load_run(runs[2]), {"dp": 4}, actual_tables=load_run(runs[4]), actual_manifest=read_manifest(runs[4]))
    assert doc["base_config"]["dp_sharding"] != "none" and abs(doc["error_pct"]) < 5.0, doc["error_pct"]
