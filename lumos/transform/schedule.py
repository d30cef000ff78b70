"""The non-interleaved 1F1B pipeline schedule (Megatron-LM), as a list of actions per stage.

Stage s of P with m micro-batches runs w = min(P - s - 1, m) warm-up forwards,
then m - w steady one-forward-one-backward pairs, then w cool-down backwards.
Every forward receives its input from stage s-1 and sends its output to s+1;
every backward receives the gradient from s+1 and sends one to s-1. Exchanges
are batched exactly where Megatron batches them (send_forward_recv_backward,
send_backward_recv_forward).
"""

from __future__ import annotations

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


def layers_per_stage(pp: int, layers: int) -> list[int]:
    """How many layers each of `pp` stages holds (`layers_of_stage`)."""
    return [len(layers_of_stage(s, pp, layers)) for s in range(pp)]
