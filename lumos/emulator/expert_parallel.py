"""The mixture-of-experts side of a rank (`RankProgram` mixes it in): its expert-parallel group, the routing of
each (layer, micro-batch), the exchange of tokens and the experts' gradient buckets. Megatron-Core's MoE
(megatron/core/transformer/moe/) as `program.MoEStep` marks where it runs; docs/emulator.md says what is modelled.
"""

from __future__ import annotations

import numpy as np

from .engine import Thread, EP_STREAM, Comm
from .program import BF16, KSpec, MoEStep
from .routing import Routing

COMPUTE_S, DP_S = 7, 24   # rank.COMPUTE_S, rank.DP_S


class ExpertParallel:
    """Methods of `RankProgram` for MoE layers (they use its threads, launches and collectives)."""

    def _init_moe(self, s) -> None:
        """Mixture-of-experts: the rank's expert-parallel group and place in it, the routing draws, and the
        experts' gradients' own buckets (reduced over the expert data-parallel group)."""
        self.moe = s.model.moe
        self._moe_at = (0, 0)   # (first layer, micro-batch) of the block being run
        self.expert_ready = self.expert_launched = 0.0
        if self.moe is None:
            return
        self.ep = s.ep
        self.ep_group = self.topo.ep_group(self.rank) if s.ep > 1 else None
        self.ep_rank = self.ep_group.ranks.index(self.rank) if self.ep_group else 0
        self.ep_index = self.topo.ep_index(self.rank)
        self.routing = Routing(self.moe, self.p.Tm, s.ep, s.seed)
        self.dispatcher = s.training.moe_dispatcher
        # the counts reach the host before the exchange unless every expert's input is padded to capacity
        self.moe_sync = not self.moe.pad_to_capacity
        self.edp_group = self.topo.edp_group(self.rank) if self.topo.separate_edp() else None

    def _run_syncing(self, th: Thread, steps):
        """`run_steps` of a forward block, whose MoE dispatches first bring the router's counts to the host."""
        start = 0
        for j, st in enumerate(steps):
            if isinstance(st, MoEStep) and st.part == "dispatch" and not st.backward:
                self.run_steps(th, steps[start:j])
                yield from self._moe_counts(th)
                start = j
        self.run_steps(th, steps[start:])

    # -- mixture-of-experts ----------------------------------------------------------
    def _moe_counts(self, th: Thread):
        """The tokens each expert gets, made known to the host before the exchange: gathered over the expert-
        parallel group, copied to the host and waited for (Megatron-Core's MoEAlltoAllTokenDispatcher,
        megatron/core/transformer/moe/token_dispatcher.py, preprocess and _maybe_dtoh_and_synchronize: the
        all-to-all's split sizes and the experts' GEMMs need them on the CPU). DeepEP's notify_dispatch
        kernel exchanges them and its host waits on a pinned counter (DeepEP csrc/deep_ep.cpp)."""
        e = self.moe.experts
        if self.ep > 1 and self.dispatcher == "deepep":
            self._deepep(th, "notify_dispatch", e * self.ep, 1)
        elif self.ep > 1:
            comm = self._comm(self.ep_group, "allgather", e * self.ep, name="_allgather_base")
            self._wait_op(th, [self._comm_op(th, EP_STREAM, comm, "c10d::_allgather_base_")])
        nbytes = 8 * e * self.ep
        self.op_begin(th, "aten::to", {"Input Dims": [[e * self.ep]], "Input type": ["long int"]})
        self.launch(th, COMPUTE_S, KSpec("Memcpy DtoH (Device -> Pinned)", self.emu.kcost.d2h(nbytes),
                                         cat="gpu_memcpy", runtime="cudaMemcpyAsync", nbytes=nbytes, compute=False))
        self.op_end(th)
        yield from self.stream_sync(th, COMPUTE_S)

    def _moe_step(self, th: Thread, st: MoEStep) -> None:
        """One MoE part of the layers of the block being run, with this (layer, micro-batch)'s routing."""
        first, mb = self._moe_at
        draws = [self.routing.draw(self.ep_index, first + k, mb) for k in range(st.layers)]
        q, ep = self.ep_rank, self.ep
        if st.part == "experts":
            for d in draws:
                self.run_steps(th, self.p.expert_ops(d.local(q, ep), st.backward), built_now=True)
            return
        dispatch = st.part == "dispatch"
        # forward: permute, dispatch ... combine, unpermute; backward the mirror image
        perm = self.p.permute(sum(int(d.sent()[q]) for d in draws), st.backward, un=not dispatch)
        before = dispatch != st.backward
        if before:
            self.run_steps(th, [perm], built_now=True)
        if ep > 1:
            lead = 0.0
            if not before:   # after the experts: the group waits for the rank whose experts had the most tokens
                t = sum(self.p.expert_us(np.stack([d.local(r, ep) for r in range(ep)]), st.backward)
                        for d in draws)
                lead = float(t.max() - t[q])
            self._exchange(th, draws, to_experts=before, lead=lead)
        if not before:
            self.run_steps(th, [perm], built_now=True)

    def _exchange(self, th: Thread, draws: list, to_experts: bool, lead: float = 0.0) -> None:
        """Tokens to their experts' ranks, or the experts' outputs back, over the expert-parallel group:
        an all-to-all(v) (MoEAlltoAllTokenDispatcher), an all-gather out and a reduce-scatter back
        (MoEAllGatherTokenDispatcher, every rank's tokens to every rank), or DeepEP's kernels
        (MoEFlexTokenDispatcher over megatron/core/transformer/moe/fused_a2a.py)."""
        h, ep, n = self.p.h, self.ep, len(draws)
        busiest = sum(d.busiest(ep) for d in draws) / n   # the exchange ends with its busiest rank's transfers
        if self.dispatcher == "deepep":
            self._deepep(th, "dispatch" if to_experts else "combine", int(busiest * h), n, lead)
            return
        if self.dispatcher == "allgather":
            kind = "allgather" if to_experts else "reduce_scatter"
            comm = self._comm(self.ep_group, kind, self.p.Tm * h * ep, repeat=n)
            comm.lead = lead
            name = "c10d::_allgather_base_" if to_experts else "c10d::_reduce_scatter_base_"
            self._wait_op(th, [self._comm_op(th, EP_STREAM, comm, name)])
            return
        d, q, per = draws[0], self.ep_rank, self.moe.experts // ep
        out_rows = d.counts[q].reshape(ep, per).sum(axis=1)             # to each peer's experts
        in_rows = d.counts[:, q * per:(q + 1) * per].sum(axis=1)        # from each peer, to ours
        if not to_experts:
            out_rows, in_rows = in_rows, out_rows
        comm = self._comm(self.ep_group, "alltoall", int(busiest * h), repeat=n, name="all_to_allv")
        comm.args.update({"In msg nelems": int(out_rows.sum()) * h, "Out msg nelems": int(in_rows.sum()) * h,
                          "In split size": str(out_rows.tolist()), "Out split size": str(in_rows.tolist())})
        comm.lead = lead
        self._wait_op(th, [self._comm_op(th, EP_STREAM, comm, "c10d::alltoall_base_")])

    def _deepep(self, th: Thread, what: str, nelems: int, repeat: int, lead: float = 0.0) -> None:
        """A DeepEP kernel (github.com/deepseek-ai/DeepEP, csrc/kernels/intranode.cu and internode.cu): launched
        by its own Buffer method, not through c10d (no collective op around it), on the communication stream,
        the compute stream waiting on its event. It moves the tokens itself, over NVLink inside a host and
        RDMA across hosts, so it starts without NCCL's kernel overhead."""
        where = "internode" if self.ep_group.hosts > 1 else "intranode"
        self.op_begin(th, f"deep_ep::Buffer::{where}_{'combine' if what == 'combine' else 'dispatch'}",
                      {"Input Dims": [[nelems]], "Input type": [BF16]})
        self.wait(th, EP_STREAM, self.record(th, COMPUTE_S))
        c = self._comm(self.ep_group, "alltoall", nelems, repeat=repeat)
        comm = Comm(c.group, "deepep", c.nbytes, c.key, {}, repeat=repeat)
        comm.lead = lead
        name = f"void deep_ep::{where}::{what}<{min(self.ep, 8)}>(void*, int const*, int)"
        self.launch(th, EP_STREAM, KSpec(name, 0.0), comm)
        self.wait(th, COMPUTE_S, self.record(th, EP_STREAM))
        self.op_end(th)

    def _expert_grads_ready(self, th: Thread, params: float, flush: bool = False) -> None:
        """The experts' gradients: with a group of their own (`Topology.separate_edp`), bucketed and all-reduced
        over the expert data-parallel ranks (Megatron-Core keeps separate expert-parallel gradient buffers,
        megatron/core/distributed/distributed_data_parallel.py); otherwise they join the dense buckets."""
        if self.edp_group is None:
            self._grads_ready(th, params, flush)
            return
        self.expert_ready += params
        if not self.after_backward:
            self._launch_expert_buckets(th, flush)

    def _launch_expert_buckets(self, th: Thread, flush: bool) -> None:
        for n in self.due_buckets(self.expert_ready, self.expert_launched, flush):
            self.expert_launched += n
            if len(self.edp_group.ranks) > 1:
                comm = self._comm(self.edp_group, "allreduce", int(n))
                self.dp_done.append(self._comm_op(th, DP_S, comm, "c10d::allreduce_"))
