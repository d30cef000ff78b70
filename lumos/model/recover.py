"""Transformer layers in a trace without layer ranges, found by repetition.

`find_structure` reads layers from `layer_{L}/forward/mb{i}`-style ranges (`lumos.trace.annotation`)
that only our emulator and capture write. Anybody else's trace still shows them: a stage runs the same
top-level CPU ops (same names, same input shapes) for each of its layers, so each thread's
op sequence repeats with one period through a micro-batch's forward and another through its
backward. This module finds the two periods, where a layer begins in them and how many
layers a micro-batch runs, and appends the ranges `find_structure` reads to the table as
annotation rows (the graph's rows keep their index), so every transform works on the
result. Where the trace has autograd sequence numbers, each backward op also votes for the layer
whose forward created its node, which fixes the backward's phase. The rules: docs/prediction.md,
"Layers without annotations"; what was checked and the limits: docs/notes/2026-12-01-layer-recovery.md.
A trace without such repetition (DLRM, ResNet) gets nothing and the reason:
no layers are ever invented.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from lumos.graph.build import resolve_step
from lumos.trace import TraceTable, schema
from lumos.trace.annotation import layer_block, range_name

from .layer_ranges import (OPTIMIZER_STEP, P2P_OPS, Recovery, Thread, framing, has_layer_ranges, is_backward, is_gemm,
                           op_groups, op_range, op_threads, with_ranges)
from .module_calls import find_module_ranges
from .structure import EMBEDDING_OPS

MIN_PERIOD, MAX_PERIOD = 4, 512
NONE = "no transformer layer structure"


def _canonical(w: tuple) -> tuple[tuple, int]:
    """The smallest rotation of `w` and the shift that gives `w` from it."""
    best, shift = w, 0
    for r in range(1, len(w)):
        c = w[r:] + w[:r]
        if c < best:
            best, shift = c, r
    return best, (len(w) - shift) % len(w)


def _primitive(w: tuple) -> bool:
    p = len(w)
    return not any(p % q == 0 and w == w[q:] + w[:q] for q in range(1, p // 2 + 1))


def _tandem_stretches(tokens: np.ndarray) -> list[tuple[tuple, int, int, int]]:
    """(pattern up to rotation, its rotation at the start, start, full periods) of every
    stretch that repeats a primitive pattern at least twice."""
    out = []
    n = len(tokens)
    for p in range(MIN_PERIOD, min(MAX_PERIOD, n // 2) + 1):
        eq = np.r_[0, (tokens[:-p] == tokens[p:]).astype(np.int8), 0]
        d = np.diff(eq)
        starts, ends = np.flatnonzero(d == 1), np.flatnonzero(d == -1)
        for s, e in zip(starts, ends):
            reps = (e - s + p) // p
            if reps < 2:
                continue
            w = tuple(tokens[s:s + p].tolist())
            if not _primitive(w):
                continue
            canon, rot = _canonical(w)
            out.append((canon, rot, int(s), int(reps)))
    return out


def _choose(stretches: list, backward_tokens: set, foreign: set, backward: bool,
            need: set | None = None) -> tuple | None:
    """The shortest pattern covering at least half of what the best one covers. A pattern with a
    pipeline exchange, an embedding lookup or the optimizer in it is a whole micro-batch (one layer
    per stage), never a layer; `need`: tokens one of which a layer holds (a matrix multiply)."""
    cover: Counter = Counter()
    for canon, _, _, reps in stretches:
        if (any(t in backward_tokens for t in canon) == backward and not foreign.intersection(canon)
                and (need is None or need.intersection(canon))):
            cover[canon] += reps * len(canon)
    if not cover:
        return None
    best = max(cover.values())
    return min((c for c, v in cover.items() if 2 * v >= best), key=lambda c: (len(c), -cover[c]))


def _rotate(stretches: list, canon: tuple) -> tuple:
    votes = Counter(rot for c, rot, _, _ in stretches if c == canon)
    rot = max(votes, key=lambda r: (votes[r], -r))
    return canon[rot:] + canon[:rot]


def _occurrences(tokens: np.ndarray, pattern: tuple) -> list[int]:
    """Start positions of non-overlapping exact occurrences, left to right."""
    p, n = len(pattern), len(tokens)
    if n < p:
        return []
    hit = np.ones(n - p + 1, dtype=bool)
    for j, x in enumerate(pattern):
        hit &= tokens[j:n - p + 1 + j] == x
    out, nxt = [], 0
    for i in np.flatnonzero(hit):
        if i >= nxt:
            out.append(int(i))
            nxt = i + p
    return out


def _chain_lengths(starts: list[int], p: int) -> list[int]:
    """Lengths of the runs of back-to-back occurrences (each starting where the last ended)."""
    out: list[int] = []
    for i, s in enumerate(starts):
        if i and s == starts[i - 1] + p:
            out[-1] += 1
        else:
            out.append(1)
    return out


def _modal_run(lengths: list[int]) -> int | None:
    """Layers per micro-batch: the most common length of the runs of two or more back-to-back layers."""
    runs = [n for n in lengths if n >= 2]
    return Counter(runs).most_common(1)[0][0] if runs else None


def _sequence_votes(table: TraceTable, ths: list[Thread], fwd: tuple, bwd: tuple) -> np.ndarray:
    """Per rotation of the backward pattern (rows): how many backward ops land in the layer and
    micro-batch whose forward created their autograd node (the `Sequence number` a forward op and
    the backward of its node share), and how many occurrences start with one of their own layer's
    nodes (that settles a tie where ops without a node, AccumulateGrad, sit at the edge). Zeros
    when the trace has no sequence numbers."""
    votes = np.zeros((len(bwd), 2), dtype=np.int64)
    ops = np.flatnonzero((table.cat == schema.CPU_OP) & (table.seq >= 0))
    if not len(ops):
        return votes
    owner: dict[int, tuple[int, int]] = {}   # sequence number -> (layer in its micro-batch, micro-batch)
    for th in ths:
        starts = _occurrences(th.tokens, fwd)
        k = _modal_run(_chain_lengths(starts, len(fwd)))
        if k is None:
            continue
        key = table.pid[th.rows[0]] * (1 << 32) + (table.tid[th.rows[0]] & 0xFFFFFFFF)
        mine = ops[table.pid[ops] * (1 << 32) + (table.tid[ops] & 0xFFFFFFFF) == key]
        mine = mine[np.argsort(table.ts[mine], kind="stable")]
        at = table.ts[mine]
        for i, s in enumerate(starts[:len(starts) // k * k]):
            rows = th.rows[s:s + len(fwd)]
            lo, hi = table.ts[rows[0]], float(np.max(table.ts[rows] + table.dur[rows]))
            inside = mine[np.searchsorted(at, lo, side="left"):np.searchsorted(at, hi, side="right")]
            owner.update({int(q): (i % k, i // k) for q in table.seq[inside]})
    if not owner:
        return votes
    for th in ths:
        label = [owner.get(int(q)) for q in table.seq[th.rows]]
        if not any(label):
            continue
        for rot in range(len(bwd)):
            starts = _occurrences(th.tokens, bwd[rot:] + bwd[:rot])
            k = _modal_run(_chain_lengths(starts, len(bwd)))
            if k is None:
                continue
            for i, s in enumerate(starts[:len(starts) // k * k]):
                want = (k - 1 - i % k, i // k)
                votes[rot] += (sum(x == want for x in label[s:s + len(bwd)]), label[s] == want)
    return votes


def find_layer_ranges(tables: list[TraceTable], windows: list | None = None
                      ) -> tuple[list[list[dict]], list[Recovery]]:
    """Per table (one per pipeline stage, in stage order): the ranges to annotate, and how they
    were found. `windows`: per table, the (start, end) of the iteration to read (None: all)."""
    vocab: dict[str, int] = {}
    windows = windows or [None] * len(tables)
    threads = [op_threads(t, vocab, w) for t, w in zip(tables, windows)]
    names = {v: k[0] for k, v in vocab.items()}
    backward_tokens = {v for k, v in vocab.items() if is_backward(k[0])}
    gemm_tokens = {v for k, v in vocab.items() if is_gemm(k[0])}
    stretches = [s for ts in threads for th in ts for s in _tandem_stretches(th.tokens)]
    foreign = {v for (k, _), v in vocab.items()
               if k in P2P_OPS or k in EMBEDDING_OPS or k.startswith(OPTIMIZER_STEP) or "embedding" in k}
    fwd = _choose(stretches, backward_tokens, foreign, backward=False, need=gemm_tokens)
    bwd = _choose(stretches, backward_tokens, foreign, backward=True)
    if fwd is None:
        why = (f"{NONE}: no sequence of 4 or more top-level CPU ops with a matrix multiply (same names, same "
               "input shapes) repeats back to back on any thread (a model without repeated layers, or one "
               "layer per stage)")
        return [[] for _ in tables], [Recovery("none", note=why) for _ in tables]
    pats = {"forward": _rotate(stretches, fwd)}
    if bwd is not None:
        pats["backward"] = _rotate(stretches, bwd)
        votes = sum(_sequence_votes(table, ths, pats["forward"], bwd) for table, ths in zip(tables, threads))
        if votes[:, 0].max() > 0:   # autograd says which layer each backward op is of
            rot = max(range(len(bwd)), key=lambda r: (votes[r, 0], votes[r, 1], -r))
            pats["backward"] = bwd[rot:] + bwd[:rot]
    ranges, found = [], []
    for stage, (table, ths) in enumerate(zip(tables, threads)):
        r, how = _stage_ranges(stage, table, ths, pats, names[pats["forward"][0]])
        ranges.append(r)
        found.append(how)
    return ranges, found


def _stage_ranges(stage: int, table: TraceTable, ths: list[Thread], pats: dict,
                  first_op: str) -> tuple[list[dict], Recovery]:
    """One stage's layer, embedding, head and optimizer ranges, given the layer patterns."""
    groups = op_groups(table, ths)
    occ = {ph: [(ti, s) for ti, th in enumerate(ths) for s in _occurrences(th.tokens, p)]
           for ph, p in pats.items()}
    layer_groups = Counter(groups.get(int(ths[ti].rows[s + j])) for ph, p in pats.items()
                           for ti, s in occ[ph] for j in range(len(p)) if int(ths[ti].rows[s + j]) in groups)
    tp_group = layer_groups.most_common(1)[0][0] if layer_groups else None
    lengths = [n for ph, p in pats.items() for ti in range(len(ths))
               for n in _chain_lengths([s for t2, s in occ[ph] if t2 == ti], len(p))]
    k = _modal_run(lengths)
    if k is None:
        return [], Recovery("none", note=f"rank {table.rank}: {NONE}: the layer pattern never repeats "
                                          "back to back on this rank")
    counts = {ph: len(v) for ph, v in occ.items()}
    if any(c % k for c in counts.values()) or len({c // k for c in counts.values()}) > 1:
        return [], Recovery("none", note=f"rank {table.rank}: {NONE}: runs of {sorted({n for n in lengths if n >= 2})} "
                                          f"repeated blocks do not make micro-batches of {k} layers")
    mbs = counts["forward"] // k
    out = []
    for ti, th in enumerate(ths):
        layer = np.zeros(len(th.rows), dtype=bool)
        for ph, p in pats.items():
            for t2, s in occ[ph]:
                if t2 == ti:
                    layer[s:s + len(p)] = True
        chunks = []
        for ph, p in pats.items():
            starts = [s for t2, s in occ[ph] if t2 == ti]
            for mb in range(len(starts) // k):
                chunk = starts[mb * k:(mb + 1) * k]
                for i, s in enumerate(chunk):
                    local = i if ph == "forward" else k - 1 - i
                    name = range_name(layer_block(stage * k + local), ph, mb)
                    out.append(op_range(table, th.rows[s:s + len(p)], name))
                chunks.append((ph, mb, chunk[0], chunk[-1] + len(p)))
        out += framing(table, th, layer, chunks, groups, tp_group)
    return out, Recovery("repetition", layers_per_stage=k, microbatches=mbs, forward_period=len(pats["forward"]),
                         backward_period=len(pats.get("backward", ())),
                         note=f"rank {table.rank}: {k} layers x {mbs} micro-batches per stage from a "
                              f"{len(pats['forward'])}-op forward pattern starting {first_op}")


def recover_layers(tables: list[TraceTable], step=None) -> tuple[list[TraceTable], list[Recovery]]:
    """The tables with layer ranges added where none of them has any (else as they are), in
    their order, and how each rank's layers were found: from the profiler's module events
    (`module_calls`) where they give them, else by repetition. `step`: the iteration read (as
    for `build_graph`); micro-batches are counted in it."""
    if any(has_layer_ranges(t) for t in tables):
        return list(tables), [Recovery("annotations", note=f"rank {t.rank}: layer ranges in the trace")
                              for t in tables]
    order = sorted(range(len(tables)), key=lambda i: tables[i].rank)
    staged = [tables[i] for i in order]
    windows = []
    for t in staged:
        s = resolve_step(t, step)
        windows.append(None if s is None else (s.start, s.end))
    got = find_module_ranges(staged, windows)
    ranges, found = got if got is not None else find_layer_ranges(staged, windows)
    out, how = list(tables), list(found)
    for j, i in enumerate(order):
        out[i], how[i] = with_ranges(staged[j], ranges[j]), found[j]
    return out, how


def summary(recovery: list[dict]) -> dict:
    """What `lumos predict` and `lumos replay --structure` say about where the layers came from."""
    sources = sorted({r["source"] for r in recovery})
    return {"source": sources[0] if len(sources) == 1 else "mixed", "ranks": [r["note"] for r in recovery]}
