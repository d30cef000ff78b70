"""The loops that array code replaced (for `lumos predict`'s start-up), kept as the
definitions the array versions are tested against (tests/model/test_nesting.py,
tests/model/test_vectorised_reads.py)."""

import numpy as np

from lumos.graph.model import TaskKind
from lumos.trace import schema
from lumos.model.structure import ANN, BUCKET, OPTIMIZER, P2P_OP, Block, _one_bucket_each


def innermost_by_walk(table, cand, pid, tid, ts, outermost=False):
    """The definition `innermost` replaced (lumos/model/structure.py before the array version)."""
    out = np.full(len(ts), -1, dtype=np.int64)
    if not len(cand):
        return out
    key_c = table.pid[cand] * (1 << 32) + (table.tid[cand] & 0xFFFFFFFF)
    key_q = pid * (1 << 32) + (tid & 0xFFFFFFFF)
    for k in np.unique(key_q):
        c = cand[key_c == k]
        q = np.flatnonzero(key_q == k)
        if not len(c):
            continue
        c = c[np.lexsort((-table.dur[c], table.ts[c]))]
        cs, ce = table.ts[c], table.ts[c] + table.dur[c]
        qo = q[np.argsort(ts[q], kind="stable")]
        stack: list[int] = []
        j = 0
        for qi in qo:
            t = ts[qi]
            while j < len(c) and cs[j] <= t:
                while stack and ce[stack[-1]] <= cs[j]:
                    stack.pop()
                stack.append(j)
                j += 1
            while stack and ce[stack[-1]] <= t:
                stack.pop()
            live = [s for s in stack if cs[s] <= t < ce[s]]
            if live:
                out[qi] = c[live[0] if outermost else live[-1]]
    return out


def rank_blocks_by_walk(graph, table, tasks, first_proc, proc_role, coll, tp_group_size) -> list[Block]:
    """The definition `_rank_blocks` replaced (lumos/model/structure.py before its array version)."""
    cpu = tasks[graph.kind[tasks] == TaskKind.CPU]
    cev = graph.event[cpu]
    names = table.name.astype(str)
    # a checkpointed layer's recomputed forward (`layer_{L}/recompute/mb{i}`, inside that layer's
    # backward range) is part of its backward: it is not a block of its own
    ann_rows = np.flatnonzero((table.cat == schema.ANNOTATION) & ~np.char.startswith(names, "ProfilerStep#")
                              & (np.char.find(names, "/recompute/") < 0))
    op_rows = np.flatnonzero(table.cat == schema.CPU_OP)
    ann = innermost_by_walk(table, ann_rows, table.pid[cev], table.tid[cev], graph.ts[cpu])
    top = innermost_by_walk(table, op_rows, table.pid[cev], table.tid[cev], graph.ts[cpu], outermost=True)
    # launcher of each GPU task: the CPU task with the same correlation id
    corr_to_cpu = {}
    for t, e in zip(cpu, cev):
        if table.cat[e] == schema.RUNTIME and table.corr[e] >= 0:
            corr_to_cpu[int(table.corr[e])] = int(t)
    blocks: list[Block] = []
    block_of, top_of = {}, {}
    by_thread: dict[int, list[int]] = {}
    for i, t in enumerate(cpu):
        by_thread.setdefault(int(graph.proc[t]), []).append(i)
    for p, idx in by_thread.items():
        idx = sorted(idx, key=lambda i: graph.ts[cpu[i]])
        prev_key, cur = None, None
        open_ann: dict[int, Block] = {}     # annotation event -> its block, to rejoin after a nested range
        for i in idx:
            a = int(ann[i])
            key = ("ann", a) if a >= 0 else ("op", int(top[i]))
            if key != prev_key and a >= 0 and a in open_ann:
                cur = open_ann[a]
                prev_key = key
            elif key != prev_key:
                cur = Block(kind="glue", rank=int(table.rank), thread_role=int(proc_role[p]),
                            start=float(graph.ts[cpu[i]]))
                cur._members = []
                cur._ann = table.name[a] if a >= 0 else None
                cur._top = table.name[top[i]] if top[i] >= 0 else None
                blocks.append(cur)
                if a >= 0:
                    open_ann[a] = cur
                prev_key = key
            cur._members.append(int(cpu[i]))
            block_of[int(cpu[i])] = cur
            top_of[int(cpu[i])] = int(top[i])
    gpu = tasks[graph.kind[tasks] == TaskKind.GPU]
    for g in gpu:
        launcher = corr_to_cpu.get(int(table.corr[graph.event[g]]), -1)
        b = block_of.get(launcher)
        if b is None:
            b = blocks[0] if blocks else None
        if b is not None:
            b._members.append(int(g))
    for b in blocks:
        b.tasks = np.array(sorted(b._members, key=lambda t: (graph.kind[t], graph.ts[t])), dtype=np.int64)
        m = ANN.match(b._ann) if b._ann else None
        mb_ = BUCKET.match(b._ann) if b._ann else None
        comm_kinds = [coll[t] for t in b.tasks if coll[t] is not None]
        if m:
            b.kind = "layer" if m.group(1) is not None else (m.group(2) or m.group(3))
            b.layer = int(m.group(1)) if m.group(1) is not None else -1
            b.phase, b.mb = m.group(4), int(m.group(5))
        elif mb_ and not comm_kinds:
            b.kind, b.layer = "bucket", int(mb_.group(1))
        elif b._ann in OPTIMIZER or (b._ann or "").startswith("Optimizer.step#"):
            b.kind = "optimizer"
        elif b._top == P2P_OP:
            b.kind = "p2p"
            gt = [t for t in b.tasks if coll[t] in ("send", "recv")]
            gt.sort(key=lambda t: graph.ts[t])
            b.shape = tuple(coll[t] for t in gt)
        elif comm_kinds and all(k == "allreduce" for k in comm_kinds):
            b.kind = "dp"
        del b._members, b._ann, b._top
    blocks = [part for b in blocks for part in _one_bucket_each(b, graph, coll, corr_to_cpu, table, top_of)]
    return sorted(blocks, key=lambda b: b.start)
