"""Collectives a larger layout needs and the base never ran: added where the framework puts them.

A one-GPU or one-stage base has no tensor-parallel all-reduce, no gradient bucket and no pipeline
send to re-time. Before the transforms re-shard and rebuild it, the missing ones are added to the
base's graph, each with the host calls that launch it, so the TP, DP and PP transforms then treat
them as they treat a measured one (`tp.change_tp` re-groups and re-times them, `rebuild` copies
them). Where Megatron-LM puts each (read from its source):

- TP (megatron/core/tensor_parallel/layers.py, mappings.py): the output of every row-parallel GEMM
  (attention projection, FC2) and of the vocabulary-parallel embedding is all-reduced over the TP
  group in forward, the compute stream waiting for it; in backward the input gradient of every
  column-parallel GEMM (QKV, FC1) is all-reduced asynchronously beside the weight-gradient GEMM
  (`LinearWithGradAccumulationAndAsyncCommunication`: `all_reduce(async_op=True)`, wgrad, then
  `handle.wait()`). s x b x h activations, BF16. The cross-entropy's all-reduces
  (cross_entropy.py) and the grad norm's are called at any group size, so a one-GPU trace already
  has them over a group of one: they become TP (and, across stages, model-parallel) collectives.
- DP (megatron/core/distributed/distributed_data_parallel.py, param_and_grad_buffer.py): gradients
  all-reduced in buckets of max(40M, 1M x DP) parameters as backward makes them ready
  (`overlap_grad_reduce`), in BF16 (`DistributedDataParallelConfig.grad_reduce_in_fp32 = False`);
  the optimizer's first kernel waits for the last bucket. The rebuild issues the buckets
  (`rebuild._grads`) from one template added here.
- PP (megatron/core/pipeline_parallel/p2p_communication.py): each exchange is a
  `batch_isend_irecv` of the s x b x h activation (or its gradient) followed by
  `torch.cuda.synchronize()`; one template of each shape the 1F1B schedule uses.
- CP, Llama 3's all-gather form (Llama Team 2024, Sec. 3.3.2; Transformer Engine's
  AttnFuncWithCPAndKVAllGather): before each attention op, forward and backward, the keys and values
  (2 x b x s x KV heads / TP x head dim, BF16) all-gathered, the attention kernel waiting for them; after
  the backward attention op their gradients reduce-scattered, the next kernel waiting.

Each collective is launched as PyTorch's ProcessGroupNCCL does: an event recorded on the compute
stream, the NCCL stream made to wait for it, the kernel launched there, an event recorded after it.
Its duration is the cluster profile's alpha-beta model at a group of one, which the transforms
re-time to the new group; the host calls take the base trace's own median where it has that call,
else the profile's `inserted.host_api_us`.
"""

from __future__ import annotations

import numpy as np

from lumos.durations import CollectiveSpec
from lumos.graph.model import EdgeClass, TaskKind, WaitKind
from lumos.model.ops import GEMM_OPS, gemm_mkn, op_class

from .grow import Growth, NewTask
from .plan import Plan

__all__ = ["missing", "add_collectives", "HOST_DEFAULTS", "dp_bucket_params"]

_GPU, _CPU = int(TaskKind.GPU), int(TaskKind.CPU)
_INTRA, _LAUNCH, _ISTREAM, _XSTREAM = (int(EdgeClass.INTRA_THREAD), int(EdgeClass.LAUNCH),
                                       int(EdgeClass.INTRA_STREAM), int(EdgeClass.INTER_STREAM))
_PHASE = {"forward": 0, "backward": 1}
LAUNCH_SEQ = ("cudaEventRecord", "cudaStreamWaitEvent", "cudaLaunchKernelExC", "cudaEventRecord",
              "cudaStreamWaitEvent")
# used where neither the base trace nor the profile names a host call's cost: the medians of the
# H200 base recording (resources/traces/h200/base_r0: cudaLaunchKernel 7.8 us, cudaStreamWaitEvent 3.8 us)
HOST_DEFAULTS = {"cudaEventRecord": 3.8, "cudaStreamWaitEvent": 3.8, "cudaLaunchKernelExC": 7.8,
                 "cudaDeviceSynchronize": 3.8}
NCCL_KERNEL = {"allreduce": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL (inserted)",
               "send": "ncclDevKernel_SendRecv (inserted send)", "recv": "ncclDevKernel_SendRecv (inserted recv)",
               "allgather": "ncclDevKernel_AllGather_RING_LL (inserted)",
               "reduce_scatter": "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL (inserted)"}
C10D_OP = {"allreduce": "c10d::allreduce_", "allgather": "c10d::_allgather_base_",
           "reduce_scatter": "c10d::_reduce_scatter_base_"}


def dp_bucket_params(dp: int, profile: dict) -> float:
    """Parameters per gradient bucket: Megatron-Core's max(40M, 1M x DP) (the profile may set the 40M)."""
    base = float(profile.get("inserted", {}).get("dp_bucket_mparams", 40.0)) * 1e6
    return max(base, 1e6 * dp)


def missing(plan: Plan, tp: int, pp: int, dp: int, cp: int = 1) -> tuple[str, ...]:
    """The kinds of collective a (tp, pp, dp, cp) layout needs that `plan`'s base has none of."""
    if not np.any(plan.graph.kind == _GPU):
        return ()               # a CPU capture: its collectives are host ops (dp_host.py)
    roles = set(plan.role[plan.role != None].tolist())  # noqa: E711 (element-wise)
    out = []
    if tp > 1 and plan.tp == 1 and "tp" not in roles:
        out.append("tp")
    if dp > 1 and plan.dp == 1 and "dp" not in roles and not plan.sharding:
        out.append("dp")
    if pp > 1 and plan.pp == 1 and not any(b.kind == "p2p" for b in plan.st.blocks):
        out.append("pp")
    if cp > 1 and plan.cp == 1 and "cp" not in roles:
        out.append("cp")
    return tuple(out)


def add_collectives(plan: Plan, kinds: tuple, tp: int, pp: int, dp: int, profile: dict) -> Plan:
    """`plan` with the collectives of `kinds` (from `missing`) added, and a note saying what and from where."""
    if not kinds:
        return plan
    grow = Growth(plan)
    host = _host_costs(plan, profile)
    roles = _stream_roles(plan)
    said = []
    if "tp" in kinds:
        n = sum(_add_tp(grow, host, roles["tp"], r) for r in plan.ranks)
        said.append(f"TP all-reduces ({n} per layer: row-parallel outputs, column-parallel input gradients; one "
                    "after the embedding)")
    if "dp" in kinds:
        for r in plan.ranks:
            _add_dp(grow, host, roles["dp"], r, dp_bucket_params(dp, profile))
        said.append(f"DP gradient buckets of {dp_bucket_params(dp, profile) / 1e6:g}M parameters overlapped "
                    "with backward")
    if "pp" in kinds:
        for r in plan.ranks:
            _add_pp(grow, host, roles["send"], roles["recv"], r)
        said.append("PP send/recv of each micro-batch's activations and gradients")
    if "cp" in kinds:
        for r in plan.ranks:
            _add_cp(grow, host, roles["cp"], r)
        said.append("CP all-gathers of each layer's keys and values (forward and backward) and reduce-scatters of "
                    "their gradients")
    out = grow.apply()
    _promote_group_of_one(out, tp, pp)
    out.inserted = tuple(sorted(set(out.inserted) | set(kinds)))
    name = profile.get("name", "the default cluster profile")
    src = plan.collectives.source
    measured = [lv.replace("_", "-") for lv in ("intra_host", "inter_host") if src.get(lv, "").startswith("nccl-tests")]
    timed = (f"the alpha-beta model fitted on the nccl-tests logs ({', '.join(measured)}; {name}'s figures elsewhere)"
             if measured else f"{name}'s alpha-beta model")
    out.notes.append(f"inserted (the base has none): {'; '.join(said)}; timed by {timed} "
                     "(docs/prediction.md, \"From one GPU to a cluster\")")
    return out


def _host_costs(plan: Plan, profile: dict) -> dict:
    """Host call -> us: the base's median where it makes the call, else the profile's, else HOST_DEFAULTS."""
    g = plan.graph
    prof = profile.get("inserted", {}).get("host_api_us", {}) or {}
    cpu = g.kind == _CPU
    out = {}
    for name in set(LAUNCH_SEQ) | {"cudaDeviceSynchronize"}:
        mine = g.dur[cpu & (g.name == name)]
        out[name] = float(np.median(mine)) if len(mine) else float(prof.get(name, HOST_DEFAULTS[name]))
    return out


def _stream_roles(plan: Plan) -> dict:
    """New stream ids, above every stream the base has (the structure keys streams by id)."""
    g, st = plan.graph, plan.st
    top = int(st.proc_role[g.proc_kind == _GPU].max(initial=0))
    return {"tp": top + 1, "dp": top + 2, "send": top + 3, "recv": top + 4, "cp": top + 5}


def _launch(grow: Growth, host: dict, rank: int, thread: int, block: int, after: int, t0: float,
            names=LAUNCH_SEQ, op: str = "c10d::allreduce_") -> list[int]:
    """The host calls that launch one collective, chained on `thread` from `t0`; their ids."""
    ids, t = [], t0
    prev = after
    for name in names:
        d = host[name]
        tid = grow.task(NewTask(name=name, kind=_CPU, proc=thread, dur=d, ts=t, rank=rank, block=block,
                                op_name=op), after=prev if prev >= 0 else None)
        if ids:
            grow.edge(ids[-1], tid, _INTRA)
        ids.append(tid)
        prev = tid
        t += d
    return ids


def _kernel(grow: Growth, kind: str, stream: int, rank: int, block: int, ts: float, nbytes: float, role: str,
            layer: int = -1, phase: int = -1) -> int:
    plan = grow.plan
    spec = CollectiveSpec(kind, nbytes, (rank,))
    return grow.task(NewTask(name=NCCL_KERNEL[kind], kind=_GPU, proc=stream, dur=plan.collectives.time_us(spec),
                             ts=ts, rank=rank, block=block, comm=True, layer=layer, phase=phase, coll=kind,
                             group=(rank,), nbytes=nbytes, op_name=C10D_OP.get(kind, f"c10d::{kind}"), role=role))


def _out_edges(g, src: int, cls: int) -> np.ndarray:
    return np.flatnonzero((g.src == src) & (g.cls == cls))


def _launcher(g, task: int) -> int:
    e = np.flatnonzero((g.dst == task) & (g.cls == _LAUNCH))
    return int(g.src[e[0]]) if len(e) else -1


def _activation_bytes(plan: Plan) -> float:
    s = plan.shape
    return 2.0 * s.seq * s.micro_batch * s.hidden     # s x b x h, BF16


def _add_tp(grow: Growth, host: dict, role: int, rank: int) -> int:
    """TP all-reduces in `rank`'s layer and embedding blocks (one layer's count returned)."""
    plan = grow.plan
    g, st = plan.graph, plan.st
    sh = plan.shape
    tokens, h, f = sh.seq * sh.micro_batch, sh.hidden, sh.ffn
    q, qkv, fc1 = sh.heads * sh.dhead, sh.qkv_width(), sh.fc1_width()   # 3h, f for GPT
    stream = grow.stream(rank, role, "TP")
    per_layer = 0
    prev_ar = None
    for bi in sorted((i for i, b in enumerate(st.blocks) if b.rank == rank), key=lambda i: st.blocks[i].start):
        b = st.blocks[bi]
        if b.kind not in ("layer", "embedding") or not len(b.tasks):
            continue
        gpu = b.tasks[g.kind[b.tasks] == _GPU]
        gpu = gpu[np.argsort(g.ts[gpu], kind="stable")]
        sites = []      # (kernel, how many compute kernels later the stream waits)
        skip_to = 0     # a backward site's next GEMM is its weight gradient (which T == f would also match)
        for k, t in enumerate(gpu.tolist()):
            op = str(st.op_name[t])
            if k < skip_to or str(g.name[t]).startswith(("Memset", "Memcpy")):   # cuBLAS's workspace memset
                continue
            if b.kind == "embedding":
                if b.phase == "forward" and op == "aten::embedding":
                    sites.append((k, 1))
                continue
            if op not in GEMM_OPS:
                continue
            mkn = gemm_mkn(op, st.op_dims[t])
            if mkn is None or mkn[0] != tokens or mkn[2] != h:
                continue
            if b.phase == "forward" and mkn[1] in (q, f):          # attention projection, FC2 (down)
                sites.append((k, 1))
            elif b.phase == "backward" and mkn[1] in (qkv, fc1) and mkn[1] != h:   # QKV, FC1 dgrad
                wgrad = next((j for j in range(k + 1, len(gpu)) if str(st.op_name[gpu[j]]) in GEMM_OPS
                              and not str(g.name[gpu[j]]).startswith(("Memset", "Memcpy"))), None)
                if wgrad is None:
                    continue
                sites.append((k, wgrad - k + 1))
                skip_to = wgrad + 1
        if b.kind == "layer" and b.layer == 0 and b.phase == "forward" and b.mb == 0:
            per_layer = len(sites)
        for k, later in sites:
            prev_ar = _insert_after(grow, host, rank, bi, gpu, k, "allreduce", stream, _activation_bytes(plan), "tp",
                                    _PHASE.get(b.phase, -1), prev_ar, later)
    return per_layer * 2


def _insert_after(grow: Growth, host: dict, rank: int, bi: int, gpu: np.ndarray, k: int, kind: str, stream: int,
                  nbytes: float, role: str, phase: int, prev=None, later: int = 1):
    """A collective launched after kernel `gpu[k]`'s launcher, starting after that kernel and after `prev` on its
    stream, with kernel `gpu[k + later]` waiting for it (1: blocking, as a forward TP all-reduce or a CP gather;
    more: beside the kernels between, as a backward TP all-reduce beside its weight gradient); its id, or `prev`
    where the kernel has no launcher."""
    g = grow.plan.graph
    x = int(gpu[k])
    c = _launcher(g, x)
    if c < 0:
        return prev
    calls = _launch(grow, host, rank, int(g.proc[c]), bi, c, float(g.ts[c] + g.dur[c]), op=C10D_OP[kind])
    for e in _out_edges(g, c, _INTRA).tolist():       # the thread's next call now follows the launch sequence
        grow.drop.add(e)
        grow.edge(calls[-1], int(g.dst[e]), _INTRA, float(g.lag[e]))
    grow.edge(c, calls[0], _INTRA, 0.0)
    new = _kernel(grow, kind, stream, rank, bi, float(g.ts[x] + g.dur[x]), nbytes, role, int(g.layer[x]), phase)
    grow.after[new] = x
    grow.edge(calls[2], new, _LAUNCH, 0.0)
    grow.edge(x, new, _XSTREAM, 0.0)
    if prev is not None:
        grow.edge(prev, new, _ISTREAM, 0.0)
    if k + later < len(gpu):
        grow.edge(new, int(gpu[k + later]), _XSTREAM, 0.0)
    return new


def _add_cp(grow: Growth, host: dict, role: int, rank: int) -> None:
    """Llama 3's context-parallel collectives in `rank`'s layer blocks (over a group of one: `cp.change_cp`
    re-groups them): the keys and values gathered before each attention op, their gradients reduce-scattered
    after the backward one."""
    plan = grow.plan
    g, st = plan.graph, plan.st
    sh = plan.shape
    nbytes = 2.0 * 2 * sh.micro_batch * sh.seq * (sh.kv // sh.tp) * sh.dhead      # K and V of the whole sequence
    stream = grow.stream(rank, role, "CP")
    prev = None
    for bi in sorted((i for i, b in enumerate(st.blocks) if b.rank == rank and b.kind == "layer"),
                     key=lambda i: st.blocks[i].start):
        b = st.blocks[bi]
        gpu = b.tasks[(g.kind[b.tasks] == _GPU) & ~g.comm[b.tasks]]
        gpu = gpu[np.argsort(g.ts[gpu], kind="stable")]
        phase = _PHASE.get(b.phase, -1)
        for k in [k for k, t in enumerate(gpu.tolist()) if op_class(str(st.op_name[t])) == "attention"]:
            if k > 0:
                prev = _insert_after(grow, host, rank, bi, gpu, k - 1, "allgather", stream, nbytes, "cp", phase, prev)
            if b.phase == "backward":
                prev = _insert_after(grow, host, rank, bi, gpu, k, "reduce_scatter", stream, nbytes, "cp", phase, prev)


def _anchor(g, blocks: list, rank: int, phase: str):
    """(block, its last CPU task, its last compute kernel) of `rank`'s last forward or backward step block,
    which an added template follows; None where the rank has none or it lacks either."""
    steps = [b for b in blocks if b.rank == rank and b.phase == phase and b.kind in ("layer", "embedding", "head")]
    if not steps:
        return None
    last = max(steps, key=lambda b: b.start)
    t = last.tasks
    cpu, gpu = t[g.kind[t] == _CPU], t[(g.kind[t] == _GPU) & ~g.comm[t]]
    if not len(cpu) or not len(gpu):
        return None
    latest = lambda x: int(x[np.argmax(g.ts[x] + g.dur[x])])   # noqa: E731
    return last, latest(cpu), latest(gpu)


def _add_dp(grow: Growth, host: dict, role: int, rank: int, bucket_params: float) -> None:
    """One gradient-bucket template after `rank`'s last backward block; the optimizer waits for it."""
    plan = grow.plan
    g, st = plan.graph, plan.st
    found = _anchor(g, st.blocks, rank, "backward")
    if found is None:
        return
    last, cpu, gpu = found
    stream = grow.stream(rank, role, "DP")
    bi = len(st.blocks) + len(grow.new_blocks)
    t0 = float(g.ts[cpu] + g.dur[cpu])
    calls = _launch(grow, host, rank, int(g.proc[cpu]), bi, -1, t0, names=LAUNCH_SEQ[:4])
    grow.edge(cpu, calls[0], _INTRA, 0.0)
    ar = _kernel(grow, "allreduce", stream, rank, bi, max(float(g.ts[gpu] + g.dur[gpu]), t0), 2.0 * bucket_params,
                 "dp")
    grow.edge(calls[2], ar, _LAUNCH, 0.0)
    grow.edge(gpu, ar, _XSTREAM, 0.0)
    opt = [b for b in st.blocks if b.rank == rank and b.kind == "optimizer"]
    first_opt = _first_kernel(g, opt)
    if first_opt >= 0:
        grow.edge(ar, first_opt, _XSTREAM, 0.0)
    grow.new_block("dp", rank, last.thread_role, bi)


def _first_kernel(g, blocks: list) -> int:
    tasks = np.concatenate([b.tasks for b in blocks]) if blocks else np.zeros(0, np.int64)
    tasks = tasks[(g.kind[tasks] == _GPU) & ~g.comm[tasks]]
    return int(tasks[np.argmin(g.ts[tasks])]) if len(tasks) else -1


def _add_pp(grow: Growth, host: dict, send_role: int, recv_role: int, rank: int) -> None:
    """A template of each exchange the 1F1B schedule makes: send, receive, and both at once."""
    plan = grow.plan
    g, st = plan.graph, plan.st
    found = _anchor(g, st.blocks, rank, "forward")
    if found is None:
        return
    last, cpu, gpu = found
    streams = {"send": grow.stream(rank, send_role, "PP send"), "recv": grow.stream(rank, recv_role, "PP recv")}
    nbytes = _activation_bytes(plan)
    for shape in (("send",), ("recv",), ("send", "recv")):
        bi = len(st.blocks) + len(grow.new_blocks)
        t = float(g.ts[cpu] + g.dur[cpu])
        prev = cpu
        for kind in shape:
            calls = _launch(grow, host, rank, int(g.proc[cpu]), bi, -1, t, op=f"c10d::{kind}")
            grow.edge(prev, calls[0], _INTRA, 0.0)
            k = _kernel(grow, kind, streams[kind], rank, bi, t + sum(host[n] for n in LAUNCH_SEQ[:3]), nbytes, "pp")
            grow.edge(calls[2], k, _LAUNCH, 0.0)
            grow.edge(gpu, k, _XSTREAM, 0.0)     # ProcessGroupNCCL: the NCCL stream waits for the compute stream
            prev = calls[-1]
            t = float(grow.tasks[calls[-1] - g.n_tasks].ts + host[LAUNCH_SEQ[-1]])
        sync = grow.task(NewTask(name="cudaDeviceSynchronize", kind=_CPU, proc=int(g.proc[cpu]),
                                 dur=host["cudaDeviceSynchronize"], ts=t, rank=rank, block=bi,
                                 wait_kind=int(WaitKind.DEVICE), wait_target=rank,
                                 op_name="c10d::batch_isend_irecv"))
        grow.edge(prev, sync, _INTRA, 0.0)
        grow.new_block("p2p", rank, last.thread_role, bi, shape=shape)


def _promote_group_of_one(plan: Plan, tp: int, pp: int) -> None:
    """A one-GPU trace's cross-entropy and grad-norm all-reduces (a group of one, role 'other') are the
    TP group's at TP > 1, and the grad norm's the model-parallel group's across stages."""
    st = plan.st
    kinds = np.array([b.kind for b in st.blocks] + [""], dtype=object)[st.task_block]
    one = np.array([c == "allreduce" and g is not None and len(g) == 1 and r == "other"
                    for c, g, r in zip(st.coll, st.group, plan.role)], bool)
    if tp > 1:
        plan.role[one & (kinds == "head")] = "tp"
    if pp > 1:
        plan.role[one & (kinds == "optimizer")] = "mp"
    elif tp > 1:
        plan.role[one & (kinds == "optimizer")] = "tp"
