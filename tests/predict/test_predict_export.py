"""`lumos predict ... --export DIR`: the predicted graph as Chakra traces, replayed back to the prediction.

On the EMULATED tiny 2x2x2 base (one trace per stage, tests/conftest.py). The prediction replays one
graph of the ranks it simulates (one per stage) joined by rendezvous tasks; the export writes each
rank's tasks to its own file and the rendezvous into the first file's metadata
(`lumos.graph.chakra_joint`), so `lumos replay DIR` replays the same graph: the same iteration, to
the nanosecond, not a bound.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from lumos.cli import main as lumos_main
from lumos.graph import Graph
from lumos.graph.chakra import export_run, load_chakra_run
from lumos.graph.chakra_joint import export_joint
from lumos.predict.prediction import predict
from lumos.trace import load_run
from lumos.trace.chakra import read_et


def _cli_json(capsys, *argv) -> dict:
    assert lumos_main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


# --dp 4 keeps the base's graph and its 8 rendezvous (pipeline send/recv between the two stages); --pp 4
# rebuilds it: 2 directions x 3 channels x 8 micro-batches (test_predict_end_to_end.py)
@pytest.mark.parametrize("target, ranks, rendezvous", [(["--dp", "4"], [0, 8], 8), (["--pp", "4"], [0, 4, 8, 12], 48)])
def test_replay_of_the_export_is_the_prediction(tiny_runs, tmp_path, capsys, target, ranks, rendezvous):
    out = tmp_path / "et"
    doc = _cli_json(capsys, "predict", str(tiny_runs["base"]), *target, "--export", str(out), "--format", "json")
    assert doc["export"]["ranks"] == ranks
    assert doc["export"]["files"] == [f"trace.{r}.et" for r in ranks]
    assert doc["export"]["rendezvous_in_metadata"] == rendezvous
    back = _cli_json(capsys, "replay", str(out), "--format", "json")
    assert back["joint"] is True and back["ranks"] == ranks
    assert {k: back["replayed"][k] for k in doc["predicted"]} == doc["predicted"]   # every figure, exactly
    assert back["critical_rank"] == doc["critical_stage_rank"]
    tasks = doc["graph"]["tasks"]
    ids = [n.id for r in ranks for n in read_et(out / f"trace.{r}.et")[1]]
    assert len(ids) == len(set(ids)) == tasks - doc["export"]["rendezvous_in_metadata"]


def test_the_loaded_graph_is_the_predicted_graph(tiny_runs, tmp_path):
    got = {}
    predict(load_run(tiny_runs["base"]), {"pp": 4}, on_graph=lambda g, r: got.update(graph=g, ranks=r))
    g = got["graph"]
    s = export_joint(g, got["ranks"], tmp_path)
    [h] = load_chakra_run(tmp_path)
    for f in Graph.TASK_FIELDS + Graph.PROC_FIELDS + Graph.EDGE_FIELDS:
        a, b = getattr(g, f), getattr(h, f)
        assert a.dtype == b.dtype and np.array_equal(a, b), f
    assert h.summary["chakra_joint"] == [0, 4, 8, 12]
    # ASTRA-sim's constraints, file by file: ids unique, every dependency in the same file, no cross-rank one
    for r in s.ranks:
        _, nodes = read_et(tmp_path / f"trace.{r}.et")
        ids = {n.id for n in nodes}
        assert len(ids) == len(nodes) and all(g.rank[i] == r for i in ids)
        assert all(set(n.ctrl_deps) | set(n.data_deps) <= ids for n in nodes)
    cross = np.sum(g.rank[g.src] != g.rank[g.dst])
    assert cross > 0 and s.edges == g.n_edges - cross     # those live in the lumos_in_* lists only
    assert s.demoted == {"predicted": int(np.sum(g.comm & np.isin(g.rank, s.ranks)))}


def test_a_partial_export_is_refused(tiny_runs, tmp_path, capsys):
    out = tmp_path / "et"
    _cli_json(capsys, "predict", str(tiny_runs["base"]), "--dp", "4", "--export", str(out), "--format", "json")
    (out / "trace.8.et").unlink()
    assert lumos_main(["replay", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("a joint export of ranks [0, 8] (a prediction's), but the files here are ranks [0]: "
                        "every file of the export is needed") and "\n" not in err
    plain = tmp_path / "plain"                      # a file of a run's export among them
    export_run(load_run(tiny_runs["base"]), plain)
    shutil.copy(plain / "trace.4.et", out / "trace.4.et")
    assert lumos_main(["replay", str(out)]) == 2
    assert capsys.readouterr().err.strip().endswith(
        "some files are a joint export (lumos predict --export) and some are not")


def test_samples_with_export_is_refused(tiny_runs, tmp_path, capsys):
    assert lumos_main(["predict", str(tiny_runs["base"]), "--dp", "4", "--samples", "3",
                       "--export", str(tmp_path / "et")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"lumos predict: error: --export {tmp_path / 'et'}: --samples 3 replays the prediction 3 times "
                   "over, one graph per draw; export the point prediction (without --samples)")
    assert not (tmp_path / "et").exists()
