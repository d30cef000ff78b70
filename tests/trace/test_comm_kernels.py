"""Which kernels are communication, by which rule: a real kernel name from each library's source.

Each name is as CUPTI writes it (demangled, with template and parameter lists), taken from the
source file named beside it or from a public trace that shows it; the negatives are kernels of the
same libraries (or of PyTorch) that compute locally and must stay compute.
"""

from __future__ import annotations

import numpy as np
import pytest

from lumos.trace import schema
from lumos.trace.comm_kernels import (OWN_PROTOCOL, RULE_NAMES, RULES, comm_kernel_rule, count_by_rule,
                                      rule_counts_line)

# (kernel name, rule)
NAMES = [
    # NVIDIA/nccl: ncclKernel_ (< 2.19), ncclDevKernel_ (src/device/generate.py, >= 2.19),
    # ncclSymkDevKernel_ (src/device/symmetric/generate.py, >= 2.27); HTA's nccl_data fixture has the first
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "nccl"),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "nccl"),
    ("ncclDevKernel_Generic_4(ncclDevComm*, unsigned long, ncclWork*)", "nccl"),
    ("ncclSymkDevKernel_AllReduce_AGxLL_R_sum_f32(ncclSymkDevWorkArgs4K)", "nccl"),
    # MSCCL: msccl_kernel.h's MSCCL_KERNEL_ENTRY_NAME (mscclKernel_<op>_<type>_<proto>_<fullOps>, RCCL's copy);
    # MSCCL++: apps/nccl/src/broadcast.hpp's broadcast6, whose parameters are mscclpp:: device handles
    ("mscclKernel_Sum_bf16_LL128(ncclDevComm*, unsigned long, ncclWork*)", "msccl"),
    ("void broadcast6<true>(void*, void*, void*, mscclpp::DeviceHandle<mscclpp::MemoryChannel>*, unsigned long, "
     "unsigned long, unsigned long, unsigned long, unsigned long, unsigned long)", "msccl"),
    # PyTorch torch/csrc/distributed/c10d/symm_mem/CUDASymmetricMemoryOps.cu (anonymous namespace)
    ("void (anonymous namespace)::one_shot_all_reduce_kernel<c10::BFloat16, 16, 8>(c10::BFloat16**, "
     "c10::BFloat16*, c10::BFloat16*, unsigned long, unsigned long, unsigned int**, unsigned long, unsigned long)",
     "symmetric_memory"),
    ("void (anonymous namespace)::two_shot_all_reduce_kernel_inplace<float, 16, 4>(float**, unsigned long, "
     "unsigned long, unsigned int**, unsigned long, unsigned long)", "symmetric_memory"),
    ("void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*, unsigned long, "
     "unsigned int**, unsigned long, unsigned long)", "symmetric_memory"),
    # vLLM csrc/custom_all_reduce.cuh (namespace vllm), AMD aiter's copy of it
    ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, "
     "vllm::Signal*, __nv_bfloat16*, int, int)", "symmetric_memory"),
    ("aiter::cross_device_reduce_2stage<bf16,8,false>", "symmetric_memory"),
    # Transformer Engine transformer_engine/common/comm_gemm_overlap/userbuffers/userbuffers.cu
    ("void userbuffers_fp16_sum_inplace_gpu_rw<8>(int, int, int, int, int, int, int, void**, int)", "userbuffers"),
    ("kuserbuffers_pushsendrecv(int*, int*, int4*, int4*, int, int, int, int*, int*, int, void*)", "userbuffers"),
    # deepseek-ai/DeepEP csrc/kernels/intranode.cu, internode.cu, internode_ll.cu (V1, namespace deep_ep::X);
    # the first two as a public vLLM + DeepEP trace names them
    ("void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*, float*, int*, int*, "
     "int4 const*, float const*, long const*, float const*, bool const*, int const*, int, int, int, int, int, "
     "int, int, int, void**, int, int, int)", "deepep"),
    ("void deep_ep::intranode::combine<__nv_bfloat16, 8, 768, 4096>(__nv_bfloat16*, float*, __nv_bfloat16 const*, "
     "float const*, int const*, int const*, int const*, int const*, int, int, int, void**, int, int, int)", "deepep"),
    ("void deep_ep::intranode::notify_dispatch<8>(int const*, int*, int, int const*, int*, int, int, "
     "bool const*, int*, int*, int, int, void**, int**, int)", "deepep"),
    ("void deep_ep::intranode::cached_notify_combine<8>(void**, int*, int, int, int, int**, int)", "deepep"),
    ("void deep_ep::internode::notify_dispatch<true, 4>(int const*, int*, int)", "deepep"),
    ("void deep_ep::internode::cached_notify(int, int, int, int, int, int, int, int*, int*, int*, int*, "
     "int, void*, void**, int**, int, bool, nvshmem_team_t)", "deepep"),
    ("void deep_ep::internode_ll::dispatch<true, false, 7168>(void*, float*, int*, long*, int*, int*, void*, "
     "void*, long*, void const*, long const*, int*, int*, int, int, int, int, int, int, int, int, bool)", "deepep"),
    ("void deep_ep::internode_ll::clean_low_latency_buffer<256>(int*, int, int*, int, int, int, int*, int*)",
     "deepep"),
    ("void deep_ep::intranode::barrier<8>(int**, int)", "deepep"),
    # DeepSeek-V3's own EP64 training trace (deepseek-ai/profile-data train.json): DeepEP as dpsk::ep
    ("void dpsk::ep::internode::dispatch<false, 8, true, 8>(int4*, float*, long*, float*, "
     "dpsk::ep::internode::SourceMeta*, int4 const*, float const*, long const*, float const*, int*, int*, int*, "
     "int*, int const*, int const*, int const*, int const*, int, int, int, int, int, bool const*, void*, int, int, "
     "void**, int, int, int, int, int*)", "deepep"),
    ("void dpsk::ep::internode::cached_notify<false>(int, int, int, int, int*, int, int, int const*, int const*, "
     "int*, void*, void**, int**, int, int, int, int*, bool, int)", "deepep"),
    # DeepEP EPv2 (2026): csrc/kernels/legacy/*.cu and the JIT kernels of deep_ep/include/deep_ep/impls/*.cuh
    ("void deep_ep::legacy::intranode::dispatch<8, 768, 8192>(int4*, float*)", "deepep"),
    ("void deep_ep::elastic::hybrid_dispatch_impl<false, false, 24, 4, 8, 4, 2, 8, 7168, 0, 4096, 256, 8, 1, 8, "
     "100000>(void*)", "deepep"),
    # NVSHMEM's own kernels (src/host/proxy/, src/host/coll/)
    ("void nvshmemi_proxy_rma_entrypoint<(nvshmemi_op_t)0, 0>(void*, void*, rma_bytesdesc_t, int)", "nvshmem"),
    ("void nvshmemi_reduce_kernel<float, (rdxn_ops)0>(int, int, int, float*, float const*, unsigned long, float*, "
     "long*)", "nvshmem"),
    # a collective's name anywhere: TensorRT-LLM's custom all-reduce, an AMD all-to-all
    ("void tensorrt_llm::kernels::oneShotAllReduceKernel<__nv_bfloat16, 8>(tensorrt_llm::kernels::AllReduceParams)",
     "collective_word"),
    ("rccl_AllGather", "collective_word"),
]

NOT_COMM = [
    # GEMMs, with and without `reduce` in their names
    "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_16x4_nn_align4>(cutlass_80_tensorop_s1688gemm_"
    "128x128_16x4_nn_align4::Params)",
    "ampere_sgemm_128x64_tn",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"
    "__5x_cublas",
    "void cutlass::gemm::kernel::GemmSplitKParallel<cutlass::reduction::kernel::ReduceSplitK<float>>(Params)",
    "void splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, true, false, false>"
    "(cublasSplitKParams<float>, float const*, __nv_bfloat16 const*, __nv_bfloat16*, float const*)",
    # elementwise and reduction kernels of PyTorch: local work
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MaxOps<float>, unsigned int, "
    "float, 4> >(at::native::ReduceOp<float, at::native::MaxOps<float>, unsigned int, float, 4>)",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3>)",
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float>(float*, float const*, int)",
    "Memcpy DtoD (Device -> Device)",
    "void cross_device_copy",
    # DeepEP's kernels that compute locally (the layout from topk_idx; V1 put it in `internode` at first)
    "void deep_ep::layout::get_dispatch_layout<256, 32, 8>(long const*, int*, int*, int*, bool*, int, int, int, int)",
    "void deep_ep::internode::get_dispatch_layout<256, 32, 8>(long const*, int*, int*, int*, bool*, int, int, int, "
    "int)",
    "void dpsk::ep::cuda::get_dispatch_layout<256, 32, 8>(long const*, int*, int*, int*, bool*, int, int, int, int)",
    "void deep_ep::elastic::dispatch_copy_epilogue_impl<128>(void*, void*)",
    "void deep_ep::legacy::internode_ll::query_mask_buffer<32>(int*, int, int*)",
]


@pytest.mark.parametrize("name,rule", NAMES)
def test_each_library_has_its_rule(name, rule):
    assert comm_kernel_rule(name) == rule
    assert schema.is_comm_kernel(name)


@pytest.mark.parametrize("name", NOT_COMM)
def test_local_kernels_are_compute(name):
    assert comm_kernel_rule(name) is None
    assert not schema.is_comm_kernel(name)


def test_every_rule_is_exercised_and_cited():
    assert set(RULE_NAMES) == {r for _, r in NAMES}
    assert RULE_NAMES == ("nccl", "msccl", "symmetric_memory", "userbuffers", "deepep", "nvshmem", "collective_word")
    assert all(r.source for r in RULES)
    # peers synchronised inside the kernel: never matched to peers by the kernel's name alone
    assert OWN_PROTOCOL == {"symmetric_memory", "userbuffers", "deepep", "nvshmem"}


def test_first_rule_wins():
    """A DeepEP kernel that takes an NVSHMEM team is DeepEP's; an NCCL kernel named for its collective
    is NCCL's, not the generic word rule's."""
    assert comm_kernel_rule("void deep_ep::internode::cached_notify(int, nvshmem_team_t)") == "deepep"
    assert comm_kernel_rule("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)") == "nccl"


def test_mask_and_rules_per_row():
    dispatch = next(n for n, _ in NAMES if "deep_ep::intranode::dispatch" in n)
    names = np.array([NAMES[0][0], NOT_COMM[0], dispatch, NAMES[0][0]], dtype=object)
    assert schema.comm_kernel_mask(names).tolist() == [True, False, True, True]
    assert schema.comm_kernel_rules(names).tolist() == ["nccl", None, "deepep", "nccl"]


def test_counts_and_the_replay_line():
    counts = count_by_rule(["deepep", "nccl", "deepep", "nccl", "nccl"])
    assert list(counts.items()) == [("nccl", 3), ("deepep", 2)]     # in the table's order
    assert rule_counts_line(counts) == "communication kernels: 3 by rule nccl, 2 by rule deepep"
    assert rule_counts_line({"nccl": 1234}) is None                 # NCCL alone: nothing to say
    assert rule_counts_line({}) is None
    assert rule_counts_line({"nccl": 1234, "deepep": 96}) == \
        "communication kernels: 1,234 by rule nccl, 96 by rule deepep"
