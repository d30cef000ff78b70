"""`lumos.model.nesting.innermost` (array work) against its first definition, a walk per query
with a stack of open events, on random ranges: nested, overlapping, touching, empty, tied starts."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from lumos.model.nesting import innermost
from tests.replaced_loops import innermost_by_walk


class _Table:
    def __init__(self, pid, tid, ts, dur):
        self.pid, self.tid, self.ts, self.dur = (np.asarray(pid, np.int64), np.asarray(tid, np.int64),
                                                 np.asarray(ts, np.float64), np.asarray(dur, np.float64))


def _nested(rng, n, depth):
    """Ranges that nest like a profiler's ops (children inside parents), some back to back."""
    ts, dur = [], []

    def fill(lo, hi, d):
        t = lo
        while t < hi and len(ts) < n:
            length = float(rng.integers(0, max(int(hi - t), 1) + 1))
            ts.append(t)
            dur.append(length)
            if d < depth and length > 2:
                fill(t + float(rng.integers(0, 2)), t + length, d + 1)
            t += length + float(rng.integers(0, 3))
    fill(0.0, 1000.0, 0)
    return ts, dur


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 60), threads=st.integers(1, 3),
       nested=st.booleans(), outermost=st.booleans())
def test_innermost_is_its_walk_definition(seed, n, threads, nested, outermost):
    rng = np.random.default_rng(seed)
    if nested:
        ts, dur = _nested(rng, n, depth=int(rng.integers(1, 6)))
        n = len(ts)
    else:    # anything: overlaps that do not nest, ties, empty ranges
        ts = rng.integers(0, 40, n).astype(float)
        dur = rng.integers(0, 25, n).astype(float)
    tid = rng.integers(0, threads, n)
    table = _Table(np.ones(n), tid, ts, dur)
    cand = np.flatnonzero(rng.random(n) < 0.7) if n else np.zeros(0, np.int64)
    nq = int(rng.integers(0, 80))
    q_ts = np.concatenate([rng.integers(-2, 1000 if nested else 70, nq).astype(float), np.asarray(ts[:10], float)])
    q_tid = rng.integers(0, threads + 1, len(q_ts))
    q_pid = np.where(rng.random(len(q_ts)) < 0.9, 1, 2)
    got = innermost(table, cand, q_pid, q_tid, q_ts, outermost=outermost)
    want = innermost_by_walk(table, cand, q_pid, q_tid, q_ts, outermost=outermost)
    assert got.tolist() == want.tolist()


def test_innermost_on_a_real_trace():
    """Every CPU op of a shipped trace's CPU ops and annotations, both ways."""
    from pathlib import Path

    from lumos.trace import load_trace, schema

    run = Path(__file__).parents[2] / "resources" / "traces" / "fsdp_cpu" / "full_2rank_r0"
    path = sorted(run.glob("*.json.gz"))[0]
    table = load_trace(path)
    ops = np.flatnonzero(table.cat == schema.CPU_OP)
    ann = np.flatnonzero(table.cat == schema.ANNOTATION)
    for cand in (ops, ann):
        for outer in (False, True):
            got = innermost(table, cand, table.pid[ops], table.tid[ops], table.ts[ops], outermost=outer)
            want = innermost_by_walk(table, cand, table.pid[ops], table.tid[ops], table.ts[ops], outermost=outer)
            assert got.tolist() == want.tolist()
