"""Megatron's overlapped pipeline exchange for the interleaved schedule (`training.overlap_p2p: true`,
Megatron-LM `--overlap-p2p-communication`, the default of its interleaved runs today).

Modelled on Megatron-LM (read at d98e8a6) `megatron/core/pipeline_parallel/schedules.py`,
`forward_backward_pipelining_with_interleaving` with `config.overlap_p2p_comm` (and without
`overlap_p2p_comm_warmup_flush`, its default), and `p2p_communication.py` (`_communicate`, `_p2p_ops`):

- the exchange is not batched (`batch_p2p_comm = not overlap_p2p_comm`, megatron/training/argument_utils.py):
  each `isend` / `irecv` is its own c10d call, even pipeline ranks posting send-next, recv-prev, send-prev,
  recv-next, odd ones recv-prev, send-next, recv-next, send-prev (`_p2p_ops`); nothing synchronizes the
  device after it (`batch_p2p_sync` applies to batched calls only), so the host never blocks on a pipeline
  exchange;
- warm-up and cool-down exchange as before, each call waited right after it is posted (`wait_on_reqs`): the
  compute stream waits for the kernels (`Work.wait()` of NCCL is a stream wait, not a host block);
- in the steady state, after a forward (`pp_post_forward`) the send of its output and the receive of the next
  forward's input are posted and left running; the send is waited at once (Megatron's training sets
  `deallocate_pipeline_outputs`, and the output is freed only once its send is done), the receive only right
  before the forward that reads it (`pp_pre_forward`); after a backward (`pp_post_backward`) the send of its
  input gradient and the receive of the next backward's output gradient are posted, the receive waited right
  before that backward (`pp_pre_backward`), the send when the next one is posted (or at the end of cool-down);
- the last warm-up step posts the first backward's receive without waiting for it (`send_backward_recv_backward`
  with `overlap_p2p_comm=True`).

So a receive's kernels run on their own stream beside the compute of the current micro-batch, where the batched
form's `torch.cuda.synchronize` holds the host until every kernel of the exchange is done:

```
batched:    F(k) | send+recv ... sync | F(k+1)
overlapped: F(k) | send  B(j) ............ | F(k+1)
                   recv(k+1) ~~~~~~~~~~~~~~^ (the wait, on the compute stream)
```

Streams are the batched interleaved form's: each direction's sends and receives on streams of their own
(rank.SEND_S / RECV_S forward, SEND_BWD_S / RECV_BWD_S backward), which is what lets a receive posted early
run beside a send of the other direction.
"""

from __future__ import annotations

# the pipeline's p2p streams (rank.py imports them): forward sends and receives, backward sends and receives
SEND_S, RECV_S, SEND_BWD_S, RECV_BWD_S = 28, 32, 29, 33
# (call, direction) in Megatron's `_p2p_ops` order for an even and an odd pipeline rank
EVEN_ORDER = ("send_next", "recv_prev", "send_prev", "recv_next")
ODD_ORDER = ("recv_prev", "send_next", "recv_next", "send_prev")


class OverlappedPipeline:
    """Mixin of `rank.RankProgram`: the interleaved schedule with Megatron's p2p overlap."""

    def p2p_async(self, send_fwd=False, recv_fwd=False, send_bwd=False, recv_bwd=False) -> dict:
        """Posts separate isend / irecv calls (no batch, no synchronize); returns the end record of each call
        by its Megatron handle name (send_next, recv_prev, send_prev, recv_next)."""
        th, topo = self.main, self.topo
        prev = topo.rank((self.stage - 1) % self.pp, self.dpi, self.tpi)
        nxt = topo.rank((self.stage + 1) % self.pp, self.dpi, self.tpi)
        want = {"send_next": (send_fwd, "send", nxt, self.rank, nxt, SEND_S),
                "recv_prev": (recv_fwd, "recv", prev, prev, self.rank, RECV_S),
                "send_prev": (send_bwd, "send", prev, self.rank, prev, SEND_BWD_S),
                "recv_next": (recv_bwd, "recv", nxt, nxt, self.rank, RECV_BWD_S)}
        ends = {}
        for name in (EVEN_ORDER if self.stage % 2 == 0 else ODD_ORDER):
            on, kind, peer, src, dst, sid = want[name]
            if not on:
                continue
            comm = self._comm(topo.pp_channel(self.rank, peer), kind, self.act_elems, src, dst)
            ends[name] = self._comm_op(th, sid, comm, "c10d::send" if kind == "send" else "c10d::recv_")
        return ends

    def p2p_waited(self, **calls) -> None:
        """`_communicate` with `wait_on_reqs`: the calls posted, then every one waited by the compute stream."""
        ends = self.p2p_async(**calls)
        if ends:
            self._wait_op(self.main, list(ends.values()))

    def _await(self, pending: list) -> None:
        """`handle.wait()` of the oldest pending receive, if any (Megatron pops its handle lists in order)."""
        if pending:
            self._wait_op(self.main, [pending.pop(0)])

    def _interleaved_overlap(self, chunk, receives, sends_fwd, sends_bwd, table, warm: int, rem: int, total: int):
        """The schedule of `rank.RankProgram._interleaved` (same table, warm-up count and receive rule) with
        the steady state's exchanges posted early and waited late."""
        recv_prev, recv_next = [], []   # pending receive handles (recv_prev_wait_handles, recv_next_wait_handles)
        send_prev = None                # send_prev_wait_handle: waited when the next one is posted
        if not self.is_first:
            self.p2p_waited(recv_fwd=True)
        for k in range(warm):
            c = chunk(k, True)
            yield from self.forward(table[k][0], c)
            self.p2p_waited(send_fwd=sends_fwd(c), recv_fwd=receives(k, True) and k != total - 1)
            if k == warm - 1 and rem:   # the first backward's receive, posted and left running
                recv_next += list(self.p2p_async(recv_bwd=not self.is_last).values())
        for k in range(rem):
            fk = k + warm
            cf, cb = chunk(fk, True), chunk(k, False)
            if not (self.is_first and cf == 0):   # pp_pre_forward
                self._await(recv_prev)
            yield from self.forward(table[fk][0], cf)
            ends = self.p2p_async(send_fwd=sends_fwd(cf), recv_fwd=receives(fk, True) and k != rem - 1)
            if "send_next" in ends:   # deallocate_pipeline_outputs: the output is freed once its send is done
                self._wait_op(self.main, [ends["send_next"]])
            if "recv_prev" in ends:
                recv_prev.append(ends["recv_prev"])
            if not (self.is_last and cb == self.vp - 1):   # pp_pre_backward
                self._await(recv_next)
            self.backward(table[k][0], cb)
            ends = self.p2p_async(send_bwd=sends_bwd(cb), recv_bwd=receives(k, False))
            if send_prev is not None:
                self._wait_op(self.main, [send_prev])
            send_prev = ends.get("send_prev")
            if "recv_next" in ends:
                recv_next.append(ends["recv_next"])
        if not rem and not self.is_last:
            self.p2p_waited(recv_bwd=True)
        for k in range(rem, total):
            c = chunk(k, False)
            if not (self.is_last and c == self.vp - 1) and k != 0:
                self._await(recv_next)
            self.backward(table[k][0], c)
            self.p2p_waited(send_bwd=sends_bwd(c), recv_bwd=receives(k, False) and k != total - 1)
        if send_prev is not None:
            self._wait_op(self.main, [send_prev])
        if recv_prev or recv_next:   # Megatron asserts the handle lists are empty at the end of a step
            raise RuntimeError(f"rank {self.rank}: {len(recv_prev)} forward and {len(recv_next)} backward receives "
                               "never waited (overlapped interleaved schedule)")
