"""`lumos search BASE --gpus N`: every layout of N GPUs predicted from one base trace, ranked.

Candidates are TP x PP x V x DP x micro-batch size (from an MoE base: its TP, PP and micro-batches, and
DP x EP, EP dividing the experts and TP x DP): TP divides the heads, hidden, FFN and
vocabulary sizes (Megatron's split), PP divides the layer count, V (model chunks per stage, the
interleaved schedule; default the base's, `vps` to try others) divides each stage's layers with
micro-batches a multiple of PP, TP x PP x DP = N, and with
`--global-batch B` the batch
splits into whole micro-batches (B divisible by DP x micro-batch; micro-batches per
iteration = B / (DP x micro-batch)); without it each candidate keeps the base's micro-batch
count. Layouts that do not fit in memory (`lumos.predict.memory`) are listed as such and not simulated.
From an FSDP FULL_SHARD base every layout is tried with both strategies, FULL_SHARD and SHARD_GRAD_OP
(`lumos.transform.dp_sharding`), each with its own memory (ZeRO-3's, ZeRO-2's): the second is
faster where it fits, the first fits where it does not.

Three economies keep a large search cheap, none changing what a layout is predicted to take
beyond the extrapolation below:
- the TP and micro-batch-size changes (a re-timing of every task of the base) are made once per
  (TP, micro-batch size) and shared by that pair's PP x DP layouts, the DP change once per layout
  for its two replays (which also share the rebuild's templates, `Plan.memo`);
- many micro-batches: a 1F1B iteration grows by one period of its slowest stage per micro-batch,
  so T(m) is affine in m once the per-micro-batch increment has settled (from about 8 on, seen
  on the emulated 15B and 175B bases, also with fewer micro-batches than stages). A layout with
  m > 2c micro-batches (c = SHORT_PIPELINE = 8; interleaved, the first multiple of PP from 8) is
  replayed at c and 2c and extrapolated:
  T(m) = T(2c) + (m - 2c) (T(2c) - T(c)) / c. Replaying all m costs time in proportion to m
  (a 175B layout of 32 stages and 1,536 micro-batches is 20 million tasks). `exact=True` replays
  every layout whole; each row says which micro-batch counts were replayed;
- the (TP, micro-batch size) pairs are shared out among forked worker processes.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed

from lumos.transform.add_collectives import add_collectives, missing
from lumos.transform.dp import change_dp
from lumos.transform.dp_sharding import STRATEGIES, reachable
from lumos.transform.micro_batch_size import change_micro_batch
from lumos.transform.schedule import (ScheduleError, accounted_chunks, accounted_ends, check_interleaved,
                                     stage_split)
from lumos.transform.tp import change_tp, tp_misfits

from .device_memory import device_memory, on_device
from .options import PredictOptions
from .prediction import simulate_plan
from .whatif import SHARDED_MEMORY, base_plan, layout_memory, memory_settings, moe_shape, transform

__all__ = ["candidates", "search", "SHORT_PIPELINE"]

#: c = max(SHORT_PIPELINE, PP): the shorter of the two replays an extrapolated layout gets. Below
#: about 8 micro-batches the per-micro-batch increment still varies with the base's micro-batches
#: (seen on the emulated 15B base: 4 -> 8 adds 128 ms each, 8 -> 16 and on 134 ms each).
SHORT_PIPELINE = 8


def candidates(base, gpus: int, micro_batches: list[int], global_batch: int | None,
               vps: list[int] | None = None, cps: list[int] | None = None) -> list[dict]:
    """Valid (tp, cp, pp, vp, dp, micro_batch, microbatches) for `gpus`, each with every FSDP strategy the
    base can be changed to (`dp_sharding.reachable`; key `fsdp_strategy`, FSDP bases only); a
    sharded optimizer's base keeps its TP, PP and micro-batch count (its buckets are not re-cut,
    `plan.refuse_rebucketing`). `vps`: model chunks per stage to try (default the base's); a
    one-stage layout has one, and an interleaved one needs V to divide every stage's layers and
    micro-batches in whole groups of PP (as Megatron asks). `cps`: context-parallel degrees to try (default
    the base's; another only from a base that ran with context parallelism, `transform/cp.py`, and where the
    sequence splits into 2 x CP chunks)."""
    vps = vps or [base.chunks]
    moe = base.st.moe      # an MoE base: its TP, PP, CP and micro-batches kept, EP tried over each divisor
    out = []
    strategies = reachable(base.sharding) or [None]
    fixed = base.sharding == "zero12"
    whole = base.shape.seq * base.cp
    for tp, cp in ((t, c) for t in range(1, gpus + 1) for c in sorted(set(cps or [base.cp]))):
        if gpus % (tp * cp) or tp_misfits(base.shape, tp) or (fixed and tp != base.tp):
            continue
        if cp != base.cp and (base.cp == 1 or whole % (2 * cp)):
            continue
        if moe is not None and (tp != base.tp or cp != base.cp):
            continue
        for pp in range(1, gpus // (tp * cp) + 1):
            # PP divides the layers, or is the base's own (its split kept: Llama 3's 126 layers over 16 stages)
            if (gpus // (tp * cp)) % pp or (base.layers % pp and pp != base.pp) or (fixed and pp != base.pp):
                continue
            dp = gpus // (tp * cp * pp)
            if moe is not None and pp != base.pp:
                continue
            for mbs in micro_batches:
                if global_batch is not None:
                    if global_batch % (dp * mbs):
                        continue
                    m = global_batch // (dp * mbs)
                else:
                    m = base.microbatches
                if (fixed or moe is not None) and m != base.microbatches:
                    continue
                if moe is not None and mbs != base.shape.micro_batch:
                    continue
                for vp in sorted({v if pp > 1 else 1 for v in vps}):
                    own = pp == base.pp and vp == base.chunks and bool(base.chunk_layers)   # the base's own chunks
                    ends = accounted_ends(base.chunk_layers) if base.chunk_layers and not own and pp > 1 else None
                    try:
                        if ends:    # the embedding and loss in the split, as the base (`whatif._end_chunks`)
                            accounted_chunks(base.layers, pp, vp, *ends)
                        check_interleaved(pp, vp, m, None if own or ends else
                                          stage_split(pp, base.layers, base.stage_layers))
                    except ScheduleError:
                        continue
                    for strategy in strategies:
                        c = {"tp": tp, "cp": cp, "pp": pp, "vp": vp, "dp": dp, "micro_batch": mbs, "microbatches": m}
                        c = c if strategy is None else dict(c, fsdp_strategy=strategy)
                        if moe is None:
                            out.append(c)
                            continue
                        out += [dict(c, ep=ep) for ep in range(2, tp * dp + 1)
                                if (tp * dp) % ep == 0 and moe.experts % ep == 0]
    return out


def whole_seq(base) -> int:
    """The base's sequence length (a context-parallel base's shape holds one rank's part)."""
    return base.shape.seq * base.cp


def search(tables, gpus: int, micro_batches: list[int] | None = None, global_batch: int | None = None,
           memory: dict | None = None, progress: bool = True, exact: bool = False,
           workers: int | None = None, cluster: str | None = None, vps: list[int] | None = None,
           cps: list[int] | None = None, nccl_tests: tuple = ()) -> list[dict]:
    """Predicted iteration time and memory of every candidate (micro-batch sizes: default the base's);
    fitting ones ranked fastest first. `workers` processes (default: every core) share the work by
    (TP, micro-batch size); the result does not depend on their number. Memory is judged against the
    base's own GPU (`device_memory`: its trace's deviceProperties, else the profile's; `memory` may give it).
    `cluster`: the cluster profile the collectives a one-GPU base lacks are timed by (default h100_roce), or
    `nccl_tests`: nccl-tests output of the cluster (`lumos.durations.nccl_tests`)."""
    if not on_device(tables):
        raise ValueError(f"{tables[0].path}: a CPU-only trace (no GPU kernel): lumos search ranks layouts of GPUs, "
                         "and a layout's TP, DP and micro-batch size re-time GPU kernels and device collectives, "
                         "which this base has none of")
    memory, _ = device_memory(tables, memory)
    base = base_plan(tables, PredictOptions(cluster=cluster, nccl_tests=tuple(nccl_tests)))
    micro_batches = micro_batches or [base.shape.micro_batch]
    cands = candidates(base, gpus, micro_batches, global_batch, vps, cps)
    settings = {s: memory_settings(base, _strategy_memory(memory, s))
                for s in {c.get("fsdp_strategy") for c in cands}}
    if not cands:
        raise ValueError(f"no layout of {gpus} GPUs fits the base ({base.shape.heads} heads, {base.layers} layers"
                         + (f", global batch {global_batch}" if global_batch else "") + ")")
    rows = []
    for c in cands:
        cp = c.get("cp", 1)   # a rank's part of each sequence; DP x CP ranks hold the optimizer's shards
        shape = dataclasses.replace(moe_shape(base, c.get("ep"), c["dp"]), micro_batch=c["micro_batch"], tp=c["tp"],
                                    seq=whole_seq(base) // cp)
        mem = layout_memory(shape, c["pp"], c["dp"] * cp, base.layers, c["microbatches"], settings[c.get("fsdp_strategy")],
                            chunks=c["vp"], split=stage_split(c["pp"], base.layers, base.stage_layers))
        rows.append(dict(c, memory_gib_per_gpu=mem["memory_gib_per_gpu"], fits=mem["fits"], iteration_us=None,
                         replayed_microbatches=None))
    fitting = [r for r in rows if r["fits"]]
    # one (TP, micro-batch size) re-timing at a time per worker: each is a copy of the whole base graph
    pairs: dict[tuple, list] = {}
    for r in fitting:
        pairs.setdefault((r["tp"], r["micro_batch"]), []).append(r)
    jobs = sorted(pairs.items(), key=lambda kv: -len(kv[1]))     # longest first: balanced workers
    bar = _progress(len(fitting), progress)
    for rs, results in _run(base, jobs, exact, workers):
        for r, (it, replayed) in zip(rs, results):
            r["iteration_us"], r["replayed_microbatches"] = it, replayed
        bar.update(len(rs))
    bar.close()
    fit = sorted(fitting, key=lambda r: r["iteration_us"])
    return fit + [r for r in rows if not r["fits"]]


def _strategy_memory(memory: dict | None, strategy: str | None) -> dict | None:
    """The memory overrides of a layout run with `strategy`: its ZeRO stage, unless the user set one."""
    if strategy is None or (memory or {}).get("sharding") is not None:
        return memory
    return {**(memory or {}), "sharding": SHARDED_MEMORY[STRATEGIES[strategy]]}


_BASE = None    # the base plan, for forked workers (inherited, not pickled)


def _run(base, jobs: list, exact: bool, workers: int | None):
    """(rows, [(iteration_us, replayed counts)]) per (TP, micro-batch size) job, as each finishes; in
    `workers` forked processes (default: every core; 1: in this one)."""
    global _BASE
    workers = min(workers or os.cpu_count() or 1, len(jobs))
    if workers <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        for (tp, mbs), rs in jobs:
            yield rs, _pair(base, tp, mbs, rs, exact)
        return
    _BASE = base
    try:
        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(workers, mp_context=ctx) as pool:
            futures = {pool.submit(_pair, None, tp, mbs, [dict(r) for r in rs], exact): rs for (tp, mbs), rs in jobs}
            for f in as_completed(futures):
                yield futures[f], f.result()
    finally:
        _BASE = None


def _pair(base, tp: int, mbs: int, rows: list, exact: bool) -> list:
    base = base if base is not None else _BASE
    # collectives these layouts need and the base lacks (a one-GPU base's), added once for all of them
    pp, dp = max(r["pp"] for r in rows), max(r["dp"] * r.get("cp", 1) for r in rows)
    base = add_collectives(base, missing(base, tp, pp, dp), tp, pp, dp, base.profile)
    part = change_micro_batch(change_tp(base, tp), mbs)
    return [_iteration(part, r, exact) for r in rows]


def _iteration(part, c: dict, exact: bool) -> tuple[float, list[int]]:
    """Iteration time (us) of layout `c` from `part` (the base with c's TP and micro-batch size), and
    the micro-batch counts replayed (one: the layout's own; two: extrapolated, see the module)."""
    part = change_dp(part, c["dp"] * part.cp)   # once for both replays (`transform` would do it in each)

    def replay(m: int) -> float:
        plan = transform(part, pp=c["pp"], vp=c.get("vp"), cp=c.get("cp"), dp=c["dp"], ep=c.get("ep"),
                         global_batch=m * c["dp"] * c["micro_batch"], fsdp_strategy=c.get("fsdp_strategy"))
        return float(simulate_plan(plan)[2].as_dict()["iteration_us"])

    m, short = c["microbatches"], SHORT_PIPELINE
    if c.get("vp", 1) > 1:     # the interleaved schedule takes whole groups of PP micro-batches
        short = c["pp"] * -(-short // c["pp"])
    if exact or m <= 2 * short:
        return round(replay(m), 3), [m]
    t1, t2 = replay(short), replay(2 * short)
    return round(t2 + (m - 2 * short) * (t2 - t1) / short, 3), [short, 2 * short]


def _progress(total: int, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc="layouts", unit="layout", file=sys.stderr,
                disable=not (enabled and sys.stderr.isatty()), leave=False)
