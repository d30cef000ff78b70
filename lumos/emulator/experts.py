"""The ops of a mixture-of-experts MLP (`program.Program` mixes them in): router, shared expert, the routed
experts' GEMMs for the tokens each got, and the permutations around the exchange. Megatron-Core's MoELayer
(megatron/core/transformer/moe/); the rank draws the routing and times the exchange (`expert_parallel.py`).
"""

from __future__ import annotations

import numpy as np

from .kernel_specs import BF16, GROUPED_GEMM, KSpec, MoEStep, OpSpec


class ExpertOps:
    """Methods of `Program` for MoE layers (they use its shapes, GEMM and element-wise builders)."""

    # -- mixture-of-experts MLP (Megatron-Core's MoELayer: router, token dispatcher, experts) -----------
    def _moe_fwd(self) -> list:
        """Router (a GEMM to one logit per expert, softmax and top-k: megatron/core/transformer/moe/router.py),
        the shared expert (shared_experts.py), then the routed tokens' dispatch, experts and combine, whose
        work the rank draws per layer and micro-batch (`MoEStep`)."""
        Tm, h, e = self.Tm, self.h, self.moe.experts
        return [self.mm(Tm, h, e, "tn"),
                self.elem("aten::topk", "topk", ((Tm, e),), 8 * Tm * e),
                *self._shared_expert(False),
                MoEStep("dispatch"), MoEStep("experts"), MoEStep("combine")]

    def _moe_bwd(self) -> list:
        Tm, h, e = self.Tm, self.h, self.moe.experts
        return [MoEStep("combine", True), MoEStep("experts", True), MoEStep("dispatch", True),
                *self._shared_expert(True),
                self.elem("aten::_softmax_backward_data", "topk_bwd", ((Tm, e), (Tm, e)), 12 * Tm * e),
                self.mm(Tm, e, h, "nn"),                                       # router dgrad
                self.mm(e, Tm, h, "nt", dims=((e, Tm), (Tm, h)))]              # router wgrad

    def _shared_expert(self, backward: bool) -> list:
        """A dense MLP every token goes through beside the routed experts (DeepSeek-V3's shared expert),
        on the MoE's tokens, in the same stream (no --moe-shared-expert-overlap)."""
        fs = self.moe.shared_ffn_hidden
        if not fs:
            return []
        return self._expert_mlp([self.Tm], fs, backward, grouped=False, op="aten::mm")

    def expert_ops(self, tokens, backward: bool) -> list:
        """The rank's routed experts of one layer, given the tokens each of them received: one grouped GEMM per
        projection (`training.moe_grouped_gemm`), or Megatron-Core's SequentialMLP loop of one GEMM per
        expert (megatron/core/transformer/moe/experts.py)."""
        ops = self._expert_mlp([int(n) for n in tokens], self.moe.ffn_hidden, backward,
                               grouped=self.grouped, op="grouped_gemm::gmm")
        return list(self._finish(ops)) if self.coarse else ops

    def expert_us(self, tokens: np.ndarray, backward: bool) -> np.ndarray:
        """Noise-free GPU time of the routed experts of each rank of an expert-parallel group (`tokens`: ranks x
        local experts), the same sum as the kernels `expert_ops` launches; what the busiest rank's peers wait."""
        h, c, f = self.h, 2 if self.gated else 1, self.moe.ffn_hidden
        n = np.asarray(tokens, dtype=float)
        live = n > 0
        shapes = []   # (m, n, k) of KernelCosts.gemm per pass, as arrays over the experts
        for k_in, n_out in ((f, h), (h, c * f)) if backward else ((h, c * f), (f, h)):
            if backward:
                shapes += [(n, k_in, n_out), (k_in, n_out, n)]   # dgrad, wgrad
            else:
                shapes.append((n, n_out, k_in))
        total = 0.0
        for m_, n_, k_ in shapes:
            t = np.where(live, self.k.gemm_many(np.where(live, m_, 1), n_, np.where(live, k_, 1)), 0.0).sum(axis=1)
            if self.grouped:
                t = np.maximum(t - np.maximum(live.sum(axis=1) - 1, 0) * self.k.c.gemm_fixed_us, 0.0)
            total = total + t
        rows = n.sum(axis=1)
        act = ((10 if backward else 6) if self.gated else (6 if backward else 4)) * rows * f
        return total + act / (self.k.hbm * self.k.c.mem_eff) + self.k.c.elem_fixed_us

    def _expert_mlp(self, tokens: list, f: int, backward: bool, grouped: bool, op: str) -> list:
        h, c = self.h, 2 if self.gated else 1
        total = sum(tokens)
        proj = [(h, c * f), (f, h)]            # FC1 (gate and up with SwiGLU), FC2
        act_bytes = (10 if backward else 6) * total * f if self.gated else (6 if backward else 4) * total * f
        act = self.elem("aten::silu_backward" if backward else "aten::silu",
                        ("swiglu_bwd" if backward else "swiglu") if self.gated else
                        ("gelu_bwd" if backward else "gelu"), ((total, c * f),), act_bytes)
        passes = []   # (dims of the grouped op, (m, k, n, layout) per expert), in the order the pass runs them
        L = len(tokens)
        for k_in, n_out in (reversed(proj) if backward else proj):
            if backward:   # dgrad, then wgrad
                passes.append((((total, n_out), (L, n_out, k_in)), [(n, n_out, k_in, "nn") for n in tokens]))
                passes.append((((k_in, total), (total, n_out)), [(k_in, n, n_out, "nt") for n in tokens]))
            else:
                passes.append((((total, k_in), (L, k_in, n_out)), [(n, k_in, n_out, "tn") for n in tokens]))
        out = []
        for i, (dims, per_expert) in enumerate(passes):
            live = [g for g in per_expert if min(g[:3]) > 0]   # an expert that got no token runs no GEMM
            if grouped:
                cost = sum(self.k.gemm(m, n, k) for m, k, n, _ in live) - max(len(live) - 1, 0) * self.k.c.gemm_fixed_us
                out.append(OpSpec(op, dims, (BF16, BF16), (KSpec(GROUPED_GEMM, max(cost, 0.0)),), gemm=True, heavy=True))
            else:
                out += [self.mm(m, k, n, lay) for m, k, n, lay in live]
            if i == (1 if backward else 0):
                out.append(act)   # forward: after FC1; backward: after FC2's dgrad and wgrad
        return out

    def permute(self, choices: int, backward: bool, un: bool) -> OpSpec:
        """Tokens sorted by expert before the dispatch (permute) and put back in order, weighted by their
        router probabilities, after the combine (unpermute): Transformer Engine's fused moe_permute /
        moe_unpermute, read and write of each routed copy."""
        h = self.h
        name = ("aten::_moe_unpermute" if un else "aten::_moe_permute") + ("_backward" if backward else "")
        return self.elem(name, "unpermute" if un else "permute", ((choices, h),), 4 * choices * h)
