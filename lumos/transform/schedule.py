"""Megatron-LM's 1F1B pipeline schedules, as a list of actions per stage: non-interleaved and interleaved.

Non-interleaved: stage s of P with m micro-batches runs w = min(P - s - 1, m)
warm-up forwards, then m - w steady one-forward-one-backward pairs, then w
cool-down backwards. Every forward receives its input from stage s-1 and sends
its output to s+1; every backward receives the gradient from s+1 and sends one
to s-1. Exchanges are batched exactly where Megatron batches them
(send_forward_recv_backward, send_backward_recv_forward).

Interleaved (V model chunks per stage; megatron/core/pipeline_parallel/schedules.py,
forward_backward_pipelining_with_interleaving): chunk c of stage s is virtual stage
c * P + s, so the pipeline is a ring (the last stage feeds the first one's next
chunk); micro-batches run in groups of P, each group through every chunk in turn;
2 (P - s - 1) + (V - 1) P warm-up forwards, then forward-backward pairs with one
four-way exchange each, then the cool-down.
"""

from __future__ import annotations


class ScheduleError(ValueError):
    """A layout the asked pipeline schedule cannot run (what Megatron refuses)."""

# an exchange op: (kind, direction); send fwd -> s+1, recv fwd <- s-1, send bwd -> s-1, recv bwd <- s+1
SEND_FWD, RECV_FWD, SEND_BWD, RECV_BWD = ("send", "fwd"), ("recv", "fwd"), ("send", "bwd"), ("recv", "bwd")


def _p2p(stage: int, pp: int, *ops) -> list:
    keep = []
    for op in (SEND_FWD, RECV_BWD, SEND_BWD, RECV_FWD):   # issue order inside a batch
        if op not in ops:
            continue
        to_next = op in (SEND_FWD, RECV_BWD)
        if (to_next and stage == pp - 1) or (not to_next and stage == 0):
            continue
        keep.append(op)
    return [("p2p", tuple(keep))] if keep else []


def _ring(*ops) -> list:
    """A batch of the interleaved schedule: on a ring, every op is kept. The forward direction's pair
    comes first, then the backward's: each stream then meets its peers' in the same order (a send to the
    next stage before one to the previous, a receive from the previous before one from the next), which
    no cycle of waits around the ring can block."""
    keep = tuple(op for op in (SEND_FWD, RECV_FWD, SEND_BWD, RECV_BWD) if op in ops)
    return [("p2p", keep)] if keep else []


def interleaved(stage: int, pp: int, chunks: int, microbatches: int, overlap: bool = False) -> list[tuple]:
    """Actions of `stage` under the interleaved schedule: ('F', mb, chunk), ('B', mb, chunk),
    ('p2p', ops). Step k's micro-batch and chunk come from groups of `pp` micro-batches, each run
    through every chunk before the next group; backward k runs the same micro-batch through the chunks
    in reverse. A stage that a step's input comes from (the previous stage, wrapping around) sends it
    unless it holds the model's last chunk; the leading stage (first forward, last backward) receives
    only once the ring behind it has had pp - 1 steps to fill.

    `overlap` (Megatron's --overlap-p2p-communication, schedules.py `pp_post_forward` / `pp_post_backward`):
    the last warm-up step posts its forward exchange, then the first backward's receive apart, and each
    steady pair exchanges after its forward (send it, receive the next forward's input) and again after its
    backward, not once after both. Which step waits for which receive is the base's (`rebuild`)."""
    v, m = chunks, microbatches
    order = []
    for g in range(0, m, pp):
        order += [(g + i, c) for c in range(v) for i in range(min(pp, m - g))]
    total = m * v
    warm = min(2 * (pp - stage - 1) + (v - 1) * pp, total)
    first, last = stage == 0, stage == pp - 1

    def chunk_of(k: int, forward: bool) -> int:
        c = order[k][1]
        return c if forward else v - 1 - c

    def feeds(k: int, forward: bool) -> bool:
        """Whether the input of step k + 1 arrives in the exchange after step k."""
        leading = first if forward else last
        if not leading:
            return True
        return k >= pp - 1 and chunk_of(k - pp + 1, forward) != (v - 1 if forward else 0)

    def out_fwd(c: int) -> tuple:
        return () if last and c == v - 1 else (SEND_FWD,)

    def out_bwd(c: int) -> tuple:
        return () if first and c == 0 else (SEND_BWD,)

    acts: list[tuple] = [] if first else _ring(RECV_FWD)
    for k in range(warm):
        c = chunk_of(k, True)
        acts.append(("F", order[k][0], c))
        ops = out_fwd(c) + ((RECV_FWD,) if feeds(k, True) and k < total - 1 else ())
        if k == warm - 1 and warm < total and not last:
            ops += (RECV_BWD,)
        if overlap and RECV_BWD in ops:
            acts += _ring(*ops[:-1]) + _ring(RECV_BWD)
            continue
        acts += _ring(*ops)
    steady = total - warm
    for j in range(steady):
        k = warm + j
        cf, cb = chunk_of(k, True), chunk_of(j, False)
        fwd = out_fwd(cf) + ((RECV_FWD,) if feeds(k, True) and j < steady - 1 else ())
        bwd = out_bwd(cb) + ((RECV_BWD,) if feeds(j, False) else ())
        if overlap:
            acts += [("F", order[k][0], cf)] + _ring(*fwd) + [("B", order[j][0], cb)] + _ring(*bwd)
            continue
        acts += [("F", order[k][0], cf), ("B", order[j][0], cb)]
        acts += _ring(*(fwd + bwd))
    if not steady and not last:
        acts += _ring(RECV_BWD)
    for k in range(steady, total):
        c = chunk_of(k, False)
        acts.append(("B", order[k][0], c))
        acts += _ring(*(out_bwd(c) + ((RECV_BWD,) if feeds(k, False) and k < total - 1 else ())))
    return acts


def pipeline_schedule(stage: int, pp: int, microbatches: int, chunks: int = 1, overlap: bool = False) -> list[tuple]:
    """The stage's actions: non-interleaved 1F1B for one chunk per stage, interleaved for more (`overlap`:
    with Megatron's overlapped exchange)."""
    if chunks > 1:
        return interleaved(stage, pp, chunks, microbatches, overlap)
    return one_f_one_b(stage, pp, microbatches)


def stage_chunks(stage: int, split, chunks: int = 1) -> list[range]:
    """Layers of each model chunk of `stage`, given the layers of every stage (`split`), each chunk an equal
    share of its stage's (`chunk_ranges`)."""
    return chunk_ranges(stage, [[n // chunks] * chunks for n in split])


def chunk_ranges(stage: int, sizes) -> list[range]:
    """Layers of each model chunk of `stage`, given every stage's chunk sizes: chunk c holds virtual stage
    c * pp + s, whose layers follow those of every virtual stage before it (Megatron-Core's
    get_transformer_layer_offset); a chunk may hold none (Llama 3's embedding-only first chunk)."""
    pp = len(sizes)
    out = []
    for c, n in enumerate(sizes[stage]):
        first = sum(sizes[s][k] for s in range(pp) for k in range(len(sizes[s])) if k * pp + s < c * pp + stage)
        out.append(range(first, first + n))
    return out


def check_interleaved(pp: int, chunks: int, microbatches: int, split=None) -> None:
    """What Megatron refuses of an interleaved layout, refused here with the same reason (`split`: the layers
    of each stage, to be cut into equal chunks; None: the chunks are given)."""
    if chunks < 1:
        raise ScheduleError(f"model chunks per stage must be >= 1, got {chunks}")
    if chunks == 1:
        return
    if pp < 3:   # megatron/training/arguments.py asserts it where the exchange is batched (no p2p overlap)
        raise ScheduleError(f"{chunks} model chunks per stage interleave a pipeline of more than 2 stages (with "
                            f"Megatron's batched exchange, two stages would send both ways between the same two "
                            f"ranks in one batch); got {pp}")
    bad = [s for s, n in enumerate(split or ()) if n % chunks or n == 0]
    if bad:
        raise ScheduleError(f"{chunks} model chunks per stage must divide every stage's layers; stage {bad[0]} holds "
                            f"{split[bad[0]]} (layers per stage: {'/'.join(map(str, split))})")
    if microbatches % pp:
        raise ScheduleError(f"the interleaved schedule runs micro-batches in groups of the {pp} stages: "
                            f"{microbatches} micro-batches per iteration is not a multiple of {pp}")


def accounted_ends(chunk_layers) -> tuple[int, int] | None:
    """(embedding, loss): 1 where a chunked base's first chunk of the first stage / last chunk of the last
    stage holds one layer fewer than every other chunk, as Megatron-Core builds them when the embedding / the
    output and loss take a layer's place in the split (`account_for_embedding_in_pipeline_split`,
    `..._loss_in_...`: Llama 3 405B's layout); None where the chunks are not laid out so."""
    sizes = [list(c) for c in chunk_layers]
    if len(sizes) < 2:
        return None
    inner = {n for s, cs in enumerate(sizes) for c, n in enumerate(cs)
             if (s, c) not in ((0, 0), (len(sizes) - 1, len(cs) - 1))}
    if len(inner) != 1:
        return None
    k = inner.pop()
    ends = (k - sizes[0][0], k - sizes[-1][-1])
    return ends if set(ends) <= {0, 1} and any(ends) else None


def accounted_chunks(layers: int, pp: int, chunks: int, embedding: int, loss: int) -> list[list[int]]:
    """Per stage, the layers of each chunk when the embedding and the loss each take a layer's place in the
    split (megatron/core/transformer/transformer_block.py, `get_num_layers_to_build`): layers + embedding + loss
    over pp x chunks virtual stages, one fewer on the first (embedding) and the last (loss)."""
    slots = layers + embedding + loss
    if slots % (pp * chunks):
        raise ScheduleError(f"the base's embedding and loss each take a layer's place in the split (its first and last "
                            f"chunks hold one layer fewer): {layers} layers + {embedding + loss} do not split evenly "
                            f"over {pp} stages x {chunks} chunks (--first-stage-layers / --last-stage-layers set a "
                            "split of your own)")
    k = slots // (pp * chunks)
    out = [[k] * chunks for _ in range(pp)]
    out[0][0] -= embedding
    out[-1][-1] -= loss
    return out


def split_layers(layers: int, pp: int, first: int | None = None, last: int | None = None) -> list[int]:
    """Layers of each stage: `first` / `last` on the end stages where given (Megatron-Core's
    num_layers_in_first/last_pipeline_stage), the rest over the others, the earlier ones taking any remainder."""
    if pp < 2 and (first is not None or last is not None):
        raise ScheduleError("a first or last stage of its own needs at least 2 stages")
    fixed = {s: n for s, n in ((0, first), (pp - 1, last)) if n is not None}
    rest, others = layers - sum(fixed.values()), [s for s in range(pp) if s not in fixed]
    if any(n < 1 for n in fixed.values()) or (others and rest < len(others)) or (not others and rest):
        raise ScheduleError(f"{layers} layers do not split over {pp} stages with "
                            f"{first if first is not None else 'an even share'} on the first and "
                            f"{last if last is not None else 'an even share'} on the last")
    out = {**dict(zip(others, layers_per_stage(len(others), rest) if others else [])), **fixed}
    return [out[s] for s in range(pp)]


def one_f_one_b(stage: int, pp: int, microbatches: int) -> list[tuple]:
    """Actions of `stage`: ('F', mb), ('B', mb), ('p2p', ((kind, direction), ...))."""
    m = microbatches
    w = min(pp - stage - 1, m)
    rem = m - w
    out: list[tuple] = []
    for i in range(w):
        out += _p2p(stage, pp, RECV_FWD)
        out.append(("F", i))
        out += _p2p(stage, pp, SEND_FWD)
    if rem > 0:
        out += _p2p(stage, pp, RECV_FWD)
    for j in range(rem):
        out.append(("F", j + w))
        out += _p2p(stage, pp, SEND_FWD, RECV_BWD)
        out.append(("B", j))
        if j == rem - 1:
            out += _p2p(stage, pp, SEND_BWD)
        else:
            out += _p2p(stage, pp, SEND_BWD, RECV_FWD)
    for k in range(w):
        out += _p2p(stage, pp, RECV_BWD)
        out.append(("B", rem + k))
        out += _p2p(stage, pp, SEND_BWD)
    return out


def layers_of_stage(stage: int, pp: int, layers: int) -> range:
    """Layers spread evenly over stages (the first stages take the remainder)."""
    base, extra = divmod(layers, pp)
    start = stage * base + min(stage, extra)
    return range(start, start + base + (1 if stage < extra else 0))


def stage_split(pp: int, layers: int, base=()) -> list[int]:
    """Layers of each of `pp` stages: the base's own split (`base`) where it is one of `layers` over `pp` stages
    (an uneven or Llama-3 layout kept), else as even as they go (`layers_per_stage`)."""
    if len(base) == pp and sum(base) == layers:
        return list(base)
    return layers_per_stage(pp, layers)


def layers_per_stage(pp: int, layers: int) -> list[int]:
    """How many layers each of `pp` stages holds (`layers_of_stage`)."""
    return [len(layers_of_stage(s, pp, layers)) for s in range(pp)]
