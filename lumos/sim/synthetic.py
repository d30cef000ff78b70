"""Random execution graphs shaped like a training iteration, of any size.

Why: the simulator's speed and its equivalence with the reference must be
shown on graphs from 10^2 to 10^7 tasks, far beyond the shipped traces, and
with every edge class and run-time wait the builder produces. Generation is
vectorised numpy, so a 10^7-task graph takes seconds.

Per rank the shape is: a main host "program" that alternates between a
forward and a backward thread in segments (inter-thread edges hand over at
each switch, as the autograd thread does), about half of whose calls launch a
GPU op onto a compute stream or one of two communication streams; a data
loader thread that runs on its own and launches copies onto a copy stream.
Edges: program order on threads and streams, launch, event record -> stream
wait (compute -> collective, collective -> compute, copy -> compute), event
syncs (GPU -> CPU), and, across ranks, collective peers (rank r -> r+1).
Some host calls are stream syncs or device syncs, resolved at replay time.

Waits and cross-stream edges are only placed where a real program could not
deadlock: the host calls that wait run on the main program, which launched
everything it waits for earlier (or waits for the free-running loader), so
every generated graph replays to completion.
"""

from __future__ import annotations

import numpy as np

from lumos.graph.model import EdgeClass, Graph, TaskKind, WaitKind

# processors of one rank, in this order
FWD, BWD, LOADER, COMPUTE, COMM_A, COMM_B, COPY = range(7)
PROCS_PER_RANK = 7
PROC_NAMES = ("thread fwd", "thread bwd", "thread loader", "stream compute", "stream comm A",
              "stream comm B", "stream copy")

# task names by role (shared string objects: 8 bytes a task)
NAMES = np.array(["aten::op", "cudaLaunchKernel", "cudaStreamSynchronize", "cudaDeviceSynchronize",
                  "cudaEventSynchronize", "loader::op", "cudaMemcpyAsync", "sm90_xmma_gemm",
                  "ncclDevKernel_AllReduce_Sum_bf16", "ncclDevKernel_AllGather", "Memcpy HtoD"], dtype=object)
(N_OP, N_LAUNCH, N_SSYNC, N_DSYNC, N_ESYNC, N_LOAD, N_COPYCALL,
 N_GEMM, N_NCCL_A, N_NCCL_B, N_COPY) = range(len(NAMES))


def _chain(index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Edges between consecutive entries of `index` (program order)."""
    return index[:-1], index[1:]


def _chains_by(group: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Program-order edges inside each group (entries keep their order within a group)."""
    order = np.argsort(group, kind="stable")
    g, i = group[order], index[order]
    same = g[1:] == g[:-1]
    return i[:-1][same], i[1:][same]


def _last_before(mask: np.ndarray) -> np.ndarray:
    """For each position j, the largest i < j with mask[i] (or -1)."""
    pos = np.where(mask, np.arange(len(mask), dtype=np.int64), -1)
    last = np.maximum.accumulate(pos) if len(pos) else pos
    out = np.empty_like(last)
    if len(out):
        out[0] = -1
        out[1:] = last[:-1]
    return out


class _Edges:
    def __init__(self):
        self.parts: list[tuple[np.ndarray, np.ndarray, int, np.ndarray]] = []

    def add(self, src, dst, cls: EdgeClass, lag) -> None:
        src = np.asarray(src, dtype=np.int64)
        lag = np.broadcast_to(np.asarray(lag, dtype=np.float64), src.shape)
        self.parts.append((src, np.asarray(dst, dtype=np.int64), int(cls), lag))


def _rank(rng, n_target: int, base: int, rank: int, p: dict, ints: bool, edges: _Edges, tasks: dict) -> dict:
    """Generate one rank's tasks (appended to `tasks`) and edges; returns its comm-A ops."""
    n_main = max(2, int(n_target / (1.0 + p["launch_rate"] + p["loader_share"] * (1.0 + p["loader_launch_rate"]))))
    n_load = max(1, int(n_main * p["loader_share"]))
    launch = rng.random(n_main) < p["launch_rate"]
    load_launch = rng.random(n_load) < p["loader_launch_rate"]
    n_gm, n_gl = int(launch.sum()), int(load_launch.sum())
    cpu_main = base + np.arange(n_main)
    cpu_load = base + n_main + np.arange(n_load)
    gpu_main = base + n_main + n_load + np.arange(n_gm)
    gpu_load = gpu_main[-1] + 1 + np.arange(n_gl) if n_gm else base + n_main + n_load + np.arange(n_gl)
    n = n_main + n_load + n_gm + n_gl
    pr = rank * PROCS_PER_RANK

    def durations(size, mu_us, sigma):
        if ints:
            return rng.integers(0, 4, size).astype(np.float64)
        return rng.lognormal(np.log(mu_us), sigma, size)

    def lags(size, scale):
        if ints:
            return rng.integers(0, 2, size).astype(np.float64)
        return rng.exponential(scale, size)

    # main program: forward/backward thread segments
    switch = rng.random(n_main) < 1.0 / p["segment"]
    switch[0] = False
    thread = (np.cumsum(switch) % 2).astype(np.int64)  # FWD or BWD
    main_dur = durations(n_main, 8.0, 0.8)
    main_dur[launch] = durations(n_gm, 4.0, 0.3)
    gap = lags(n_main, 1.0)
    main_ts = np.cumsum(main_dur + gap) - (main_dur + gap)
    s, d = _chains_by(thread, cpu_main)
    edges.add(s, d, EdgeClass.INTRA_THREAD, gap[d - base])
    hand = np.flatnonzero(switch)
    edges.add(cpu_main[hand - 1], cpu_main[hand], EdgeClass.INTER_THREAD, lags(len(hand), 5.0))

    # loader thread: free-running, spread over the same span
    load_dur = durations(n_load, 20.0, 0.8)
    load_dur[load_launch] = durations(n_gl, 6.0, 0.3)
    load_gap = max(0.0, main_ts[-1] / n_load - 20.0)
    load_ts = np.cumsum(load_dur + load_gap) - (load_dur + load_gap)
    if n_load > 1:
        edges.add(*_chain(cpu_load), EdgeClass.INTRA_THREAD, load_gap)

    # GPU ops of the main program: stream by role, launched in program order
    roll = rng.random(n_gm)
    stream = np.where(roll < p["comm_rate"] * 0.7, COMM_A, np.where(roll < p["comm_rate"], COMM_B, COMPUTE))
    g_dur = np.where(stream == COMPUTE, durations(n_gm, 40.0, 1.2), durations(n_gm, 150.0, 1.0))
    launcher = cpu_main[launch]
    launch_lag = lags(n_gm, 2.0)
    g_ts = main_ts[launcher - base] + main_dur[launcher - base] + launch_lag
    edges.add(launcher, gpu_main, EdgeClass.LAUNCH, launch_lag)
    s, d = _chains_by(stream, gpu_main)
    edges.add(s, d, EdgeClass.INTRA_STREAM, 0.0)
    # event record -> stream wait: a collective waits for the compute op launched before it,
    # and some compute ops wait for the last collective
    prev_compute = _last_before(stream == COMPUTE)
    prev_comm = _last_before(stream != COMPUTE)
    k = np.flatnonzero((stream != COMPUTE) & (prev_compute >= 0) & (rng.random(n_gm) < 0.8))
    edges.add(gpu_main[prev_compute[k]], gpu_main[k], EdgeClass.INTER_STREAM, 0.0)
    k = np.flatnonzero((stream == COMPUTE) & (prev_comm >= 0) & (rng.random(n_gm) < p["inter_stream_rate"]))
    edges.add(gpu_main[prev_comm[k]], gpu_main[k], EdgeClass.INTER_STREAM, 0.0)

    # copies launched by the loader; some compute ops wait for one
    c_dur = durations(n_gl, 20.0, 0.5)
    c_launcher = cpu_load[load_launch]
    c_lag = lags(n_gl, 2.0)
    c_ts = load_ts[c_launcher - cpu_load[0]] + load_dur[c_launcher - cpu_load[0]] + c_lag
    edges.add(c_launcher, gpu_load, EdgeClass.LAUNCH, c_lag)
    if n_gl > 1:
        edges.add(*_chain(gpu_load), EdgeClass.INTRA_STREAM, 0.0)
    compute = np.flatnonzero(stream == COMPUTE)
    if n_gl and len(compute):
        pick = rng.random(n_gl) < 0.5
        at = np.searchsorted(g_ts[compute], c_ts[pick] + c_dur[pick])
        ok = at < len(compute)
        edges.add(gpu_load[pick][ok], gpu_main[compute[at[ok]]], EdgeClass.INTER_STREAM, 0.0)

    # host waits on the main program: stream syncs, device syncs, event syncs
    idle = ~launch
    roll = rng.random(n_main)
    wait_kind = np.zeros(n, dtype=np.int8)
    wait_target = np.full(n, -1, dtype=np.int32)
    ssync = idle & (roll < p["stream_sync_rate"])
    dsync = idle & ~ssync & (roll < p["stream_sync_rate"] + p["device_sync_rate"])
    wait_kind[:n_main][ssync] = WaitKind.STREAM
    wait_target[:n_main][ssync] = pr + rng.choice([COMPUTE, COMM_A, COMM_B, COPY], int(ssync.sum()))
    wait_kind[:n_main][dsync] = WaitKind.DEVICE
    wait_target[:n_main][dsync] = rank
    last_launch = _last_before(launch)  # main CPU position of the previous launcher
    esync = idle & ~ssync & ~dsync & (roll > 1.0 - p["event_sync_rate"]) & (last_launch >= 0)
    op_of_launch = np.cumsum(launch) - 1  # GPU op index of each launcher
    j = np.flatnonzero(esync)
    edges.add(gpu_main[op_of_launch[last_launch[j]]], cpu_main[j], EdgeClass.SYNC, 0.0)

    # task arrays
    names = np.empty(n, dtype=np.int64)
    names[:n_main] = np.where(launch, N_LAUNCH, N_OP)
    names[:n_main][ssync] = N_SSYNC
    names[:n_main][dsync] = N_DSYNC
    names[:n_main][esync] = N_ESYNC
    names[n_main:n_main + n_load] = np.where(load_launch, N_COPYCALL, N_LOAD)
    names[n_main + n_load:n_main + n_load + n_gm] = np.where(stream == COMPUTE, N_GEMM,
                                                             np.where(stream == COMM_A, N_NCCL_A, N_NCCL_B))
    names[n_main + n_load + n_gm:] = N_COPY
    proc = np.concatenate([thread, np.full(n_load, LOADER), stream, np.full(n_gl, COPY)]) + pr
    stream_pos = np.full(n, -1, dtype=np.int32)
    for s_id in (COMPUTE, COMM_A, COMM_B):
        at = np.flatnonzero(stream == s_id)
        stream_pos[n_main + n_load + at] = np.arange(len(at), dtype=np.int32)
    stream_pos[n_main + n_load + n_gm:] = np.arange(n_gl, dtype=np.int32)
    tasks["name"].append(names)
    tasks["kind"].append(np.concatenate([np.zeros(n_main + n_load, np.int8), np.ones(n_gm + n_gl, np.int8)]))
    tasks["proc"].append(proc.astype(np.int32))
    tasks["dur"].append(np.concatenate([main_dur, load_dur, g_dur, c_dur]))
    tasks["ts"].append(np.concatenate([main_ts, load_ts, g_ts, c_ts]))
    tasks["comm"].append(np.concatenate([np.zeros(n_main + n_load, bool), stream != COMPUTE, np.zeros(n_gl, bool)]))
    tasks["rank"].append(np.full(n, rank, dtype=np.int32))
    tasks["stream_pos"].append(stream_pos)
    tasks["wait_kind"].append(wait_kind)
    tasks["wait_target"].append(wait_target)
    return {"comm_a": gpu_main[stream == COMM_A]}


def synthetic_graph(n_tasks: int, seed: int = 0, n_ranks: int = 1, *, integer_times: bool = False,
                    launch_rate: float = 0.5, loader_share: float = 0.05, loader_launch_rate: float = 0.3,
                    segment: float = 400.0, comm_rate: float = 0.15, inter_stream_rate: float = 0.05,
                    stream_sync_rate: float = 0.002, device_sync_rate: float = 0.0005,
                    event_sync_rate: float = 0.002) -> Graph:
    """A graph of about `n_tasks` tasks over `n_ranks` ranks (7 processors each).

    `integer_times` draws durations and lags from {0..3} and {0, 1} so equal
    start times (ties the replay must break identically) are common.
    """
    rng = np.random.default_rng(seed)
    p = dict(launch_rate=launch_rate, loader_share=loader_share, loader_launch_rate=loader_launch_rate,
             segment=segment, comm_rate=comm_rate, inter_stream_rate=inter_stream_rate,
             stream_sync_rate=stream_sync_rate, device_sync_rate=device_sync_rate,
             event_sync_rate=event_sync_rate)
    edges = _Edges()
    keys = ("name", "kind", "proc", "dur", "ts", "comm", "rank", "stream_pos", "wait_kind", "wait_target")
    tasks: dict[str, list] = {k: [] for k in keys}
    base, prev = 0, None
    for r in range(n_ranks):
        info = _rank(rng, max(8, n_tasks // n_ranks), base, r, p, integer_times, edges, tasks)
        base += len(tasks["dur"][-1])
        if prev is not None:  # collective peers: rank r-1's k-th collective feeds rank r's
            m = min(len(prev), len(info["comm_a"]))
            edges.add(prev[:m], info["comm_a"][:m], EdgeClass.CROSS_RANK, 0.0)
        prev = info["comm_a"]
    t = {k: np.concatenate(v) for k, v in tasks.items()}
    n = len(t["dur"])
    t["name"] = NAMES[t["name"]]

    src = np.concatenate([e[0] for e in edges.parts])
    dst = np.concatenate([e[1] for e in edges.parts])
    cls = np.concatenate([np.full(len(e[0]), e[2], dtype=np.int8) for e in edges.parts])
    lag = np.concatenate([e[3] for e in edges.parts])
    edges.parts.clear()
    has_in = np.zeros(n, dtype=bool)
    has_in[dst] = True
    release = np.where(has_in, -np.inf, t["ts"])

    kinds = np.array([0, 0, 0, 1, 1, 1, 1], dtype=np.int8)
    proc_rank = np.repeat(np.arange(n_ranks, dtype=np.int32), PROCS_PER_RANK)
    local = np.tile(np.arange(PROCS_PER_RANK), n_ranks)
    proc_key = np.where(local < COMPUTE, (1000 + proc_rank.astype(np.int64)) << 32 | local,
                        proc_rank.astype(np.int64) << 32 | (local + 4)).astype(np.int64)
    proc_name = np.array([f"{PROC_NAMES[k]} (rank {r})" for r, k in zip(proc_rank, local)], dtype=object)
    graph = Graph(
        name=t["name"], kind=t["kind"], proc=t["proc"], dur=t["dur"], ts=t["ts"], release=release,
        comm=t["comm"], in_step=t["kind"] == TaskKind.GPU, rank=t["rank"], stream_pos=t["stream_pos"],
        wait_kind=t["wait_kind"], wait_target=t["wait_target"], event=np.arange(n, dtype=np.int64),
        layer=np.full(n, -1, np.int32), phase=np.full(n, -1, np.int8),
        proc_kind=np.tile(kinds, n_ranks), proc_rank=proc_rank, proc_key=proc_key, proc_name=proc_name,
        src=src, dst=dst, cls=cls, lag=lag, inferred=cls == EdgeClass.INTER_THREAD)
    graph.summary = {"synthetic": True, "seed": seed, "ranks": n_ranks, "tasks": n,
                     "edges": graph.edge_counts(),
                     "sync_waits": {"stream": int(np.sum(t["wait_kind"] == WaitKind.STREAM)),
                                    "device": int(np.sum(t["wait_kind"] == WaitKind.DEVICE))}}
    return graph
