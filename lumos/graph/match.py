"""Which task of one step is which task of another: the pairing transfer and step medians share.

Tasks are paired per processor by aligning the two name sequences in time order, as a diff
aligns lines: runs of names that agree pair up in order; a stretch that differs is aligned
again inside, with every name as an anchor; what still differs there, and an op that moved,
pairs the n-th task named X left over with the n-th X left over. An op only
one step ran finds no partner. Processors are matched by their trace ids (pid/tid,
device/stream) where both sides have the id, the rest by their order in the trace. GPU ops
carried in from an earlier step are matched only with carried-in ops.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .model import Graph, TaskKind

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["TaskKeys", "match_tasks"]


@dataclass
class TaskKeys:
    """What matching reads of each task: kind, processor id in the trace, carried-in flag,
    name, and the order on its processor (measured start, then trace row)."""
    kind: np.ndarray      # int8 TaskKind
    proc_key: np.ndarray  # int64 (pid<<32|tid) or (device<<32|stream)
    carry: np.ndarray     # bool: GPU op carried in from an earlier step
    name: np.ndarray      # object
    ts: np.ndarray
    event: np.ndarray

    @classmethod
    def of_graph(cls, g: Graph) -> "TaskKeys":
        gpu = g.kind == TaskKind.GPU
        return cls(kind=g.kind.astype(np.int8), proc_key=g.proc_key[g.proc].astype(np.int64),
                   carry=gpu & ~g.in_step, name=g.name, ts=g.ts, event=g.event)


def _proc_map(target: TaskKeys, source: TaskKeys) -> dict[tuple[int, int], int]:
    """(kind, target proc key) -> source proc key: same id where the source has it, else by order."""
    out: dict[tuple[int, int], int] = {}
    for kind in (TaskKind.CPU, TaskKind.GPU):
        t_keys = sorted(set(target.proc_key[target.kind == kind].tolist()))
        s_keys = sorted(set(source.proc_key[source.kind == kind].tolist()))
        common = set(t_keys) & set(s_keys)
        out.update({(int(kind), k): k for k in common})
        rest_s = [k for k in s_keys if k not in common]
        for k, s in zip((k for k in t_keys if k not in common), rest_s):
            out[(int(kind), k)] = s
    return out


def _frame(keys: TaskKeys, proc: np.ndarray, names: pd.Index) -> pd.DataFrame:
    import pandas as pd   # here, not at import: `lumos replay` needs none of it
    df = pd.DataFrame({"kind": keys.kind.astype(np.int64), "proc": proc, "carry": keys.carry.astype(bool),
                       "name": names.get_indexer(keys.name), "ts": keys.ts, "event": keys.event,
                       "task": np.arange(len(keys.kind))})
    return df.sort_values(["ts", "event"], kind="stable")


def _pair_by_occurrence(a_names: list, b_names: list) -> list[tuple[int, int]]:
    """Positions (i, j): the n-th name X of `a` with the n-th name X of `b`."""
    where: dict = {}
    for j, x in enumerate(b_names):
        where.setdefault(x, []).append(j)
    seen: dict = {}
    out = []
    for i, x in enumerate(a_names):
        k = seen.get(x, 0)
        seen[x] = k + 1
        js = where.get(x)
        if js is not None and k < len(js):
            out.append((i, js[k]))
    return out


# Largest stretch (its two lengths multiplied) re-aligned with every name as an anchor: a diff
# without junk costs about that product; past it, the n-th X pairs with the n-th X.
REFINE_MAX_CELLS = 4_000_000


def _align(a_names: list, b_names: list) -> list[tuple[int, int]]:
    """Positions (i, j) of two processors' name sequences paired as a diff pairs lines: runs
    that agree are paired in order, and a stretch where they differ is aligned again inside
    (`_pair_stretch`). An op one step ran and the other did not then shifts nothing after it
    (pairing by occurrence over the whole processor shifted every later op of that name)."""
    out = _diff_pairs(a_names, b_names, autojunk=True, stretch=_pair_stretch)
    # what is left (an op that moved past others) by occurrence among the left-overs
    a_used, b_used = {i for i, _ in out}, {j for _, j in out}
    a_rest = [i for i in range(len(a_names)) if i not in a_used]
    b_rest = [j for j in range(len(b_names)) if j not in b_used]
    out.extend((a_rest[i], b_rest[j]) for i, j in _pair_by_occurrence([a_names[i] for i in a_rest],
                                                                      [b_names[j] for j in b_rest]))
    return out


def _pair_stretch(a_names: list, b_names: list) -> list[tuple[int, int]]:
    """A stretch where the two sequences differ, aligned again with every name as an anchor.

    The first diff treats a name that fills more than 1% of a long sequence as junk (difflib's
    `autojunk`): it anchors on nothing between two rare ops, and a stretch of a thousand
    `aten::empty` / `cudaLaunchKernel` calls came back as one difference, whose n-th X then took
    the n-th X wherever it stood (hta trace_diff: partners up to 7 ms apart, their gaps carried
    over; transfer 0.97% against 0.78% aligned again). A diff without junk over a whole step costs
    time the square of its length (36 s on hta_queue); over the stretches only, 0.3-1.4 s more per trace.
    Stretches longer than `REFINE_MAX_CELLS` allows pair by occurrence."""
    if len(a_names) * len(b_names) > REFINE_MAX_CELLS:
        return _pair_by_occurrence(a_names, b_names)
    return _diff_pairs(a_names, b_names, autojunk=False, stretch=_pair_by_occurrence)


def _diff_pairs(a_names: list, b_names: list, autojunk: bool, stretch) -> list[tuple[int, int]]:
    """Positions (i, j) of a diff: its equal runs in order, each stretch that differs by `stretch`."""
    out = []
    sm = difflib.SequenceMatcher(None, a_names, b_names, autojunk=autojunk)
    for tag, i0, i1, j0, j1 in sm.get_opcodes():
        if tag == "equal":
            out.extend(zip(range(i0, i1), range(j0, j1)))
        elif tag == "replace":
            out.extend((i0 + i, j0 + j) for i, j in stretch(a_names[i0:i1], b_names[j0:j1]))
    return out


def match_tasks(target: TaskKeys, source: TaskKeys) -> np.ndarray:
    """For each target task, the source task it matches (-1: none): per processor (and
    carried-in or not), the two name sequences aligned in time order (`_align`)."""
    import pandas as pd   # here, not at import: `lumos replay` needs none of it
    pmap = _proc_map(target, source)
    t_proc = np.array([pmap.get((int(k), int(p)), -1) for k, p in zip(target.kind, target.proc_key)], dtype=np.int64)
    names = pd.Index(pd.unique(np.concatenate([target.name, source.name])))
    t = _frame(target, t_proc, names)
    s = _frame(source, source.proc_key.astype(np.int64), names)
    on = ["kind", "proc", "carry"]
    theirs = {k: (grp["name"].tolist(), grp["task"].to_numpy()) for k, grp in s.groupby(on, sort=False)}
    out = np.full(len(target.kind), -1, dtype=np.int64)
    for k, grp in t.groupby(on, sort=False):
        if k not in theirs:
            continue
        b_names, b_task = theirs[k]
        a_task = grp["task"].to_numpy()
        pairs = _align(grp["name"].tolist(), b_names)
        if pairs:
            i, j = np.array(pairs).T
            out[a_task[i]] = b_task[j]
    return out
