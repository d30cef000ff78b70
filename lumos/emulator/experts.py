"""The ops of a mixture-of-experts MLP (`program.Program` mixes them in): router, shared expert, the routed
experts' GEMMs for the tokens each got, and the permutations around the exchange. Megatron-Core's MoELayer
(megatron/core/transformer/moe/); the rank draws the routing and times the exchange (`expert_parallel.py`).
"""

from __future__ import annotations

import numpy as np

from .kernel_specs import BF16, GROUPED_GEMM, KSpec, MoEStep, OpSpec


LAYOUT = {"fwd": "tn", "dgrad": "nn", "wgrad": "nt"}   # cuBLAS layouts of the three kinds of GEMM


def _mkn(kind: str, rows, k_in: int, n_out: int) -> tuple:
    """(m, k, n) of one expert's GEMM of `kind` with `rows` tokens: forward rows x k_in -> n_out, data gradient
    rows x n_out -> k_in, weight gradient k_in x rows -> n_out (its reduction over the rows)."""
    return {"fwd": (rows, k_in, n_out), "dgrad": (rows, n_out, k_in), "wgrad": (k_in, rows, n_out)}[kind]


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
        f = self.moe.ffn_hidden
        n = np.asarray(tokens, dtype=float)
        live = n > 0
        total = 0.0
        for kind, k_in, n_out in self._projections(f, backward):   # arrays over the experts, as `gemm` takes them
            m_, k_, n_ = _mkn(kind, np.where(live, n, 1), k_in, n_out)
            t = np.where(live, self.k.gemm_many(m_, n_, k_), 0.0).sum(axis=1)
            if self.grouped:
                t = np.maximum(t - np.maximum(live.sum(axis=1) - 1, 0) * self.k.c.gemm_fixed_us, 0.0)
            total = total + t
        return total + self._act_bytes(n.sum(axis=1), f, backward) / (self.k.hbm * self.k.c.mem_eff) \
            + self.k.c.elem_fixed_us

    def _projections(self, f: int, backward: bool) -> list:
        """(kind, k_in, n_out) of an expert MLP's GEMMs in launch order: forward FC1 (gate and up with SwiGLU), FC2;
        backward FC2's data and weight gradients, then FC1's."""
        proj = [(self.h, (2 if self.gated else 1) * f), (f, self.h)]
        if not backward:
            return [("fwd", k_in, n_out) for k_in, n_out in proj]
        return [(kind, k_in, n_out) for k_in, n_out in reversed(proj) for kind in ("dgrad", "wgrad")]

    def _act_bytes(self, rows, f: int, backward: bool):
        """Bytes the experts' activation moves for `rows` tokens (SwiGLU's SiLU x up, or GeLU; backward more)."""
        return ((10 if backward else 6) if self.gated else (6 if backward else 4)) * rows * f

    def _expert_mlp(self, tokens: list, f: int, backward: bool, grouped: bool, op: str) -> list:
        c = 2 if self.gated else 1
        total, L = sum(tokens), len(tokens)
        act = self.elem("aten::silu_backward" if backward else "aten::silu",
                        ("swiglu_bwd" if backward else "swiglu") if self.gated else
                        ("gelu_bwd" if backward else "gelu"), ((total, c * f),), self._act_bytes(total, f, backward))
        out = []
        for i, (kind, k_in, n_out) in enumerate(self._projections(f, backward)):
            m, k, n = _mkn(kind, total, k_in, n_out)
            dims = ((k_in, total), (total, n_out)) if kind == "wgrad" else ((m, k), (L, k, n))
            live = [_mkn(kind, r, k_in, n_out) for r in tokens if r > 0]   # an expert with no token: no GEMM
            if grouped:
                cost = sum(self.k.gemm(m, n, k) for m, k, n in live) - max(len(live) - 1, 0) * self.k.c.gemm_fixed_us
                out.append(OpSpec(op, dims, (BF16, BF16), (KSpec(GROUPED_GEMM, max(cost, 0.0)),), gemm=True,
                                  heavy=True))
            else:
                out += [self.mm(m, k, n, LAYOUT[kind]) for m, k, n in live]
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
