"""Which GPU kernels are communication: one table of named rules, the first that matches wins.

The breakdown (exposed compute / overlapped / exposed communication), the dPRO-style baseline,
the cross-rank matching and the what-if transforms all ask one question of a kernel: is it
communication? They ask it here, through `schema.is_comm_kernel` / `schema.comm_kernel_mask`,
so that a library this table does not know is compute everywhere, and one it knows is
communication everywhere. A trace of DeepSeek-V3's expert parallelism (DeepEP's dispatch and
combine kernels, which are no NCCL kernels) read 111 of its 112 ms as exposed compute before
the `deepep` rule existed (docs/notes/2026-12-07-communication-kernels.md).

Each rule says where its names come from. Rules whose library synchronises its peers inside
its own kernels (NVLink flags, NVSHMEM signals, symmetric-memory signal pads) are
`own_protocol`: such a kernel is no call issued in the same order on every rank of a process
group, so cross-rank matching (`lumos.graph.run_graph`) pairs it with peers only where an
enclosing op or a `Collective name` arg says which collective it is; otherwise it stays on its
stream with its measured time, and `replay --joint` says why.

To add a library: a `CommKernelRule` in `RULES`, before `collective_word`, with a real kernel
name from the library's source in `tests/trace/test_comm_kernels.py`, and a name from the same
library that is not communication (a layout or epilogue kernel) as a negative case there.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

__all__ = ["CommKernelRule", "RULES", "RULE_NAMES", "OWN_PROTOCOL", "comm_kernel_rule", "count_by_rule",
           "rule_counts_line"]


@dataclass(frozen=True)
class CommKernelRule:
    name: str                 # short, printed by `lumos replay`: "nccl", "deepep", ...
    pattern: re.Pattern       # searched for in the kernel's name (anchor with ^ where it must start it)
    source: str               # the public source files the names are read from
    own_protocol: bool = False   # peers synchronised inside the kernel, not by calls in program order


def _rx(text: str, flags: int = 0) -> re.Pattern:
    return re.compile(text, flags)


RULES: tuple[CommKernelRule, ...] = (
    CommKernelRule(
        "nccl",
        # ncclKernel_<Coll>_<algo>_<proto>_<op>_<type> (< 2.19), ncclDevKernel_<Coll>..., _SendRecv and
        # _Generic (coalesced calls, >= 2.19), ncclSymkDevKernel_<Coll>_<algo>_<op>_<type> (symmetric
        # kernels, >= 2.27); RCCL keeps NCCL's names
        _rx(r"^(?:void )?(?:nccl(?:Symk)?(?:Dev)?Kernel|nccl::)", re.IGNORECASE),
        "NVIDIA/nccl src/device/generate.py and src/device/symmetric/generate.py; ROCm/rccl"),
    CommKernelRule(
        "msccl",
        # MSCCL: mscclKernel_<op>_<type>_<proto>[_<fullOps>]; MSCCL++'s kernels (broadcast6, allreduce8,
        # executionKernel, ...) take mscclpp:: device handles, which the demangled name spells out
        _rx(r"^(?:void )?msccl(?:pp)?Kernel|mscclpp::", re.IGNORECASE),
        "Azure/msccl-executor-nccl src/include/msccl/msccl_kernel.h (MSCCL_KERNEL_ENTRY_NAME); "
        "microsoft/mscclpp apps/nccl/src/broadcast.hpp, allreduce.hpp"),
    CommKernelRule(
        "symmetric_memory",
        # PyTorch's device-side collectives (namespace c10d: IntraNodeComm, symmetric memory's NVSHMEM
        # extension), symmetric memory's kernels in an anonymous namespace (one_shot_all_reduce_kernel,
        # two_shot_all_reduce_kernel[_inplace], multimem_all_reduce_kernel, multimem_one_shot_reduce_kernel,
        # multimem_all_gather_kernel), and the custom all-reduce of vLLM (vllm::cross_device_reduce_1stage,
        # _2stage; also SGLang's and AMD aiter's copies)
        _rx(r"^(?:void )?c10d::|\b(?:one_shot|two_shot|multimem(?:_one_shot)?)_(?:all_reduce|all_gather|reduce)"
            r"|\bcross_device_reduce_[12]stage"),
        "pytorch/pytorch torch/csrc/distributed/c10d/symm_mem/CUDASymmetricMemoryOps.cu; "
        "vllm-project/vllm csrc/custom_all_reduce.cuh", own_protocol=True),
    CommKernelRule(
        "userbuffers",
        # Transformer Engine's communication-GEMM overlap: userbuffers_fp16_sum_inplace_gpu_rw, _rr_rs,
        # _rw_ag, ... and kuserbuffers_pullsend / pushrecv / pushsendrecv (also TensorRT-LLM's copy)
        _rx(r"userbuffers", re.IGNORECASE),
        "NVIDIA/TransformerEngine transformer_engine/common/comm_gemm_overlap/userbuffers/userbuffers.cu",
        own_protocol=True),
    CommKernelRule(
        "deepep",
        # DeepEP's expert-parallel all-to-all. V1 (2025) and its `legacy` namespace in EPv2 (2026):
        # deep_ep::[legacy::]{intranode,internode,internode_ll}::{notify_dispatch, cached_notify_dispatch,
        # dispatch, cached_notify_combine, cached_notify, combine, barrier, clean_low_latency_buffer} (the
        # last barriers over NVSHMEM before and after clearing); EPv2's JIT kernels
        # deep_ep::elastic::{dispatch,combine,hybrid_dispatch,hybrid_combine,barrier,engram_fetch,
        # engram_fetch_wait,pp_send,pp_recv}_impl. Not communication, and left out: get_dispatch_layout
        # (counts tokens per rank and expert from topk_idx; in `internode` in the first release, `layout`
        # since), the mask-buffer kernels and EPv2's dispatch_copy / combine_reduce epilogues (local copies
        # and sums over the received buffer). DeepSeek's own traces (deepseek-ai/profile-data train.json,
        # DeepSeek-V3's EP64 training) spell the namespace dpsk::ep (dpsk::ep::internode::dispatch, combine,
        # notify_dispatch, cached_notify; dpsk::ep::cuda::get_dispatch_layout); the AMD port keeps the names
        # under primus_turbo::deep_ep.
        _rx(r"\b(?:deep_ep|dpsk::ep)::(?:legacy::)?(?:intranode|internode|internode_ll)::(?:notify_dispatch"
            r"|cached_notify_dispatch|dispatch|cached_notify_combine|cached_notify|combine|barrier"
            r"|clean_low_latency_buffer)\b"
            r"|\bdeep_ep::elastic::(?:hybrid_dispatch|hybrid_combine|dispatch|combine|barrier|engram_fetch_wait"
            r"|engram_fetch|pp_send|pp_recv)_impl\b"),
        "deepseek-ai/DeepEP csrc/kernels/{intranode,internode,internode_ll,runtime}.cu at ebfe47e (2025-02-25) "
        "and 79bbb54 (2025-10-11); csrc/kernels/legacy/*.cu and deep_ep/include/deep_ep/impls/*.cuh at "
        "dd758ca (2026-07-14); deepseek-ai/profile-data train.json at 4496024 (2025-03-21)", own_protocol=True),
    CommKernelRule(
        "nvshmem",
        # NVSHMEM's own kernels (nvshmemi_proxy_rma_entrypoint, nvshmemi_reduce_kernel,
        # nvshmemi_<type>_wait_until_on_stream_kernel, ...) and kernels of other libraries named for it
        _rx(r"nvshmem", re.IGNORECASE),
        "NVIDIA NVSHMEM src/host/proxy/ and src/host/coll/ (kernels named nvshmemi_*)", own_protocol=True),
    CommKernelRule(
        "collective_word",
        # a collective's name anywhere in a kernel's name (TensorRT-LLM's oneShotAllReduceKernel, a fused
        # GEMM + reduce-scatter, ...): searched for, not matched after `.*`, which backtracks through a long
        # GEMM name. `reduce` alone is no collective: at::native::reduce_kernel is a local reduction.
        _rx(r"all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|SendRecv", re.IGNORECASE),
        "the collectives' names, as NCCL and MPI spell them"),
)
RULE_NAMES = tuple(r.name for r in RULES)
OWN_PROTOCOL = frozenset(r.name for r in RULES if r.own_protocol)


@functools.lru_cache(maxsize=8192)   # a run repeats a few hundred kernel names over its thousands of launches
def comm_kernel_rule(name: str) -> str | None:
    """The name of the first rule in `RULES` that `name` matches; None: the kernel is not communication.

    >>> comm_kernel_rule("void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*)")
    'deepep'
    >>> comm_kernel_rule("ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)")
    'nccl'
    >>> comm_kernel_rule("void at::native::reduce_kernel<512, 1>(at::native::ReduceOp<float>)") is None
    True
    """
    for rule in RULES:
        if rule.pattern.search(name):
            return rule.name
    return None


def count_by_rule(rules) -> dict[str, int]:
    """{rule name: how many of `rules` (one rule name per communication kernel)}, in `RULES` order."""
    counts: dict[str, int] = {}
    for r in rules:
        counts[r] = counts.get(r, 0) + 1
    return {name: counts[name] for name in RULE_NAMES if name in counts}


def rule_counts_line(counts: dict[str, int]) -> str | None:
    """`communication kernels: 1,234 by rule nccl, 96 by rule deepep`, or None where NCCL's is the
    only rule that fired (nothing to say beyond what everyone assumes)."""
    if not counts or set(counts) == {"nccl"}:
        return None
    return "communication kernels: " + ", ".join(f"{n:,} by rule {name}" for name, n in counts.items())
