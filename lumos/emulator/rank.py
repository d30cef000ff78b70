"""The CPU side of one rank: a main thread (forward, pipeline p2p, optimizer) and an autograd
thread (backward), launching onto the device's streams under a Megatron 1F1B schedule.

Each thread keeps its own clock and only yields to the simulation where the real
program would block (stream synchronize), so host overhead, launch latency and
stalls shape the timeline without costing a simulation event each.
"""

from __future__ import annotations


from lumos.trace.annotation import EMBEDDING, HEAD, layer_block, range_name

from .engine import Thread, COMM, COMPUTE, CP_STREAM, MP_STREAM, WAIT, Comm, Item
from .program import BF16, CPComm, CPRing, KSpec, MoEStep, OpSpec, TPAllReduce, TPWait
from .expert_parallel import ExpertParallel
from .fsdp_rank import ShardedDataParallel
from .pipeline_overlap import RECV_BWD_S, RECV_S, SEND_BWD_S, SEND_S, OverlappedPipeline
from .ring_attention import RingAttention
from .settings import checkpointed_layers

COMPUTE_S, TP_S, DP_S = 7, 20, 24
# the pipeline's p2p streams, SEND_S, RECV_S = 28, 32; interleaved 1F1B: a batch sends (and receives) both ways
# at once; the backward direction's p2p gets its own streams (SEND_BWD_S, RECV_BWD_S = 29, 33), else each rank's
# second send queues behind its first around the ring and no batch completes (NCCL runs one group's sends and
# receives together)


def _chunks(sizes, stage: int, per_block: int) -> list[list[tuple]]:
    """The blocks of each model chunk of `stage`, as (first layer, layers), given every stage's chunk sizes:
    Megatron-Core's layer offsets (megatron/core/transformer/transformer_layer.py,
    get_transformer_layer_offset), chunk c of stage s holding virtual stage c * pp + s, whose layers follow
    every virtual stage before it; blocks of `per_block` layers, or one per chunk (0)."""
    pp = len(sizes)
    out = []
    for c, n in enumerate(sizes[stage]):
        first = sum(sizes[s2][c2] for c2 in range(len(sizes[stage])) for s2 in range(pp) if c2 * pp + s2 < c * pp + stage)
        step = per_block or max(n, 1)
        out.append([(l, min(step, first + n - l)) for l in range(first, first + n, step)])
    return out


class RankProgram(ExpertParallel, ShardedDataParallel, RingAttention, OverlappedPipeline):
    def __init__(self, emu, rank: int, device, rand, recorder, program, progress):
        self.emu, self.rank, self.dev, self.rand, self.rec = emu, rank, device, rand, recorder
        self.env = device.env
        self.p = program
        self.progress = progress
        s = emu.settings
        self.legacy = s.legacy
        self.h = s.knobs.host
        self.topo = emu.topo
        self.stage, self.dpi, self.tpi = self.topo.coords(rank)
        self.pp, self.m, self.vp = s.pp, s.model.num_microbatches, s.vp
        # the stage's model chunks (one unless interleaved), each as its blocks: (first layer, layers)
        self.chunks = _chunks([s.chunks_of(st) for st in range(s.pp)], self.stage,
                              program.layers_per_block if program.level != "stage" else 0)
        self.n_layers = sum(s.chunks_of(self.stage))
        self.is_first, self.is_last = self.stage == 0, self.stage == s.pp - 1
        pid = recorder.pid
        self.main = Thread(pid, self.h.op_pre_us, self.h.op_gap_us)
        self.ag = Thread(pid + 1, self.h.autograd_pre_us, self.h.autograd_gap_us)
        recorder.threads[pid] = "python main thread"
        recorder.threads[pid + 1] = "autograd thread (device 0)"
        self.tp_group = self.topo.tp_group(rank)
        self.dp_group = self.topo.dp_group(rank)
        self.ccost = device.fabric.costs
        sched = s.knobs.schedule
        # the grad-norm all-reduce: over the TP group, or Megatron's model-parallel group (TP x PP)
        self.norm_group = self.topo.mp_group(rank) if sched.grad_norm_group == "model_parallel" else self.tp_group
        self.seq: dict = {}
        self.act_elems = s.model.seq_length // s.cp * s.model.micro_batch_size * s.model.hidden   # the rank's tokens
        self.cp_group = self.topo.cp_group(rank) if s.cp > 1 else None
        # Megatron's scatter/gather of pipeline p2p: each TP rank sends 1/tp of the activation, the receiver
        # all-gathers it over the TP group (only where tp divides it; with tp 1 there is nothing to split)
        self.p2p_split = s.tp if (sched.p2p_scatter_gather and s.tp > 1 and self.act_elems % s.tp == 0) else 1
        self.grad_bytes = s.knobs.comm.grad_dtype_bytes
        tr = s.training
        self.recompute = tr.recompute != "none"
        # per-layer selective AC (recompute=selective_layer): the rank's every ac_every-th block, counted over its
        # chunks in order (torchtitan's process-wide count, `settings.checkpointed_layers`); else all or none
        self.checkpointed = (checkpointed_layers([l for c in self.chunks for first, n in c
                                                  for l in range(first, first + n)], tr.ac_every)
                             if tr.recompute == "selective_layer" else None)
        self.after_backward = tr.dp_allreduce == "after_backward"
        self.bucket = (tr.after_backward_bucket_mparams if self.after_backward else s.knobs.comm.bucket_mparams) * 1e6
        self.root_params = (program.embed_params if self.is_first else 0) + (program.embed_params if self.is_last else 0)
        self.stage_params = self.n_layers * program.layer_params + self.root_params
        # FSDP2 (training.dp_sharding: fsdp, FULL_SHARD): every block of layers a unit, the stage's
        # embedding and head the root unit; `gathered`: all-gathers issued by a backward prefetch.
        # fsdp_grad_op (reshard_after_forward=False): a unit stays gathered from its forward to its
        # backward, so the backward gathers nothing
        self.sharded = tr.dp_sharding in ("fsdp", "fsdp_grad_op")
        self.reshard_after_forward = tr.dp_sharding == "fsdp"
        # Megatron's distributed optimizer (training.dp_sharding: zero1): buckets reduce-scattered, Adam
        # over the rank's shard, then every bucket's parameters all-gathered (`bucket_params`)
        self.zero1 = tr.dp_sharding == "zero1"
        self.bucket_params: list[float] = []
        self.gathered: dict = {}
        self.ready_params = 0.0
        self.launched_params = 0.0
        self.pending_tp = []
        self.dp_done = []
        self.finished = False
        self._op_args: dict = {}
        self._init_moe(s)

    # -- host primitives ------------------------------------------------------
    def _jit(self, x: float) -> float:
        return x * self.rand.lognormal(self.h.jitter_sigma)

    def _jit_block(self, x: float) -> float:
        """A long python block (thousands of interpreter steps): its relative spread is far smaller
        than one op's, so it jitters with `host.block_jitter_sigma`."""
        return x * self.rand.lognormal(self.h.block_jitter_sigma)

    def op_begin(self, th: Thread, name: str, args: dict, gap: float | None = None) -> tuple:
        th.t += self._jit(th.gap if gap is None else gap)
        if self.rand.uniform() < self.h.stall_prob:   # GC pause, page fault, preemption
            th.t += self.h.stall_median_us * self.rand.lognormal(self.h.stall_sigma)
        ext = self.rec.next_ext()
        args["External id"] = ext
        frame = (th.t, "cpu_op", name, args, ext)
        th.stack.append(frame)
        th.t += self._jit(th.pre)
        return frame

    def op_end(self, th: Thread) -> None:
        ts, cat, name, args, _ = th.stack.pop()
        if cat == "cpu_op":
            th.t += self._jit(self.h.op_post_us)
        self.rec.cpu.append((ts, th.t, cat, name, th.tid, args))

    def ann_begin(self, th: Thread, name: str) -> None:
        ext = self.rec.next_ext()
        th.stack.append((th.t, "user_annotation", name, {"External id": ext}, ext))

    def _ext(self, th: Thread) -> int:
        return th.stack[-1][4] if th.stack else 0

    def _runtime(self, th: Thread, name: str, dur: float) -> tuple[int, int, float]:
        corr, ext, ts = self.rec.next_corr(), self._ext(th), th.t
        th.t += self._jit(dur)
        self.rec.rt.append((ts, th.t, name, th.tid, corr, ext))
        return corr, ext, ts

    def launch(self, th: Thread, sid: int, spec: KSpec, comm: Comm | None = None) -> None:
        if comm is not None:
            name, dur = "cudaLaunchKernelExC", self.h.nccl_launch_us
        elif spec.runtime == "cudaMemcpyAsync":
            name, dur = "cudaMemcpyAsync", self.h.memcpy_call_us
        else:
            name, dur = spec.runtime, self.h.launch_us
        corr, ext, ts = self._runtime(th, name, dur)
        item = Item(COMM if comm is not None else COMPUTE, ts + self.h.gpu_launch_latency_us,
                    spec, corr, ext, comm=comm)
        self.dev.streams[sid].submit(item)

    def record(self, th: Thread, sid: int) -> tuple:
        corr, _, _ = self._runtime(th, "cudaEventRecord", self.h.event_record_us)
        return corr, sid, self.dev.streams[sid].last_done

    def wait(self, th: Thread, sid: int, rec: tuple) -> None:
        rcorr, rsid, done = rec
        corr, ext, ts = self._runtime(th, "cudaStreamWaitEvent", self.h.stream_wait_us)
        self.dev.streams[sid].submit(Item(WAIT, ts, wait_on=done))
        self.rec.sync.append((ts, th.t, sid, {
            "External id": ext, "cuda_sync_kind": "Stream Wait Event", "wait_on_stream": rsid,
            "wait_on_cuda_event_record_corr_id": rcorr, "stream": sid, "correlation": corr,
            "device": self.dev.rank % 8}))

    def stream_sync(self, th: Thread, sid: int):
        """cudaStreamSynchronize: the thread blocks until the last op on `sid` is done."""
        ts, corr, ext = th.t, self.rec.next_corr(), self._ext(th)
        if th.t > self.env.now:
            yield self.env.timeout(th.t - self.env.now)
        done = self.dev.streams[sid].last_done
        if done is not None and done.callbacks is not None:
            yield done
        th.t = max(self.env.now + self._jit(self.h.sync_return_us), ts + 1.0)
        self.rec.rt.append((ts, th.t, "cudaStreamSynchronize", th.tid, corr, ext))
        self.rec.sync.append((ts, th.t, sid, {"External id": ext, "cuda_sync_kind": "Stream Sync",
                                              "stream": sid, "correlation": corr,
                                              "device": self.dev.rank % 8}))

    # -- communication ------------------------------------------------------------
    def _comm(self, group, kind: str, nelems: int, src=-1, dst=-1, repeat: int = 1, name: str | None = None) -> Comm:
        """One call on `group`; `nelems` is the message (all-gather: the gathered output, each rank
        contributing an n-th of it)."""
        if kind in ("send", "recv"):
            ck = (group.key, src, dst)
        else:
            ck = (group.key, kind)
        n = self.seq.get(ck, 0)
        self.seq[ck] = n + 1
        nbytes = nelems * 2.0 if kind != "allreduce" or group.kind not in ("dp", "edp") else nelems * self.grad_bytes
        in_elems = nelems // len(group.ranks) if kind == "allgather" else nelems
        out_elems = nelems // len(group.ranks) if kind == "reduce_scatter" else nelems
        args = {"Collective name": name or kind, "In msg nelems": in_elems if kind != "recv" else 0,
                "Out msg nelems": out_elems if kind != "send" else 0, "Group size": len(group.ranks),
                "dtype": "BFloat16", "In split size": "[]", "Out split size": "[]",
                "Process Group Name": group.name, "Process Group Description": f"{group.kind}_group",
                "Process Group Ranks": group.ranks_str}
        if repeat > 1:
            args["Repeat"] = repeat
        return Comm(group, kind, nbytes, ck + (n,), args, src, dst, repeat)

    def _comm_op(self, th: Thread, sid: int, comm: Comm, name: str, after_compute: bool = True):
        """c10d op > record_param_comms > [record on compute, wait, NCCL launch, record end].
        `after_compute=False`: the collective does not wait for the compute stream (FSDP's
        all-gather of parameters, which no earlier kernel writes)."""
        gap = self.h.comm_op_gap_us   # c10d calls: python of the caller, not of a model op (None: same)
        self.op_begin(th, name, {"Input Dims": [[comm.args["In msg nelems"] or comm.args["Out msg nelems"]]],
                                 "Input type": [BF16]}, gap)
        a = dict(comm.args)
        a["Input Dims"] = [[a["In msg nelems"] or a["Out msg nelems"]]]
        self.op_begin(th, "record_param_comms", a, gap)
        if after_compute:
            self.wait(th, sid, self.record(th, COMPUTE_S))
        g = comm.group
        spec = KSpec(self.ccost.kernel_name(comm.kind, comm.nbytes, len(g.ranks), g.hosts, g.per_host), 0.0)
        self.launch(th, sid, spec, comm)
        end = self.record(th, sid)
        self.op_end(th)
        self.op_end(th)
        return end

    def tp_allreduce(self, th: Thread, nelems: int, overlap: bool, repeat: int = 1) -> None:
        end = self._comm_op(th, TP_S, self._comm(self.tp_group, "allreduce", nelems, repeat=repeat),
                            "c10d::allreduce_")
        if overlap:
            self.pending_tp.append(end)
        else:
            self._wait_op(th, [end])

    def _wait_op(self, th: Thread, ends: list) -> None:
        self.op_begin(th, "aten::wait", {"Input Dims": [[]], "Input type": [""]})
        for e in ends:
            self.wait(th, COMPUTE_S, e)
        self.op_end(th)

    # -- model steps ------------------------------------------------------------
    def run_steps(self, th: Thread, steps, built_now: bool = False) -> None:
        """`built_now`: ops made for this call (an MoE layer's, sized by its routing), whose args are not
        cached by the op's id (a freed op's id is reused by the next)."""
        for st in steps:
            if isinstance(st, OpSpec):
                args = None if built_now else self._op_args.get(id(st))
                if args is None:   # built once per op of the program; each event gets its own copy
                    args = {"Input Dims": [list(d) for d in st.dims], "Input type": list(st.types)}
                    if not built_now:
                        self._op_args[id(st)] = args
                self.op_begin(th, st.name, dict(args))
                if st.gemm and th is self.main:
                    th.t += self._jit(self.h.gemm_extra_us)
                for k in st.kernels:
                    self.launch(th, COMPUTE_S, k)
                self.op_end(th)
            elif isinstance(st, TPAllReduce):
                self.tp_allreduce(th, st.nelems, st.overlap, st.repeat)
            elif isinstance(st, TPWait):
                self._wait_op(th, [self.pending_tp.pop(0)])
            elif isinstance(st, CPComm):
                name = "c10d::_allgather_base_" if st.kind == "allgather" else "c10d::_reduce_scatter_base_"
                comm = self._comm(self.cp_group, st.kind, st.nelems, repeat=st.repeat)
                self._wait_op(th, [self._comm_op(th, CP_STREAM, comm, name)])
            elif isinstance(st, MoEStep):
                self._moe_step(th, st)
            elif isinstance(st, CPRing):
                self._cp_ring(th, st)

    def _annotated(self, th: Thread, name: str, steps) -> None:
        self.ann_begin(th, name)
        self.run_steps(th, steps)
        self.op_end(th)

    def forward(self, i: int, chunk: int = 0) -> None:
        th = self.main
        th.t += self._jit_block(self.h.forward_step_us)   # Megatron forward_step python: get_batch, masks, timers
        if self.sharded and self.root_params:
            self._unshard(th, "", self.root_params, "pre_forward")
        if self.is_first and chunk == 0:
            self._annotated(th, range_name(EMBEDDING, "forward", i), self.p.embed_fwd)
        for blk in self.chunks[chunk]:
            if self.sharded:
                self._unshard(th, self._unit(blk), self._unit_params(blk), "pre_forward")
            self._moe_at = (blk[0], i)
            if self.moe is not None and self.moe_sync:   # the thread blocks on the GPU inside the block
                self.ann_begin(th, range_name(self._layers(blk), "forward", i))
                yield from self._run_syncing(th, self._steps(blk)[0])
                self.op_end(th)
            else:
                self._annotated(th, range_name(self._layers(blk), "forward", i), self._steps(blk)[0])
            if self.sharded:   # FULL_SHARD frees the gathered parameters, SHARD_GRAD_OP keeps them (no device work)
                self._annotated(th, self._fsdp("post_forward", self._unit(blk)), ())
        if self.is_last and chunk == self.vp - 1:
            self._annotated(th, range_name(HEAD, "forward", i), self.p.head_fwd)
        self.progress(1)

    def backward(self, i: int, chunk: int = 0) -> None:
        """Runs on the autograd thread while the main thread waits (inline: no simulation yield needed).
        The last micro-batch's backward of a chunk makes its gradients ready: with chunks, each chunk's
        buckets are flushed after it (Megatron keeps a gradient buffer per model chunk)."""
        th, last_mb = self.ag, i == self.m - 1
        self.main.t += self._jit_block(self.h.backward_step_us)   # backward_step python before autograd
        th.t = max(th.t, self.main.t + self._jit(self.h.handoff_us))
        blocks = list(reversed(self.chunks[chunk]))
        if self.sharded and self.root_params:
            self._unshard(th, "", self.root_params, "pre_backward", prefetch=blocks[0] if blocks else None)
        if self.is_last and chunk == self.vp - 1:
            self._annotated(th, range_name(HEAD, "backward", i), self.p.head_bwd)
            if last_mb:
                self._grads_ready(th, self.p.embed_params)
        for k, blk in enumerate(blocks):
            if self.sharded:
                self._unshard(th, self._unit(blk), self._unit_params(blk), "pre_backward",
                              prefetch=blocks[k + 1] if k + 1 < len(blocks) else None)
            name = range_name(self._layers(blk), "backward", i)
            fwd, bwd = self._steps(blk)
            self._moe_at = (blk[0], i)
            redo = self._recomputed(blk) if self.recompute else None
            if redo is not None:   # a checkpointed layer: its forward (or SelectiveAC's share) re-runs in its backward
                self.ann_begin(th, name)
                self._annotated(th, range_name(self._layers(blk), "recompute", i), redo)
                self.run_steps(th, bwd)
                self.op_end(th)
            else:
                self._annotated(th, name, bwd)
            if last_mb:
                self._grads_ready(th, self.p.dense_params * blk[1])
                if self.p.expert_params:
                    self._expert_grads_ready(th, self.p.expert_params * blk[1])
                if self.sharded:
                    self._reduce_scatter(th, self._unit(blk), self._unit_params(blk))
        if self.is_first and chunk == 0:
            self._annotated(th, range_name(EMBEDDING, "backward", i), self.p.embed_bwd)
            if last_mb:
                self._grads_ready(th, self.p.embed_params)
        if last_mb:
            self._grads_ready(th, 0.0, flush=True)
            if self.p.expert_params:
                self._expert_grads_ready(th, 0.0, flush=True)
            if self.sharded and self.root_params:
                self._reduce_scatter(th, "", self.root_params)
        self.main.t = max(self.main.t, th.t + self._jit(self.h.handoff_us))
        self.progress(1)

    def _steps(self, blk: tuple) -> tuple:
        """(forward, backward) steps of a block of layers: one layer's, or the block's stacked."""
        if blk[1] == self.p.layers_per_block:
            return self.p.layer_fwd, self.p.layer_bwd
        return self.p.stacked(blk[1])[:2]

    def _recomputed(self, blk: tuple) -> tuple | None:
        """What a checkpointed block's backward re-runs of its forward (`Program.layer_recompute`); with per-layer
        selective AC the forward of its checkpointed layers (a stacked block: as many layers' forward), None
        where it holds none."""
        if self.checkpointed is not None:
            k = sum(l in self.checkpointed for l in range(blk[0], blk[0] + blk[1]))
            return None if k == 0 else self.p.layer_fwd if blk[1] == k == self.p.layers_per_block \
                else self.p.stacked(k)[0]
        if blk[1] == self.p.layers_per_block:
            return self.p.layer_recompute
        stacked = self.p.stacked(blk[1])
        return stacked[2] if len(stacked) > 2 else stacked[0]

    @staticmethod
    def _span(blk: tuple) -> str:
        """The model layers of a block (first layer, layers): 7, or 6-11 (granularity=stage)."""
        first, n = blk
        return f"{first}" if n == 1 else f"{first}-{first + n - 1}"

    @staticmethod
    def _layers(blk: tuple) -> str:
        """Annotation block of a block: layer_7, or layers_6-11 (`lumos.trace.annotation`)."""
        return layer_block(blk[0], blk[0] + blk[1] - 1)

    def _grads_ready(self, th: Thread, params: float, flush: bool = False) -> None:
        """Overlapped DP gradient all-reduce: launch every bucket that is now full.

        With dp_allreduce=after_backward nothing is launched here: `optimizer` reduces
        every gradient once backward is done (DeepSpeed's allreduce_gradients)."""
        self.ready_params += params
        if self.after_backward or self.sharded:
            return
        self._launch_buckets(th, flush)

    def due_buckets(self, ready: float, launched: float, flush: bool) -> list[float]:
        """The parameters of each bucket now full of ready gradients (`flush`: and what is left), in order."""
        out = []
        while ready - launched >= self.bucket or (flush and ready - launched > 0):
            out.append(min(self.bucket, ready - launched))
            launched += out[-1]
        return out

    def _launch_buckets(self, th: Thread, flush: bool) -> None:
        for n in self.due_buckets(self.ready_params, self.launched_params, flush):
            self.launched_params += n
            if self.topo.dp == 1:
                continue
            if self.zero1:   # param_and_grad_buffer.py start_grad_sync: each rank keeps its shard of the sum
                self.bucket_params.append(n)
                comm = self._comm(self.dp_group, "reduce_scatter", int(n))
                self.dp_done.append(self._comm_op(th, DP_S, comm, "c10d::_reduce_scatter_base_"))
                continue
            comm = self._comm(self.dp_group, "allreduce", int(n))
            self.dp_done.append(self._comm_op(th, DP_S, comm, "c10d::allreduce_"))

    # -- pipeline p2p --------------------------------------------------------------
    def p2p(self, send_fwd=False, recv_fwd=False, send_bwd=False, recv_bwd=False):
        """A batched isend/irecv with the neighbouring stages, then Megatron's batch_p2p_sync."""
        th, topo = self.main, self.topo
        prev = topo.rank(self.stage - 1, self.dpi, self.tpi) if not self.is_first else None
        nxt = topo.rank(self.stage + 1, self.dpi, self.tpi) if not self.is_last else None
        if self.vp > 1:   # interleaved: the pipeline is a ring (the last stage feeds the first one's next chunk)
            prev = topo.rank((self.stage - 1) % self.pp, self.dpi, self.tpi)
            nxt = topo.rank((self.stage + 1) % self.pp, self.dpi, self.tpi)
        bwd = self.vp > 1   # the backward direction on streams of its own (SEND_BWD_S)
        ops = []
        if send_fwd and nxt is not None:
            ops.append(("send", nxt, self.rank, nxt, SEND_S))
        if recv_bwd and nxt is not None:
            ops.append(("recv", nxt, nxt, self.rank, RECV_BWD_S if bwd else RECV_S))
        if send_bwd and prev is not None:
            ops.append(("send", prev, self.rank, prev, SEND_BWD_S if bwd else SEND_S))
        if recv_fwd and prev is not None:
            ops.append(("recv", prev, prev, self.rank, RECV_S))
        if not ops:
            return
        self.op_begin(th, "c10d::batch_isend_irecv", {"Input Dims": [[]], "Input type": [""]})
        ends = []
        for kind, peer, src, dst, sid in ops:
            comm = self._comm(topo.pp_channel(self.rank, peer), kind, self.act_elems // self.p2p_split, src, dst)
            ends.append(self._comm_op(th, sid, comm, "c10d::send" if kind == "send" else "c10d::recv_"))
        self._wait_op(th, ends)
        if self.emu.settings.knobs.schedule.p2p_sync:
            for sid in sorted({op[4] for op in ops}):
                yield from self.stream_sync(th, sid)
        self.op_end(th)
        if self.p2p_split > 1:   # gather_split_1d_tensor: torch.distributed._all_gather_base over the TP group
            for peer in (prev, nxt):   # Megatron gathers tensor_recv_prev, then tensor_recv_next
                if any(k == "recv" and p == peer for k, p, *_ in ops):
                    comm = self._comm(self.tp_group, "allgather", self.act_elems, name="_allgather_base")
                    self._wait_op(th, [self._comm_op(th, TP_S, comm, "c10d::_allgather_base_")])

    # -- the iteration ------------------------------------------------------------
    def run(self):
        th, m = self.main, self.m
        self.ann_begin(th, f"ProfilerStep#{self.emu.settings.step}")
        th.t += self._jit_block(self.h.step_start_us)   # iteration setup python (timers, data iterator)
        self.op_begin(th, "aten::zero_", {"Input Dims": [[int(self.stage_params)]], "Input type": [BF16]})
        nbytes = int(self.stage_params * self.grad_bytes)
        self.launch(th, COMPUTE_S, KSpec("Memset (Device)", self.emu.kcost.memset(nbytes), cat="gpu_memset",
                                         runtime="cudaMemsetAsync", nbytes=nbytes))
        self.op_end(th)
        if self.vp > 1:
            yield from self._interleaved()
            yield from self.optimizer()
            self.op_end(th)
            self.finished = True
            return
        w = min(self.pp - self.stage - 1, m)
        rem = m - w
        for i in range(w):
            yield from self.p2p(recv_fwd=True)
            yield from self.forward(i)
            yield from self.p2p(send_fwd=True)
        if rem > 0:
            yield from self.p2p(recv_fwd=True)
        for j in range(rem):
            yield from self.forward(j + w)
            yield from self.p2p(send_fwd=True, recv_bwd=True)
            self.backward(j)
            if j == rem - 1:
                yield from self.p2p(send_bwd=True)
            else:
                yield from self.p2p(send_bwd=True, recv_fwd=True)
        for k in range(w):
            yield from self.p2p(recv_bwd=True)
            self.backward(rem + k)
            yield from self.p2p(send_bwd=True)
        yield from self.optimizer()
        self.op_end(th)   # ProfilerStep
        self.finished = True

    def _interleaved(self):
        """Megatron's interleaved 1F1B without p2p overlap (megatron/core/pipeline_parallel/schedules.py,
        forward_backward_pipelining_with_interleaving, get_pp_rank_microbatches, get_schedule_table and
        recv_tensor_from_previous_stage; micro-batches in groups of pp, Megatron's default
        microbatch_group_size_per_vp_stage). Virtual micro-batch k runs micro-batch `table[k][0]` on chunk
        `table[k][1]` forward, and on chunk V-1-`table[k][1]` backward."""
        pp, v, m, s = self.pp, self.vp, self.m, self.stage
        table = [(g + i, c) for g in range(0, m, pp) for c in range(v) for i in range(min(pp, m - g))]
        total = m * v
        warm = min((pp - s - 1) * 2 + (v - 1) * pp, total)
        rem = total - warm

        def chunk(k: int, forward: bool) -> int:
            c = table[k % total][1]
            return c if forward else v - 1 - c

        def receives(k: int, forward: bool) -> bool:
            """Whether the exchange after virtual micro-batch k receives the next one's input."""
            if not (self.is_first if forward else self.is_last):
                return True
            if k < pp - 1:   # the stage that feeds the leading one has produced nothing yet
                return False
            # what the feeding stage finished pp - 1 steps ago, unless that was the model's last chunk
            return chunk(k - (pp - 1), forward) != (v - 1 if forward else 0)

        def sends_fwd(c: int) -> bool:
            return not (self.is_last and c == v - 1)

        def sends_bwd(c: int) -> bool:
            return not (self.is_first and c == 0)

        if self.emu.settings.training.overlap_p2p:   # Megatron's --overlap-p2p-communication (pipeline_overlap.py)
            yield from self._interleaved_overlap(chunk, receives, sends_fwd, sends_bwd, table, warm, rem, total)
            return
        if not self.is_first:
            yield from self.p2p(recv_fwd=True)
        for k in range(warm):
            c = chunk(k, True)
            yield from self.forward(table[k][0], c)
            recv = receives(k, True) and k != total - 1
            if k == warm - 1 and rem:
                yield from self.p2p(send_fwd=sends_fwd(c), recv_fwd=recv, recv_bwd=not self.is_last)
            else:
                yield from self.p2p(send_fwd=sends_fwd(c), recv_fwd=recv)
        for k in range(rem):
            fk = k + warm
            cf, cb = chunk(fk, True), chunk(k, False)
            yield from self.forward(table[fk][0], cf)
            self.backward(table[k][0], cb)
            yield from self.p2p(send_fwd=sends_fwd(cf), send_bwd=sends_bwd(cb),
                                recv_fwd=receives(fk, True) and k != rem - 1, recv_bwd=receives(k, False))
        if not rem and not self.is_last:
            yield from self.p2p(recv_bwd=True)
        for k in range(rem, total):
            c = chunk(k, False)
            self.backward(table[k][0], c)
            yield from self.p2p(send_bwd=sends_bwd(c), recv_bwd=receives(k, False) and k != total - 1)

    def optimizer(self):
        th = self.main
        if self.after_backward:   # gradients reduced now, bucket after bucket, on the DP stream
            self.ann_begin(th, "allreduce_gradients")
            self._launch_buckets(th, flush=True)
            if self.expert_ready:
                self._launch_expert_buckets(th, flush=True)
            self.op_end(th)
        self.ann_begin(th, "optimizer")
        if self.dp_done:   # finish_grad_sync: compute waits for every bucket
            self._wait_op(th, self.dp_done)
        # FSDP, distributed optimizer: each rank updates its shard, and the grad norm sums over the
        # shards (the DP group)
        sharded = self.sharded or self.zero1
        shard = self.stage_params / self.topo.dp if sharded else self.stage_params
        norm, adam, chunks = self.p.optimizer_kernels(int(shard), self.emu.settings.knobs)
        self.op_begin(th, "aten::_foreach_norm", {"Input Dims": [[int(self.stage_params)]], "Input type": ["float"]})
        self.launch(th, COMPUTE_S, norm)
        self.op_end(th)
        sid = TP_S if self.norm_group is self.tp_group else MP_STREAM   # a process group of its own: its own stream
        norm_group = self.norm_group
        if sharded and self.topo.dp > 1:
            sid, norm_group = DP_S, self.dp_group
        self._wait_op(th, [self._comm_op(th, sid, self._comm(norm_group, "allreduce", 1), "c10d::allreduce_")])
        yield from self._item(th)
        th.t += self._jit_block(self.h.optimizer_python_us)   # clip factor, param groups, lr schedule
        for c in range(chunks):
            self.op_begin(th, "Optimizer.step#FusedAdam.step" if c == 0 else "aten::_fused_adam_",
                          {"Input Dims": [[int(shard / chunks)]], "Input type": ["float"]})
            self.launch(th, COMPUTE_S, adam)
            self.op_end(th)
        if self.bucket_params:   # start_param_sync without overlap_param_gather: the step waits for them
            self._wait_op(th, [self._comm_op(th, DP_S, self._comm(self.dp_group, "allgather", int(n)),
                                             "c10d::_allgather_base_") for n in self.bucket_params])
            self.bucket_params = []
        yield from self._item(th)   # loss.item(): the step ends when the GPU is done
        self.op_end(th)

    def _item(self, th: Thread):
        self.op_begin(th, "aten::item", {"Input Dims": [[]], "Input type": ["float"]})
        self.launch(th, COMPUTE_S, KSpec("Memcpy DtoH (Device -> Pinned)", self.emu.kcost.d2h(4), cat="gpu_memcpy",
                                         runtime="cudaMemcpyAsync", nbytes=4, compute=False))
        yield from self.stream_sync(th, COMPUTE_S)
        self.op_end(th)
