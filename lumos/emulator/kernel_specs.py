"""What the emulated program is made of: a GPU op (`KSpec`), the CPU op launching it (`OpSpec`), and the steps a
layer interleaves with them (TP all-reduces and waits, context-parallel collectives, MoE parts)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

BF16 = "c10::BFloat16"


@dataclass(frozen=True)
class KSpec:
    """One GPU op launched by a CPU op."""
    name: str
    base_us: float
    cat: str = "kernel"                 # kernel | gpu_memcpy | gpu_memset
    runtime: str = "cudaLaunchKernel"   # the launching runtime call
    nbytes: int = 0
    compute: bool = True                # False: gemm/attention-free small op
    contended: float = 1.0              # share of base_us slowed when it starts beside a collective
                                        #   (<1: a folded block, only its first kernel would have been)
    jitter_scale: float = 1.0           # times compute.jitter_sigma: a folded kernel's draw has the spread
                                        #   of the sum of its parts' independent draws, not of one kernel


def folded(parts, template: KSpec, copies: int = 1, **kw) -> KSpec:
    """One kernel standing for `copies` x `parts` run back to back (coarser granularity levels).

    Its jitter is scaled so that its spread is that of the parts' independent draws summed: one
    draw for a whole layer would make each stage's time, and so the pipeline's bubbles, too noisy."""
    base = copies * sum(k.base_us for k in parts)
    spread = math.sqrt(copies * sum((k.jitter_scale * k.base_us) ** 2 for k in parts))
    return replace(template, base_us=base, jitter_scale=spread / base if base > 0 else 1.0, **kw)


@dataclass(frozen=True)
class OpSpec:
    """A CPU op (cpu_op event) and the GPU ops it launches."""
    name: str
    dims: tuple
    types: tuple
    kernels: tuple
    gemm: bool = False
    heavy: bool = False                 # GEMM or attention (kept at coarse granularity)


@dataclass(frozen=True)
class TPAllReduce:
    nelems: int
    overlap: bool = False               # launched async; a TPWait comes later
    repeat: int = 1                     # back-to-back all-reduces it stands for (granularity=stage)


@dataclass(frozen=True)
class TPWait:
    pass


@dataclass(frozen=True)
class CPComm:
    """A blocking collective of the context-parallel group inside a layer: the all-gather of the keys and values
    before attention (`nelems`: the gathered output), or the reduce-scatter of their gradients (`nelems`: the
    full input)."""
    kind: str                           # allgather | reduce_scatter
    nelems: int
    repeat: int = 1                     # back-to-back calls it stands for (granularity=stage)


@dataclass(frozen=True)
class CPRing:
    """Context parallelism's ring form inside a layer (`training.cp_form: ring`): the rank's attention over its
    CP group in CP steps, each step's flash-attention kernel beside the p2p exchange of the next key/value chunk
    (backward: of the key/value chunk and the gradients gathered so far), run by the rank
    (`lumos/emulator/ring_attention.py`)."""
    backward: bool = False
    layers: int = 1                     # consecutive layers it stands for (granularity=stage)


@dataclass(frozen=True)
class MoEStep:
    """A part of a mixture-of-experts MLP whose work depends on where the router sent the tokens, timed by
    the rank for each layer and micro-batch (`lumos/emulator/routing.py`): `dispatch` (tokens to their
    experts' ranks), `experts` (the experts' GEMMs), `combine` (outputs back to their tokens' ranks)."""
    part: str                           # dispatch | experts | combine
    backward: bool = False
    layers: int = 1                     # consecutive layers it stands for (granularity=stage)


# the experts' GEMMs of one layer as one grouped kernel (Megatron-Core's GroupedMLP, --moe-grouped-gemm:
# megatron/core/transformer/moe/experts.py over the grouped_gemm package's CUTLASS grouped GEMM)
GROUPED_GEMM = ("void cutlass::Kernel<cutlass::gemm::kernel::GemmGrouped<cutlass_sm80_bf16_s16816gemm_grouped_"
                "128x128_32x4_tn_align8> >(cutlass::gemm::kernel::GemmGrouped<cutlass_sm80_bf16_s16816gemm_grouped_"
                "128x128_32x4_tn_align8>::Params)")
# a flash-attention forward and backward kernel (Dao's flash-attn 2, as PyTorch's SDPA launches it)
FLASH_FWD = "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, true, false, false, false, true, true, false, false>(Flash_fwd_params)"
FLASH_BWD = "void flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 8, cutlass::bfloat16_t> >, true, false, false, false, true, true, false, false>(Flash_bwd_params)"
