"""What one rank runs: the ops of a transformer layer, embedding and loss head, with shapes.

Megatron-LM + Transformer Engine granularity: per layer forward ~11 compute kernels
and 2 tensor-parallel all-reduces (after the row-parallel attention projection and
FC2); backward ~20 kernels and 2 all-reduces (after the column-parallel QKV and
FC1 dgrad, overlapped with their wgrad GEMMs). Durations here are noise-free.
"""

from __future__ import annotations

from dataclasses import replace

from .costs import KernelCosts
from .experts import ExpertOps
from .kernel_specs import (BF16, FLASH_BWD, FLASH_FWD, GROUPED_GEMM, CPComm, CPRing, KSpec, MoEStep,  # noqa: F401
                           OpSpec, TPAllReduce, TPWait, folded)
from .ring_attention import RingOps


def _gemm_name(m: int, n: int, layout: str, arch: str = "hopper") -> str:
    """cuBLAS kernel names as the profiler shows them on Hopper (sm90) and Ampere (sm80)."""
    if arch == "ampere":
        tile = "256x128" if n >= 256 and m >= 128 else "128x128"
        return f"ampere_bf16_s16816gemm_bf16_{tile}_ldg8_f2f_stages_64x3_{layout}"
    tile = "128x256x64" if n >= 256 and m >= 128 else "128x128x64"
    return (f"sm90_xmma_gemm_bf16bf16_bf16f32_f32_{layout}_n_tilesize{tile}_warpgroupsize2x1x1_"
            f"execute_segment_k_off_kernel__5x_cublas")


def is_gemm_kernel(name: str) -> bool:
    return name.startswith(("sm90_xmma_gemm", "ampere_bf16_s16816gemm")) or name == GROUPED_GEMM


ELEM = {
    "layer_norm": "void transformer_engine::normalization::ln_fwd_tuned_kernel<__nv_bfloat16, __nv_bfloat16, float, 6144>(transformer_engine::normalization::FwdParams)",
    "layer_norm_bwd": "void transformer_engine::normalization::ln_bwd_tuned_kernel<__nv_bfloat16, __nv_bfloat16, float, 6144>(transformer_engine::normalization::BwdParams)",
    "copy": "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#8}::operator()() const::{lambda(c10::BFloat16)#1}> >(int, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#8}::operator()() const::{lambda(c10::BFloat16)#1}>)",
    "bda": "void megatron::fused_kernels::bias_dropout_add_fused_kernel<c10::BFloat16>(c10::BFloat16*, c10::BFloat16 const*, c10::BFloat16 const*, float, long)",
    "gelu": "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2> >(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2>)",
    "gelu_bwd": "void at::native::vectorized_elementwise_kernel<4, at::native::GeluBackwardCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16, c10::BFloat16)#1}, at::detail::Array<char*, 3> >(int, at::native::GeluBackwardCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16, c10::BFloat16)#1}, at::detail::Array<char*, 3>)",
    "add": "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3>)",
    "mul": "void at::native::vectorized_elementwise_kernel<4, at::native::binary_internal::MulFunctor<c10::BFloat16>, at::detail::Array<char*, 3> >(int, at::native::binary_internal::MulFunctor<c10::BFloat16>, at::detail::Array<char*, 3>)",
    "embedding": "void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, true>(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, at::cuda::detail::TensorInfo<c10::BFloat16 const, unsigned int>, at::cuda::detail::TensorInfo<long const, unsigned int>, int, int, unsigned int, unsigned int, long)",
    "embedding_bwd": "void at::native::(anonymous namespace)::compute_grad_weight<c10::BFloat16, float>(long const*, c10::BFloat16 const*, long const*, long, long, long, long, long, at::GenericPackedTensorAccessor<float, 1, at::DefaultPtrTraits, long>)",
    "ce": "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, c10::BFloat16, float, c10::BFloat16, at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(c10::BFloat16*, c10::BFloat16 const*, int)",
    "ce_bwd": "void at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, c10::BFloat16, float, c10::BFloat16, at::native::(anonymous namespace)::LogSoftMaxBackwardEpilogue>(c10::BFloat16*, c10::BFloat16 const*, c10::BFloat16 const*, long)",
    "reduce": "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MaxOps<float>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::MaxOps<float>, unsigned int, float, 4>)",
    "l2norm": "void multi_tensor_apply_kernel<TensorListMetadata<1>, L2NormFunctor<float>, float*, float*, int*, bool, int>(long, int volatile*, TensorListMetadata<1>, L2NormFunctor<float>, float*, float*, int*, bool, int)",
    "rms_norm": "void transformer_engine::normalization::rmsnorm_fwd_tuned_kernel<__nv_bfloat16, __nv_bfloat16, float, 4096>(transformer_engine::normalization::FwdParams)",
    "rms_norm_bwd": "void transformer_engine::normalization::rmsnorm_bwd_tuned_kernel<__nv_bfloat16, __nv_bfloat16, float, 4096>(transformer_engine::normalization::BwdParams)",
    "rope": "void transformer_engine::fused_rope_forward_kernel<__nv_bfloat16, __nv_bfloat16>(__nv_bfloat16 const*, int const*, float const*, __nv_bfloat16*, bool, int, int, int, int, int, int, int, int, int, int, int)",
    "rope_bwd": "void transformer_engine::fused_rope_backward_kernel<__nv_bfloat16, __nv_bfloat16>(__nv_bfloat16 const*, int const*, float const*, __nv_bfloat16*, bool, int, int, int, int, int, int, int, int, int, int, int)",
    "swiglu": "void transformer_engine::act_and_mul_kernel<__nv_bfloat16, silu>(__nv_bfloat16 const*, __nv_bfloat16*, unsigned long)",
    "swiglu_bwd": "void transformer_engine::dact_and_mul_kernel<__nv_bfloat16, silu, dsilu>(__nv_bfloat16 const*, __nv_bfloat16 const*, __nv_bfloat16*, unsigned long)",
    "topk": "void at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>(at::cuda::detail::TensorInfo<float const, unsigned int>, unsigned int, unsigned int, bool, unsigned int, unsigned int, at::cuda::detail::TensorInfo<float, unsigned int>, unsigned int, at::cuda::detail::TensorInfo<long, unsigned int>, unsigned int, float*)",
    "topk_bwd": "void at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, float, float, float, at::native::(anonymous namespace)::SoftMaxBackwardEpilogue>(float*, float const*, float const*, long)",
    "permute": "void transformer_engine::moe_permute_kernel<__nv_bfloat16, __nv_bfloat16, 128, false>(__nv_bfloat16 const*, __nv_bfloat16*, int const*, float const*, float*, int, int, int)",
    "unpermute": "void transformer_engine::moe_unpermute_kernel<__nv_bfloat16, __nv_bfloat16, true>(__nv_bfloat16 const*, __nv_bfloat16*, int const*, float const*, int, int, int)",
    "adam": "void multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor<float, float, int>, float, float, float, float, float, float, adamMode_t, float>(long, int volatile*, TensorListMetadata<4>, AdamFunctor<float, float, int>, float, float, float, float, float, float, adamMode_t, float)",
}
SOFTMAX = "void (anonymous namespace)::scaled_masked_softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 10>(c10::BFloat16*, c10::BFloat16 const*, unsigned char const*, float, int, int, int, int)"
SOFTMAX_BWD = "void (anonymous namespace)::scaled_masked_softmax_warp_backward<c10::BFloat16, c10::BFloat16, float, 10>(c10::BFloat16*, c10::BFloat16*, c10::BFloat16 const*, float, int, int, int)"
DROPOUT = "void at::native::(anonymous namespace)::fused_dropout_kernel_vec<c10::BFloat16, float, unsigned int, 1, 4, bool>(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, at::cuda::detail::TensorInfo<bool, unsigned int>, unsigned int, float, at::PhiloxCudaState)"
DROPOUT_BWD = "void at::native::(anonymous namespace)::masked_scale_kernel<bool, c10::BFloat16, float>(at::Tensor&, at::Tensor const&, at::Tensor const&, float)"


LEVELS = ("fine", "coarse", "segment", "stage")


def granularity_level(settings) -> str:
    """fine | coarse | segment | stage, with `auto` picking by the size of the run.

    auto counts the layer passes the emulated ranks run (forward, backward, and the recomputed
    forward: of one layer in `training.ac_every` with per-layer selective AC): above
    `emulator.auto_coarse_layer_passes` element-wise kernels fold into their GEMMs (coarse), above
    `auto_stage_layer_passes` all layers of a stage run as one block per micro-batch and direction (stage). Such runs are GPU-bound, where folding moves the iteration
    little. `segment` (one kernel per run of compute between two TP collectives) is only ever
    asked for by name: `stage` is faster and as close to `coarse`."""
    g = settings.knobs.granularity
    if g not in LEVELS + ("auto",):
        from .settings import SettingsError

        raise SettingsError(f"emulator.granularity must be one of {', '.join(LEVELS)} or auto, got {g!r}")
    if g != "auto":
        return g
    m = settings.model
    ranks = settings.world_size if settings.ranks == "all" else settings.pp
    tr = settings.training
    passes = 2 if tr.recompute == "none" else 2 + 1 / tr.ac_every if tr.recompute == "selective_layer" else 3
    work = ranks * m.num_microbatches * (m.num_layers // settings.pp) * passes
    if work > settings.knobs.auto_stage_layer_passes:
        return "stage"
    return "coarse" if work > settings.knobs.auto_coarse_layer_passes else "fine"


def recomputed_by_selective_ac(steps: list) -> list:
    """The steps of a layer's forward that torchtitan's SelectiveAC re-runs in its backward
    (torchtitan/distributed/activation_checkpoint.py, `SelectiveAC._get_custom_policy`): an op's output is
    kept where the op is compute-intensive (matmuls, attention; torch's `get_default_op_list`) or a
    reduce-scatter / all-to-all, except every second matmul of the forward (counted from the first); the
    rest re-runs, TP all-reduces and all-gathers included. The emulated layer's QKV and FC1 are fused, so its
    four matmuls stand for torchtitan's seven (wq wk wv wo w1 w3 w2: wk, wo, w3 re-run; here the attention
    projection and FC2: 5% fewer FLOPs for Llama 3 8B)."""
    out, mms = [], 0
    for st in steps:
        if isinstance(st, OpSpec) and st.name == "aten::mm":
            mms += 1
            if mms % 2:
                continue
        elif (isinstance(st, OpSpec) and st.heavy) or isinstance(st, CPRing):   # attention (flash, the unfused
            continue                                                              # bmm's, a CP ring's), saved
        out.append(st)
    return out


def coarse_granularity(settings) -> bool:
    return granularity_level(settings) != "fine"


class Program(ExpertOps, RingOps):
    """Op lists for one pipeline stage of the configured model (shared by every rank of the stage)."""

    def __init__(self, settings, costs: KernelCosts):
        m = settings.model
        # context parallelism: each rank holds 1 / cp of every sequence's tokens (its queries), and attends over
        # the whole sequence's keys and values, gathered from the context-parallel group
        self.cp = max(int(getattr(settings, "cp", 1)), 1)
        self.s_full = m.seq_length
        # the ring form (training.cp_form: ring): attention in cp steps over the CP group (`ring_attention.py`)
        self.ring = self.cp > 1 and getattr(settings.training, "cp_form", "allgather") == "ring"
        self.s, self.b, self.h, self.f = m.seq_length // self.cp, m.micro_batch_size, m.hidden, m.ffn_hidden
        self.t = settings.tp
        self.heads, self.d, self.v = m.num_heads, m.head_dim, m.vocab_size
        # Llama-style switches (config/model/llama3_*.yaml): grouped-query attention's KV heads, the SwiGLU
        # MLP, RMSNorm and rotary embeddings; the GPT models leave each at Megatron's GPT default
        self.kv = getattr(m, "num_kv_heads", 0) or m.num_heads
        self.gated = getattr(m, "ffn_activation", "gelu") == "swiglu"
        self.rms = getattr(m, "norm", "layernorm") == "rmsnorm"
        self.rope = bool(getattr(m, "rope", False))
        self.qkv = (self.heads + 2 * self.kv) * self.d      # Megatron-Core's linear_qkv output (3h for GPT)
        self.T = self.s * self.b
        # mixture-of-experts: with TP > 1, Megatron-Core runs the MoE MLP on each TP rank's sequence-parallel
        # 1 / tp of the tokens (the experts themselves are not tensor-parallel: expert TP 1)
        self.moe = getattr(m, "moe", None)
        self.Tm = self.T // settings.tp
        self.ep = int(getattr(settings, "ep", 1))
        self.k = costs
        self.arch = getattr(settings.cluster, "gemm_kernel", "hopper")
        self.level = granularity_level(settings)
        self.coarse = self.level != "fine"
        self.unfused = settings.training.attention == "unfused"
        self.grouped = bool(getattr(settings.training, "moe_grouped_gemm", True))
        self.layer_fwd = self._finish(self._bypassed(self._layer_fwd()))
        self.layer_bwd = self._finish(self._bypassed(self._layer_bwd()))
        # what a layer's backward re-runs of its forward first (training.recompute): all of it, or
        # SelectiveAC's share (`recomputed_by_selective_ac`); none
        selective = settings.training.recompute == "selective_op"
        self.layer_recompute = (self._finish(self._bypassed(recomputed_by_selective_ac(self._layer_fwd())))
                                if selective else self.layer_fwd)
        # layers one block of layer_fwd / layer_bwd stands for (all of a stage's at granularity=stage)
        self.layers_per_block = 1
        self._one_layer = (self.layer_fwd, self.layer_bwd) + ((self.layer_recompute,) if selective else ())
        self._stacks: dict = {}
        if self.level == "stage":
            self.layers_per_block = m.num_layers // settings.pp
            stacked = self.stacked(self.layers_per_block)
            self.layer_fwd, self.layer_bwd = stacked[:2]
            self.layer_recompute = stacked[2] if selective else self.layer_fwd
        self.embed_fwd = self._finish(self._bypassed(self._embed_fwd()))
        self.embed_bwd = self._finish(self._embed_bwd())
        self.head_fwd = self._finish(self._head_fwd())
        self.head_bwd = self._finish(self._head_bwd())
        h, f, t = self.h, self.f, self.t
        mlp = 1 if self.gated else 2 / 3   # parameters of an MLP of width f: 3 h f with SwiGLU, 2 h f with GeLU
        self.expert_params = 0             # a rank's share of a layer's routed experts (their own DP group)
        if self.moe:   # attention as the model's, then the router, the shared expert and the rank's experts
            q, mo = self.heads * self.d, self.moe
            self.expert_params = int(mo.experts // self.ep * 3 * mlp * h * mo.ffn_hidden)
            self.dense_params = int((h * self.qkv + q * h) // t + 2 * h + h * mo.experts
                                    + 3 * mlp * h * mo.shared_ffn_hidden)
            self.layer_params = self.dense_params + self.expert_params
        elif self.gated or self.kv != self.heads:     # Llama: GQA projections, SwiGLU's three GEMMs, no biases
            q = self.heads * self.d
            self.layer_params = (h * self.qkv + q * h + (3 if self.gated else 2) * h * f) // t + 2 * h
        else:
            self.layer_params = (4 * h * h + 2 * h * f) // t + (3 * h + f) // t + 6 * h
        if not self.moe:
            self.dense_params = self.layer_params
        self.embed_params = self.v * h // t + self.s_full * h

    # -- op builders -------------------------------------------------------
    def mm(self, m: int, k: int, n: int, layout: str, dims=None) -> OpSpec:
        ks = KSpec(_gemm_name(m, n, layout, self.arch), self.k.gemm(m, n, k))
        return OpSpec("aten::mm", dims or ((m, k), (k, n)), (BF16, BF16), (ks,), gemm=True, heavy=True)

    def elem(self, op: str, kernel: str, dims: tuple, nbytes: float) -> OpSpec:
        ks = KSpec(ELEM[kernel], self.k.elementwise(nbytes), compute=False)
        return OpSpec(op, dims, (BF16,) * len(dims), (ks,))

    def _norm(self, backward: bool = False) -> OpSpec:
        """LayerNorm (GPT) or RMSNorm (Llama; Transformer Engine's rmsnorm kernels): both read and write
        the s x b x h activation, so both are timed by the bytes they move."""
        s, b, h, T = self.s, self.b, self.h, self.T
        if backward:
            name = "aten::_fused_rms_norm_backward" if self.rms else "aten::native_layer_norm_backward"
            return self.elem(name, "rms_norm_bwd" if self.rms else "layer_norm_bwd", ((s, b, h), (s, b, h), (h,)),
                             8 * T * h)
        return self.elem("aten::rms_norm" if self.rms else "aten::layer_norm", "rms_norm" if self.rms else "layer_norm",
                         ((s, b, h), (h,), (h,)), 4 * T * h)

    def _rope(self, backward: bool = False) -> list:
        """Rotary embeddings on the queries and keys (Megatron-Core's fused_apply_rotary_pos_emb: one
        element-wise pass over each, read and write)."""
        if not self.rope:
            return []
        s, b, t, d = self.s, self.b, self.t, self.d
        kernel = "rope_bwd" if backward else "rope"
        return [self.elem("aten::_fused_rope", kernel, ((s, b, n // t, d),), 4 * self.T * n // t * d)
                for n in (self.heads, self.kv)]

    def _activation(self, backward: bool = False) -> OpSpec:
        """GPT's GeLU on f/t, or SwiGLU's SiLU(gate) x up on the fused gate-and-up output (2f/t wide in,
        f/t out; Megatron-Core's bias_swiglu)."""
        s, b, T, ft = self.s, self.b, self.T, self.f // self.t
        if self.gated:
            if backward:
                return self.elem("aten::silu_backward", "swiglu_bwd", ((s, b, 2 * ft), (s, b, ft)), 10 * T * ft)
            return self.elem("aten::silu", "swiglu", ((s, b, 2 * ft),), 6 * T * ft)
        if backward:
            return self.elem("aten::gelu_backward", "gelu_bwd", ((s, b, ft), (s, b, ft)), 6 * T * ft)
        return self.elem("aten::gelu", "gelu", ((s, b, ft),), 4 * T * ft)

    def _layer_fwd(self):
        T, s, b, h, f, t = self.T, self.s, self.b, self.h, self.f, self.t
        a, d = self.heads // t, self.d
        qkv, q, fc1 = self.qkv // t, self.heads * d // t, (2 if self.gated else 1) * f // t
        return [
            self._norm(),
            self.mm(T, h, qkv, "tn"),
            self.elem("aten::copy_", "copy", ((s, b, qkv),), 4 * T * qkv),
            *self._rope(),
            *([CPRing()] if self.ring else (*self._cp_gather(), *self._attention_fwd(b, s, a, d))),
            self.mm(T, q, h, "tn"),
            TPAllReduce(T * h),
            self.elem("aten::add", "bda", ((s, b, h), (s, b, h)), 6 * T * h),
            self._norm(),
            *(self._moe_fwd() if self.moe else (
                self.mm(T, h, fc1, "tn"),
                self._activation(),
                self.mm(T, f // t, h, "tn"),
                TPAllReduce(T * h))),
            self.elem("aten::add", "bda", ((s, b, h), (s, b, h)), 6 * T * h),
        ]

    def _layer_bwd(self):
        T, s, b, h, f, t = self.T, self.s, self.b, self.h, self.f, self.t
        a, d = self.heads // t, self.d
        qkv, q, fc1 = self.qkv // t, self.heads * d // t, (2 if self.gated else 1) * f // t
        return [
            self.elem("aten::mul", "mul", ((s, b, h), (s, b, h)), 6 * T * h),
            *(self._moe_bwd() if self.moe else (
                self.mm(T, h, f // t, "nn"),                                   # FC2 dgrad
                self.mm(h, T, f // t, "nt", dims=((h, T), (T, f // t))),       # FC2 wgrad
                self._activation(backward=True),
                self.mm(T, fc1, h, "nn"),                                      # FC1 dgrad
                TPAllReduce(T * h, overlap=True),
                self.mm(fc1, T, h, "nt", dims=((fc1, T), (T, h))),             # FC1 wgrad overlaps the all-reduce
                TPWait())),
            self._norm(backward=True),
            self.elem("aten::add_", "add", ((s, b, h), (s, b, h)), 6 * T * h),
            self.elem("aten::mul", "mul", ((s, b, h), (s, b, h)), 6 * T * h),
            self.mm(T, h, q, "nn"),                                        # proj dgrad
            self.mm(h, T, q, "nt", dims=((h, T), (T, q))),                 # proj wgrad
            *([CPRing(backward=True)] if self.ring else
              (*self._cp_gather(), *self._attention_bwd(b, s, a, d), *self._cp_scatter())),
            *self._rope(backward=True),
            self.elem("aten::copy_", "copy", ((s, b, qkv),), 4 * T * qkv),
            self.mm(T, qkv, h, "nn"),                                      # QKV dgrad
            TPAllReduce(T * h, overlap=True),
            self.mm(qkv, T, h, "nt", dims=((qkv, T), (T, h))),             # QKV wgrad overlaps
            TPWait(),
            self._norm(backward=True),
            self.elem("aten::add_", "add", ((s, b, h), (s, b, h)), 6 * T * h),
        ]

    # -- core attention: one flash-attention kernel, or Megatron's unfused CoreAttention ---------
    def _bmm(self, batch: int, m: int, k: int, n: int, op: str, backward: bool) -> OpSpec:
        ks = KSpec(_gemm_name(m, n, "tn", self.arch), self.k.batched_gemm(batch, m, n, k, backward))
        return OpSpec(op, ((batch, m, k), (batch, k, n)), (BF16, BF16), (ks,), gemm=True, heavy=True)

    def _scores(self, name: str, kernel: str, batch: int, s: int, bytes_per_elem: float, n_in: int) -> OpSpec:
        ks = KSpec(kernel, self.k.elementwise(bytes_per_elem * batch * s * s), compute=False)
        return OpSpec(name, ((batch, s, s),) * n_in, (BF16,) * n_in, (ks,))

    def _cp_gather(self) -> list:
        """Llama 3's context parallelism (Llama Team 2024, Sec. 3.3.2: all-gather of K and V, then attention of
        the local queries; Transformer Engine's AttnFuncWithCPAndKVAllGather gathers again in the backward):
        the rank's keys and values, gathered to the whole sequence."""
        if self.cp == 1:
            return []
        return [CPComm("allgather", 2 * self.b * self.s_full * (self.kv // self.t) * self.d)]

    def _cp_scatter(self) -> list:
        """The gradients of the gathered keys and values, reduce-scattered back to their ranks."""
        if self.cp == 1:
            return []
        return [CPComm("reduce_scatter", 2 * self.b * self.s_full * (self.kv // self.t) * self.d)]

    def _flash_cost(self, b, s, a, d, backward: bool) -> float:
        """A rank's causal attention: its 1 / cp of the sequence's queries against every key, load-balanced
        (Megatron splits a sequence into 2 cp chunks, rank i holding chunks i and 2 cp - 1 - i): 1 / cp of
        the whole sequence's work."""
        if self.cp == 1:
            return self.k.attention(b, s, a, d, backward)
        return (self.k.attention(b, self.s_full, a, d, backward) - self.k.c.gemm_fixed_us) / self.cp \
            + self.k.c.gemm_fixed_us

    def _attention_fwd(self, b, s, a, d):
        if not self.unfused:
            # keys and values: the rank's KV heads, over the whole sequence under context parallelism
            qkv, kv = (b, s, a, d), (b, self.s_full, self.kv // self.t, d)
            return [OpSpec("aten::_flash_attention_forward", (qkv, kv, kv), (BF16,) * 3,
                           (KSpec(FLASH_FWD, self._flash_cost(b, s, a, d, False)),), heavy=True)]
        B = b * a   # (batch x local heads) independent s x s score matrices, not causally skipped
        return [self._bmm(B, s, d, s, "aten::baddbmm", False),                       # Q K^T
                self._scores("aten::_softmax", SOFTMAX, B, s, 4.0, 1),                # read + write bf16
                self._scores("aten::native_dropout", DROPOUT, B, s, 5.0, 1),          # + 1-byte mask
                self._bmm(B, s, s, d, "aten::bmm", False)]                            # P V

    def _attention_bwd(self, b, s, a, d):
        if not self.unfused:
            qkv, kv = (b, s, a, d), (b, self.s_full, self.kv // self.t, d)
            return [OpSpec("aten::_flash_attention_backward", ((b, s, a, d), qkv, kv, kv, qkv), (BF16,) * 5,
                           (KSpec(FLASH_BWD, self._flash_cost(b, s, a, d, True)),), heavy=True)]
        B = b * a
        return [self._bmm(B, s, d, s, "aten::bmm", True),                            # dP = dO V^T
                self._bmm(B, s, s, d, "aten::bmm", True),                            # dV = P^T dO
                self._scores("aten::native_dropout_backward", DROPOUT_BWD, B, s, 5.0, 2),
                self._scores("aten::_softmax_backward_data", SOFTMAX_BWD, B, s, 6.0, 2),
                self._bmm(B, s, s, d, "aten::bmm", True),                            # dQ = dS K
                self._bmm(B, s, s, d, "aten::bmm", True)]                            # dK = dS^T Q

    def _embed_fwd(self):
        T, s, b, h = self.T, self.s, self.b, self.h
        tokens = OpSpec("aten::copy_", ((b, s), (b, s)), ("long int", "long int"),
                        (KSpec("Memcpy HtoD (Pinned -> Device)", self.k.h2d(16 * T), cat="gpu_memcpy",
                               runtime="cudaMemcpyAsync", nbytes=16 * T, compute=False),))
        return [
            tokens,
            self.elem("aten::embedding", "embedding", ((self.v // self.t, h), (b, s)), 4 * T * h),
            TPAllReduce(T * h),
            self.elem("aten::mul", "mul", ((s, b, h), (s, b, h)), 6 * T * h),
        ]

    def _embed_bwd(self):
        T, s, b, h = self.T, self.s, self.b, self.h
        return [self.elem("aten::embedding_dense_backward", "embedding_bwd", ((s, b, h), (b, s)), 12 * T * h)]

    def _head_fwd(self):
        T, s, b, h, vt = self.T, self.s, self.b, self.h, self.v // self.t
        return [
            self.elem("aten::layer_norm", "layer_norm", ((s, b, h), (h,), (h,)), 4 * T * h),
            self.mm(T, h, vt, "tn"),
            self.elem("aten::max", "reduce", ((s, b, vt),), 2 * T * vt),
            TPAllReduce(T),
            self.elem("aten::_log_softmax", "ce", ((s, b, vt),), 4 * T * vt),
            TPAllReduce(T),
            TPAllReduce(T),
        ]

    def _head_bwd(self):
        T, s, b, h, vt = self.T, self.s, self.b, self.h, self.v // self.t
        return [
            self.elem("aten::_log_softmax_backward_data", "ce_bwd", ((s, b, vt), (s, b, vt)), 6 * T * vt),
            self.mm(T, vt, h, "nn"),
            self.mm(vt, T, h, "nt", dims=((vt, T), (T, h))),
            self.elem("aten::native_layer_norm_backward", "layer_norm_bwd", ((s, b, h), (s, b, h), (h,)), 8 * T * h),
        ]

    def _bypassed(self, steps):
        """At TP 1 Megatron's TP all-reduces of a layer's and the embedding's output return their
        input without a collective (megatron/core/tensor_parallel/mappings.py, `_reduce`: "Bypass the
        function if we are using only 1 GPU"); the cross-entropy's all-reduces (cross_entropy.py) call
        torch.distributed.all_reduce whatever the group's size, so the head keeps them."""
        if self.t > 1:
            return steps
        return [st for st in steps if not isinstance(st, (TPAllReduce, TPWait))]

    def _finish(self, steps):
        """At coarse granularity, fold element-wise ops into the neighbouring GEMM/attention op."""
        if not self.coarse:
            return tuple(steps)
        if not any(isinstance(st, OpSpec) and st.heavy for st in steps):
            # nothing to fold into (the embedding: a lookup and its TP all-reduce): the block stays as
            # it is, or its element-wise kernels would be lost
            return tuple(self._segments(list(steps)) if self.level in ("segment", "stage") else steps)
        out, pending = [], []
        for st in steps:
            if isinstance(st, OpSpec) and not st.heavy and st.kernels[0].cat == "kernel":
                prev = next((i for i in range(len(out) - 1, -1, -1)
                             if isinstance(out[i], OpSpec) and out[i].heavy), None)
                if prev is None:
                    pending.append(st.kernels[0])
                else:
                    o = out[prev]
                    k0 = folded([o.kernels[0], st.kernels[0]], o.kernels[0])
                    out[prev] = replace(o, kernels=(k0,) + o.kernels[1:])
                continue
            if pending and isinstance(st, OpSpec) and st.heavy:
                k0 = folded([st.kernels[0]] + pending, st.kernels[0])
                st, pending = replace(st, kernels=(k0,) + st.kernels[1:]), []
            out.append(st)
        if self.level in ("segment", "stage"):
            out = self._segments(out)
        return tuple(out)

    def stacked(self, n: int) -> tuple:
        """(forward, backward) steps of `n` layers as one block (granularity=stage): a model chunk, or a
        stage of its own size where the stages differ (`Settings.stage_layers`)."""
        got = self._stacks.get(n)
        if got is None:
            got = self._stacks[n] = tuple(self._stack(steps, n) for steps in self._one_layer)
        return got

    @staticmethod
    def _stack(steps, n: int):
        """`n` layers of segment-level `steps` as one block: all serial compute, then the
        all-reduces (blocking ones, or overlapped ones alongside all the compute they overlap).

        The GPU time is the same sum as layer after layer as long as, in each overlapped pair, the
        same side (all-reduce or wgrad GEMM) is the longer one."""
        serial, overlapped, cp = [], [], []
        blocking = parallel = 0
        nelems, first, inside = None, None, False
        for st in steps:
            if isinstance(st, CPComm):   # blocking: its time adds to the block's, wherever it sits
                cp.append(replace(st, repeat=n * st.repeat))
            elif isinstance(st, (MoEStep, CPRing)):   # the same: run by the rank, after the block's compute
                cp.append(replace(st, layers=n * st.layers))
            elif isinstance(st, OpSpec):
                first = first or st
                (overlapped if inside else serial).extend(st.kernels)
            elif isinstance(st, TPAllReduce):
                if nelems not in (None, st.nelems):
                    raise ValueError("granularity=stage needs one all-reduce size per layer")
                nelems = st.nelems
                inside = inside or st.overlap
                parallel += st.overlap
                blocking += not st.overlap
            elif isinstance(st, TPWait):
                inside = False

        def op(kernels, contended):
            return replace(first, kernels=(folded(kernels, first.kernels[0], n, contended=contended),))

        # a collective active when the block starts would have slowed only its first kernel; the
        # overlapped compute ran beside its all-reduces throughout
        lead = sum(k.base_us for k in first.kernels)
        out = [op(serial, lead / (n * sum(k.base_us for k in serial)))] + cp
        if blocking:
            out.append(TPAllReduce(nelems, repeat=n * blocking))
        if parallel:
            out += [TPAllReduce(nelems, overlap=True, repeat=n * parallel), op(overlapped, 1.0), TPWait()]
        return tuple(out)

    @staticmethod
    def _segments(steps):
        """Merge each run of compute ops between two collectives (or waits) into its first op's kernel."""
        out = []
        for st in steps:
            prev = out[-1] if out else None
            if (isinstance(st, OpSpec) and isinstance(prev, OpSpec) and st.kernels[0].cat == "kernel"
                    and prev.kernels[0].cat == "kernel"):
                k0 = folded([prev.kernels[0], *st.kernels], prev.kernels[0])
                out[-1] = replace(prev, kernels=(k0,) + prev.kernels[1:])
                continue
            out.append(st)
        return out

    def optimizer_kernels(self, params: int, knobs) -> tuple[KSpec, KSpec, int]:
        """(grad-norm kernel, one Adam chunk kernel, number of chunks) for `params` parameters."""
        c = knobs.compute
        norm = KSpec(ELEM["l2norm"], self.k.elementwise(2.0 * params))
        chunks = max(int(c.optimizer_chunks), 1)
        adam = KSpec(ELEM["adam"], self.k.elementwise(c.optimizer_bytes_per_param * params / chunks))
        return norm, adam, chunks
