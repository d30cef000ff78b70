"""How a run is laid out beyond TP x PP x DP, read from its blocks: the model chunks of an interleaved pipeline
(each stage's runs of consecutive layers) and the context-parallel groups (a layer's key/value gathers)."""

from __future__ import annotations

import numpy as np


CP_COLLECTIVES = ("allgather", "reduce_scatter")
CP_RING = ("send", "recv")   # the ring form's exchanges (Transformer Engine's AttnFuncWithCPAndKVP2P)


def is_cp_collective(kind, group, block_kind: str, tp: int) -> bool:
    """A context-parallel collective: an all-gather (of keys and values) or reduce-scatter (of their gradients)
    inside a transformer layer over ranks TP apart (Megatron's order TP, CP, DP: a layer's own all-gathers
    under sequence parallelism are over the TP group, FSDP's gathers sit outside the layers), or, in the ring
    form, a send or receive of a key/value chunk inside a layer, named on the CP group (a pipeline's sends sit
    between the layers)."""
    g = sorted(group or ())
    return (kind in CP_COLLECTIVES + CP_RING and block_kind == "layer" and len(g) > 1
            and all(b - a == tp for a, b in zip(g, g[1:])))


def context_parallel(blocks: list, task_block: np.ndarray, coll: np.ndarray, group: np.ndarray, tp: int) -> int:
    """Context-parallel ranks per sequence: the size of the groups of the CP collectives (1 where none). The
    groups of a layer's all-to-alls are expert-parallel (`expert_groups`): their all-gathers are an MoE's."""
    ep = expert_groups(blocks, task_block, coll, group)
    sizes = [len(group[t]) for t in np.flatnonzero(coll != None).tolist()  # noqa: E711
             if task_block[t] >= 0 and is_cp_collective(coll[t], group[t], blocks[task_block[t]].kind, tp)
             and tuple(sorted(group[t] or ())) not in ep]
    return max(sizes) if sizes else 1


def expert_groups(blocks: list, task_block: np.ndarray, coll: np.ndarray, group: np.ndarray) -> set:
    """The process groups (sorted rank tuples) of the all-to-alls inside transformer layers: an MoE's expert-
    parallel groups, whose token exchange they carry."""
    return {tuple(sorted(group[t] or ())) for t in np.flatnonzero(coll == "all_to_all").tolist()
            if task_block[t] >= 0 and blocks[task_block[t]].kind == "layer" and group[t]}


def layer_chunks(blocks: list, ranks: list) -> tuple[int, tuple, tuple]:
    """(model chunks per stage, layers of each stage, per stage the layers of each chunk) from the layers each
    stage's blocks ran: every stage of an interleaved pipeline holds V runs of consecutive layers (chunk c of
    stage s: virtual stage c * pp + s), and no layer runs on two stages; the first stage may hold one run fewer
    (its first chunk only the embedding) and so may the last (its last chunk only the output and loss), as in
    Llama 3 405B's layout. Anything else reads as one chunk per stage, as before interleaving was known (a
    layer the recovery missed leaves a gap in one stage's run)."""
    held = {r: sorted({b.layer for b in blocks if b.rank == r and b.kind == "layer"}) for r in ranks}
    runs = {r: _runs(ls) for r, ls in held.items()}
    stage_layers = tuple(len(held[r]) for r in ranks)
    seen = [l for ls in held.values() for l in ls]
    v = max((len(x) for x in runs.values()), default=1)
    ends = {ranks[0]: "first", ranks[-1]: "last"}
    fits = len(ranks) > 1 and v > 1 and len(seen) == len(set(seen)) and all(
        len(x) == v or (len(x) == v - 1 and r in ends) for r, x in runs.items())
    if not fits:
        return 1, stage_layers, ()
    sizes = []
    for r in ranks:
        x = [len(run) for run in runs[r]]
        if len(x) < v:      # the end stage's empty chunk: the embedding's (first) or the loss's (last)
            x = [0] + x if ends[r] == "first" else x + [0]
        sizes.append(tuple(x))
    return v, stage_layers, tuple(sizes)


def _runs(layers: list) -> list[list]:
    """Sorted layers as runs of consecutive ones."""
    out: list[list] = []
    for l in layers:
        if out and l == out[-1][-1] + 1:
            out[-1].append(l)
        else:
            out.append([l])
    return out


def chunk_of_layer(held: list, sizes) -> dict:
    """layer -> its chunk on a stage that holds the sorted layers `held` in chunks of `sizes` (an empty chunk
    holds none)."""
    out, i = {}, 0
    for c, n in enumerate(sizes):
        for l in held[i:i + n]:
            out[l] = c
        i += n
    return out
