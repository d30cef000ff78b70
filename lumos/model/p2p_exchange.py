"""A pipeline exchange that no batch op encloses: Megatron's overlapped form (`--overlap-p2p-communication`).

Batched, a stage's sends and receives of one exchange sit inside one `c10d::batch_isend_irecv` op, with its
waits and synchronize, and `structure` reads that op as one `p2p` block. Overlapped (Megatron-LM
megatron/core/pipeline_parallel/p2p_communication.py `_p2p_ops`, schedules.py
`forward_backward_pipelining_with_interleaving` with `overlap_p2p_comm`), each isend / irecv is a top-level
c10d call and the waits (`Work.wait()`, a compute-stream wait) are top-level `aten::wait` ops, some right after
the calls, some deferred to just before the step that reads the received tensor. Here the calls posted
together and the waits after them (up to the next call or anything else on the thread) are one `p2p` block, as
the batched form's; which receive each wait waits for is an edge of the graph (recv kernel -> the first kernel
after the wait), kept by the rebuild where the next step's block begins (`rebuild._emit`).

    main thread:  [F k] send recv wait wait | send recv wait wait | [F k+1] ...
                        +-- one exchange --+  +-- the next one --+
"""

from __future__ import annotations

import dataclasses

import numpy as np

P2P_CALLS = ("c10d::send", "c10d::recv_", "c10d::isend", "c10d::irecv")
WAIT_OP = "aten::wait"


def join_exchanges(blocks: list, names: list, graph, coll: np.ndarray) -> tuple[list, bool]:
    """`blocks` (one per top-level op outside any range, in thread order) with each unbatched exchange made one
    `p2p` block; and whether the rank exchanges that way (the overlapped form)."""
    out, open_, waited, found = [], None, False, False
    for b, (ann, top) in zip(blocks, names):
        call = ann is None and top in P2P_CALLS
        wait = ann is None and top == WAIT_OP and open_ is not None and open_.thread_role == b.thread_role
        if call and open_ is not None and not waited and open_.thread_role == b.thread_role:
            open_.tasks = np.concatenate([open_.tasks, b.tasks])
            continue
        if wait:
            open_.tasks = np.concatenate([open_.tasks, b.tasks])
            waited = True
            continue
        if call:
            found = True
            open_, waited = dataclasses.replace(b, kind="p2p", overlapped=True), False
            out.append(open_)
            continue
        open_ = None
        out.append(b)
    for b in out:
        if b.kind == "p2p" and found and len(b.tasks):
            t = b.tasks[np.lexsort((graph.ts[b.tasks], graph.kind[b.tasks]))]
            b.tasks = t
            gt = sorted((int(x) for x in t if coll[x] in ("send", "recv")), key=lambda x: graph.ts[x])
            b.shape = tuple(coll[x] for x in gt)
    return out, found


def overlapped(st) -> bool:
    """Whether a run's pipeline exchanges are the overlapped form's (top-level calls, no batch op)."""
    return any(b.kind == "p2p" and b.overlapped for b in st.blocks)
