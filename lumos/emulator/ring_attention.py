"""Context parallelism's ring form (`training.cp_form: ring`): a layer's attention over its CP group in CP steps.

Modelled on Transformer Engine's `AttnFuncWithCPAndKVP2P` (Megatron-Core's default `--cp-comm-type p2p`;
transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py, read at d0067d0:
`flash_attn_p2p_communicate`, `cp_p2p_fwd_prepare_qkv`, `cp_p2p_bwd_prepare_qkv`, the forward's and the
backward's step loops). PyTorch's context parallelism, which torchtitan uses (torch/distributed/tensor/experimental/
_context_parallel/_attention.py: `_templated_ring_attention`, `_templated_ring_attention_backward`,
`_is_causal_behavior`), runs the same steps over the same load-balanced sections; it passes the key/value chunks
around the ring with rotate method `alltoall` (its default, `allgather`, gathers them once) and the gradients always.

Each rank holds two of the sequence's 2 CP chunks of c = s / (2 CP) tokens, chunk r and 2 CP - 1 - r (the
causal load balance), as its queries and its own keys and values. Forward, step i (0 .. CP-1): the attention
stream waits for the exchange of step i - 1 (`req.wait()`), posts the exchange of step i (the key/value chunk it
holds to the next rank of the ring, the next one from the previous rank; not after the last step), then runs
one flash-attention kernel on the chunk it holds: step 0 the diagonal (its 2c queries on its own 2c keys,
causal), then, for i <= r, the lower triangle (2c queries on the first c keys), else the upper one (the second
c queries on all 2c keys); each is half of a 2c x 2c tile, so the steps cost alike. After each step's kernel
the softmax statistics of the step before are merged, and after the loop each step's output is corrected
into the result. Backward (keys and values travel the other way): step i posts the exchange of the key/value
chunk (step 0), of it and the key/value gradients gathered so far (middle steps, twice the bytes), or of the
gradients alone (the last step), runs the step's flash backward (the diagonal last), adds its query gradient,
waits for the exchange and adds its key/value gradients into the received ones.

Bytes: a key/value chunk is 2 x (s / CP) x (KV heads / TP) x head dim x micro-batch BF16 elements. TE batches
the send and the receive (`batch_isend_irecv`) at CP 2 on Hopper and Ampere, else posts `isend` and `irecv`
one after the other (even ranks send first); the emulator launches the send on the CP stream (44) and the
receive on a stream of its own (46), each meeting its partner as a pipeline send/recv does, over the pair's
own communicator (ProcessGroupNCCL's point-to-point communicators) but named as TE calls it, on the CP group.

Not as TE: TE alternates the forward steps' kernels between the current stream and a second compute stream
(`cp_stream`, against the flash kernel's tail wave); here they run one after another on the compute stream,
as the emulated device runs concurrent compute kernels each at full speed (two steps' kernels would overlap
whole). At coarse granularity a step's element-wise kernels fold into its flash kernel; at `stage`
granularity a block's layers run their rings together (each kernel n layers long, each exchange n calls).
"""

from __future__ import annotations

from dataclasses import dataclass

from .engine import CP_RECV_STREAM, CP_STREAM, Thread
from .kernel_specs import BF16, FLASH_BWD, FLASH_FWD, CPRing, KSpec, OpSpec, folded

LSE_CORRECTION = "triton_poi_fused_flash_attn_fwd_softmax_lse_correction_0"
OUT_CORRECTION = "triton_poi_fused_flash_attn_fwd_out_correction_0"


def section(i: int, r: int, cp: int, backward: bool) -> str:
    """Which part of the causal tile rank `r`'s step `i` computes (TE's `section`; PyTorch's `_is_causal_behavior`
    with load balance): forward the diagonal first, backward last (its keys and values travel the other way)."""
    if backward:
        return "diagonal" if i == cp - 1 else ("lower" if i >= cp - r - 1 else "upper")
    return "diagonal" if i == 0 else ("lower" if i <= r else "upper")


@dataclass(frozen=True)
class RingStep:
    nelems: int          # elements the step's exchange sends (0: none)
    ops: tuple           # on the compute stream after the exchange is posted
    post: tuple = ()     # backward: after waiting for the exchange (the key/value gradients' update)


@dataclass(frozen=True)
class RingPlan:
    steps: tuple
    tail: tuple          # forward: the last statistics merge and the outputs' corrections


class RingOps:
    """Methods of `Program` for the ring form (they use its shapes, costs and element-wise builders)."""

    def ring_plan(self, backward: bool, r: int, layers: int = 1) -> RingPlan:
        """The steps of rank `r` (its place in the CP group) for `layers` layers run together."""
        cache = self.__dict__.setdefault("_ring_plans", {})
        key = (backward, r, layers)
        if key not in cache:
            cache[key] = self._ring_plan(backward, r, layers)
        return cache[key]

    def _ring_plan(self, backward: bool, r: int, n: int) -> RingPlan:
        cp, b, a, d, kvh = self.cp, self.b, self.heads // self.t, self.d, self.kv // self.t
        c = self.s // 2                       # one of the 2 cp chunks
        chunk = 2 * self.s * kvh * d * b       # a rank's keys and values (elements)
        fixed = self.k.c.gemm_fixed_us
        us = (self.k.attention(b, self.s_full, a, d, backward) - fixed) / (cp * cp) + fixed   # each step alike
        steps = []
        for i in range(cp):
            sec = section(i, r, cp, backward)
            q, k = (2 * c, 2 * c) if sec == "diagonal" else ((2 * c, c) if sec == "lower" else (c, 2 * c))
            qd, kd = (b, q, a, d), (b, k, kvh, d)
            if backward:
                att = OpSpec("aten::_flash_attention_backward", (qd, qd, kd, kd, qd), (BF16,) * 5,
                             (KSpec(self._ring_kernel(True), us),), heavy=True)
                dq = self.elem("aten::add_", "add", (qd, qd), 6 * b * q * a * d)   # dq += the step's (BF16)
                # dK += the step's, dV += the step's: over the keys the step used (the lower triangle's first chunk)
                dkv = tuple(self.elem("aten::add_", "add", (kd, kd), 6 * b * k * kvh * d) for _ in range(2))
                sends = chunk if i in (0, cp - 1) else 2 * chunk
                steps.append(self._ring_step(RingStep(sends, (att, dq), dkv), n))
            else:
                att = OpSpec("aten::_flash_attention_forward", (qd, kd, kd), (BF16,) * 3,
                             (KSpec(self._ring_kernel(False), us),), heavy=True)
                # step i - 1's statistics merged after step i's kernel (an upper triangle's into the second half)
                merge = (self._lse_merge(b, a, self._queries(i - 1, r, c)),) if i > 0 else ()
                steps.append(self._ring_step(RingStep(chunk if i < cp - 1 else 0, (att, *merge)), n))
        tail = ()
        if not backward:
            tail = (self._lse_merge(b, a, self._queries(cp - 1, r, c)),) + tuple(
                self._out_correction(b, a, d, self._queries(i, r, c)) for i in range(cp))
            tail = self._ring_fold(tail, n)
        return RingPlan(tuple(steps), tail)

    @staticmethod
    def _ring_kernel(backward: bool) -> str:
        return FLASH_BWD if backward else FLASH_FWD

    def _queries(self, i: int, r: int, c: int) -> int:
        """Queries of rank `r`'s forward step `i`: the second chunk alone in an upper triangle."""
        return c if section(i, r, self.cp, False) == "upper" else 2 * c

    def _lse_merge(self, b: int, a: int, q: int) -> OpSpec:
        """flash_attn_fwd_softmax_lse_correction (a compiled element-wise function): the running log-sum-exp
        (FP32, b x heads x queries) merged with a step's."""
        ks = KSpec(LSE_CORRECTION, self.k.elementwise(12.0 * b * a * q))
        return OpSpec("flash_attn_fwd_softmax_lse_correction", ((b, a, q), (b, a, q)), ("float", "float"), (ks,))

    def _out_correction(self, b: int, a: int, d: int, q: int) -> OpSpec:
        """flash_attn_fwd_out_correction: a step's output scaled by its statistics and added into the result."""
        ks = KSpec(OUT_CORRECTION, self.k.elementwise(6.0 * b * q * a * d))
        return OpSpec("flash_attn_fwd_out_correction", ((b, q, a, d), (b, q, a, d)), (BF16, BF16), (ks,))

    def _ring_step(self, step: RingStep, n: int) -> RingStep:
        """At coarse granularity a step's element-wise kernels fold into its flash kernel (the backward's
        gradient update stays after the wait it needs); `n` layers' steps as one."""
        ops, post = step.ops, step.post
        if self.coarse:
            att = ops[0]
            ops = (OpSpec(att.name, att.dims, att.types, (folded([k for o in ops for k in o.kernels], att.kernels[0]),),
                          heavy=True),)
        return RingStep(step.nelems, self._ring_fold(ops, n), self._ring_fold(post, n))

    def _ring_fold(self, ops: tuple, n: int) -> tuple:
        if n == 1:
            return tuple(ops)
        return tuple(OpSpec(o.name, o.dims, o.types, (folded(list(o.kernels), o.kernels[0], n),), o.gemm, o.heavy)
                     for o in ops)


class RingAttention:
    """Methods of `RankProgram` for the ring form (they use its threads, launches and p2p calls)."""

    def _cp_ring(self, th: Thread, st: CPRing) -> None:
        group = self.cp_group
        cp, r = len(group.ranks), group.ranks.index(self.rank)
        plan = self.p.ring_plan(st.backward, r, st.layers)
        nxt, prv = group.ranks[(r + 1) % cp], group.ranks[(r - 1) % cp]
        dst, src = (prv, nxt) if st.backward else (nxt, prv)   # backward: the chunks travel the other way
        ends: list = []
        for step in plan.steps:
            if ends:   # req.wait() at the top of each step (backward: already waited at the end of the last one)
                self._wait_op(th, ends)
            ends = self._ring_exchange(th, step.nelems, dst, src, r, cp, st.layers) if step.nelems else []
            self.run_steps(th, step.ops)
            if st.backward:
                self._wait_op(th, ends)
                self.run_steps(th, step.post)
        self.run_steps(th, plan.tail)

    def _ring_exchange(self, th: Thread, nelems: int, dst: int, src: int, r: int, cp: int, layers: int) -> list:
        """One step's send of `nelems` to `dst` and receive from `src`: TE's flash_attn_p2p_communicate, batched
        at CP 2 (`batch_isend_irecv`), else isend / irecv in the rank's order."""
        calls = [("send", dst, self.rank, dst, CP_STREAM), ("recv", src, src, self.rank, CP_RECV_STREAM)]
        if r % 2:
            calls.reverse()
        batched = cp == 2
        if batched:
            self.op_begin(th, "c10d::batch_isend_irecv", {"Input Dims": [[]], "Input type": [""]})
        ends = []
        g = self.cp_group
        for kind, peer, a, b, sid in calls:
            comm = self._comm(self.topo.cp_channel(self.rank, peer), kind, nelems, a, b, repeat=layers)
            comm.args.update({"Group size": len(g.ranks), "Process Group Name": g.name,
                              "Process Group Description": f"{g.kind}_group", "Process Group Ranks": g.ranks_str})
            ends.append(self._comm_op(th, sid, comm, "c10d::send" if kind == "send" else "c10d::recv_"))
        if batched:
            self.op_end(th)
        return ends
