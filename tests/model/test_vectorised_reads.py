"""The array versions of the rebuild's per-block reads against the loops they replaced (for
`lumos predict`'s start-up): `find_structure`'s blocks (`_rank_blocks`), the kernels' launching
events (`launchers`) and the templates' per-block edges (`templates._block_edges`), on the emulated
tiny run (all-reduce DP and FSDP) and a measured H200 trace."""

from pathlib import Path

import numpy as np
import pytest

from lumos.emulator import emulate, write_result
from lumos.graph.model import EdgeClass, TaskKind
from lumos.trace import load_run, schema
from lumos.model.launchers import launching_events
from lumos.model.structure import _rank_blocks
from lumos.model.recover import recover_layers
from lumos.transform.templates import Templates
from lumos.predict.whatif import base_plan

from tests.replaced_loops import rank_blocks_by_walk

TRACES = Path(__file__).parents[2] / "resources" / "traces"
BASES = ["tiny", "tiny_fsdp", "h200/base_r0"]   # EMULATED tiny 2x2x2 (conftest.py), the same with FSDP; measured H200
_INTRA, _INTER, _CROSS = int(EdgeClass.INTRA_THREAD), int(EdgeClass.INTER_THREAD), int(EdgeClass.CROSS_RANK)


@pytest.fixture(scope="module", params=BASES)
def base(request):
    """A base's plan, and its tables with the layer ranges `find_structure` read (by rank)."""
    if request.param == "tiny":
        path = request.getfixturevalue("tiny_runs")["base"]
    elif request.param == "tiny_fsdp":
        path = request.getfixturevalue("tmp_path_factory").mktemp("tiny_fsdp")
        write_result(emulate(["model=tiny", "parallel.tp=2", "parallel.pp=2", "parallel.dp=2",
                              "training.dp_sharding=fsdp", "seed=0"], progress=False), path)
    else:
        path = TRACES / request.param
    tables = load_run(path)
    return base_plan(tables), {t.rank: t for t in recover_layers(list(tables), None)[0]}


@pytest.fixture(scope="module")
def plan(base):
    return base[0]


def _same_blocks(a: list, b: list) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert (x.kind, x.phase, x.layer, x.mb, x.shape, x.rank, x.thread_role, x.start) == \
            (y.kind, y.phase, y.layer, y.mb, y.shape, y.rank, y.thread_role, y.start)
        assert x.tasks.tolist() == y.tasks.tolist()


def test_rank_blocks_are_the_walk(base):
    plan, tables = base
    g, st = plan.graph, plan.st
    for r, table in tables.items():
        tasks = np.flatnonzero((g.rank == r) & (g.event >= 0))
        _same_blocks(_rank_blocks(g, table, tasks, 0, st.proc_role, st.coll, None),
                     rank_blocks_by_walk(g, table, tasks, 0, st.proc_role, st.coll, None))


def test_launching_events_are_the_dict(base):
    plan, tables = base
    g = plan.graph
    for r, table in tables.items():
        tasks = np.flatnonzero((g.rank == r) & (g.event >= 0))
        ev = g.event[tasks]
        gpu = g.kind[tasks] == TaskKind.GPU
        corr_rt = {}
        for e in ev[~gpu]:
            if table.cat[e] == schema.RUNTIME and table.corr[e] >= 0:
                corr_rt[int(table.corr[e])] = e
        want = [corr_rt.get(int(table.corr[e]), e) for e in ev[gpu]]
        assert launching_events(table, ev[~gpu], ev[gpu]).tolist() == [int(x) for x in want]


def test_block_edges_are_the_loop(plan):
    tm = Templates(plan)
    g, st = plan.graph, plan.st
    keep = g.cls != _CROSS
    src, dst = g.src[keep], g.dst[keep]
    cls, lag = g.cls[keep], g.lag[keep]
    blk = st.task_block
    order = np.argsort(blk[dst], kind="stable")
    bounds = np.searchsorted(blk[dst][order], np.arange(len(st.blocks) + 1))
    local = np.full(g.n_tasks, -1, np.int64)
    for b in st.blocks:
        local[b.tasks] = np.arange(len(b.tasks))
    for i, b in enumerate(st.blocks):
        e = order[bounds[i]:bounds[i + 1]]
        inside = blk[src[e]] == i
        ei, ee = e[inside], e[~inside]
        intra = (local[src[ei]], local[dst[ei]], cls[ei], lag[ei])
        lead = local[dst[ee]] == 0
        lead_intra = lag[ee[lead & (cls[ee] == _INTRA)]]
        lead_inter = lag[ee[lead & (cls[ee] == _INTER)]]
        assert tm.lead_lag[i] == (float(lead_intra.max()) if len(lead_intra) else None,
                                  float(lead_inter.max()) if len(lead_inter) else None)
        into = ee[lead & ((cls[ee] == _INTRA) | (cls[ee] == _INTER))]
        ready = g.ts[src[into]] + g.dur[src[into]] + lag[into]
        assert tm.handoff_binds[i] == bool(bool(len(into)) and cls[into[np.argmax(ready)]] == _INTER)
        ext_ok = cls[ee] != _INTER
        hand_lags = lag[ee[~ext_ok]]
        assert tm.switch_lag[i] == (float(hand_lags.max()) if len(hand_lags) else None)
        ee = ee[ext_ok]
        ext = (g.proc_kind[g.proc[src[ee]]], st.proc_role[g.proc[src[ee]]], local[dst[ee]], cls[ee], lag[ee])
        got_intra, got_ext = tm.edges[i]
        for x, y in zip(got_intra + got_ext, intra + ext):
            assert x.dtype == y.dtype and x.tolist() == y.tolist()
