"""Run one emulated iteration end to end: build the cluster, run the simulation, write traces."""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import orjson
import simpy
from omegaconf import DictConfig, OmegaConf

from lumos.trace.atomic import write_text_atomic
from lumos.trace.writer import write_encoded

from .costs import CommCosts, KernelCosts
from .engine import Device, Fabric, Rand
from .program import Program, granularity_level
from .progress import Progress
from .rank import RankProgram
from .recorder import Recorder
from .settings import Settings, from_config
from .topology import Topology


class EmulationError(RuntimeError):
    """The emulated program could not finish (a schedule that deadlocks)."""


@dataclass
class EmulationResult:
    settings: Settings
    config: dict
    ranks: list
    stage_of_rank: dict
    recorders: dict
    iteration_us: float
    wall_s: float
    topo: Topology = field(repr=False, default=None)
    # the simulation's objects, kept so that freeing millions of them (seconds on a 175B run) happens
    # with the result, which `lumos emulate` skips by leaving the process directly
    state: tuple = field(repr=False, default=())

    def events(self, rank: int) -> list[dict]:
        """One rank's trace events as dicts (what `encode` writes, built one by one)."""
        return self.recorders[rank].events(self.settings.base_ts_us, self.settings.legacy)

    def encode(self, rank: int) -> np.ndarray:
        """One rank's trace file as JSON bytes (a uint8 array), its events encoded column-wise."""
        return self.recorders[rank].encode(self.settings.base_ts_us, self.settings.legacy, self.metadata(rank))

    def metadata(self, rank: int) -> dict:
        s, c = self.settings, self.settings.cluster
        cc = list(getattr(c, "compute_capability", [9, 0]))
        return {
            "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": s.world_size,
                                "pg_count": len(self.topo.pg_config(rank)),
                                "pg_config": self.topo.pg_config(rank), "nccl_version": "2.21.5"},
            "deviceProperties": [{"id": d, "name": c.gpu_name, "totalGlobalMem": c.total_mem_bytes,
                                  "computeMajor": cc[0], "computeMinor": cc[1], "numSms": c.num_sms,
                                  "warpSize": 32, "maxThreadsPerBlock": 1024}
                                 for d in range(min(c.gpus_per_host, s.world_size))],
            "traceName": f"emulated_{s.model.name}_tp{s.tp}_pp{s.pp}_dp{s.dp}_seed{s.seed}_rank{rank}.json.gz",
            "displayTimeUnit": "ms",
            "emulated": True,
        }


class _Emu:
    """Shared state the rank programs read (settings, topology, kernel costs)."""

    def __init__(self, settings: Settings, topo: Topology, kcost: KernelCosts):
        self.settings, self.topo, self.kcost = settings, topo, kcost


def _slowness(settings: Settings, rng: np.random.Generator) -> np.ndarray:
    """Persistent per-rank compute speed for this iteration (1 = nominal), all ranks."""
    r = settings.knobs.rank
    w = settings.world_size
    slow = np.exp(r.slowness_sigma * rng.standard_normal(w))
    strag = rng.random(w) < r.straggler_prob
    return slow * np.where(strag, 1.0 + r.straggler_slowdown, 1.0)


@contextlib.contextmanager
def _no_cycle_collection():
    """Pause Python's cyclic garbage collector: a large emulation holds millions of tuples and
    dicts that are all alive, and repeated collections over them cost more than the emulation
    (6-11 s of 16 s on a 384-micro-batch 175B run). Peak memory is unchanged."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        # everything allocated meanwhile is still "young": the next young collection would scan all
        # of it (5-6 s on the largest run). Move it to the oldest generation unscanned instead
        # (freeze, then unfreeze); cycles among it are still collected by a later full collection.
        gc.freeze()
        gc.unfreeze()
        if was:
            gc.enable()


def emulate_config(cfg: DictConfig, progress: bool | None = None) -> EmulationResult:
    """Emulate the iteration described by a composed `emulate` config (no files written)."""
    with _no_cycle_collection():
        return _emulate_config(cfg, progress)


def _emulate_config(cfg: DictConfig, progress: bool | None) -> EmulationResult:
    t_wall = time.perf_counter()
    s = from_config(cfg)
    topo = Topology(s.tp, s.pp, s.dp * s.cp, s.cluster.gpus_per_host, cp=s.cp, ep=s.ep, moe=s.model.moe is not None,
                    model_parallel_group=s.knobs.schedule.grad_norm_group == "model_parallel", ring=s.vp > 1)
    ranks = list(range(s.world_size)) if s.ranks == "all" else topo.stage_reps()
    topo.set_emulated(ranks)
    root = np.random.SeedSequence([s.seed, 0x1A705])
    seeds = root.spawn(3)
    slowness = _slowness(s, np.random.default_rng(seeds[0]))
    kcost = KernelCosts(s.cluster, s.knobs.compute)
    ccost = CommCosts(s.cluster, s.knobs.comm, topo.hosts)
    env = simpy.Environment()
    fabric = Fabric(env, topo, slowness, s.knobs, ccost, np.random.default_rng(seeds[1]))
    program = Program(s, kcost)
    emu = _Emu(s, topo, kcost)
    rank_seeds = seeds[2].spawn(s.world_size)
    total = len(ranks) * 2 * s.model.num_microbatches * s.vp
    if progress is None:
        progress = s.progress != "false" and s.progress != "False" and sys.stderr.isatty()
    bar = Progress(total, enabled=bool(progress), desc=f"emulate {s.model.name} {s.tp}x{s.pp}x{s.dp}")
    recorders, programs = {}, []
    for r in ranks:
        rand = Rand(np.random.default_rng(rank_seeds[r]))
        rec = Recorder(r, r % s.cluster.gpus_per_host, 10000 + r)
        dev = Device(env, r, float(slowness[r]), s.knobs, rand, rec, fabric,
                     sharded=s.training.dp_sharding in ("fsdp", "fsdp_grad_op"), ring=s.vp > 1, cp=s.cp > 1,
                     moe=s.model.moe is not None, cp_ring=s.cp > 1 and s.training.cp_form == "ring")
        rp = RankProgram(emu, r, dev, rand, rec, program, bar.update)
        env.process(rp.run())
        recorders[r] = rec
        programs.append(rp)
    env.run()
    bar.close()
    stuck = [rp.rank for rp in programs if not rp.finished]
    if stuck:
        raise EmulationError(f"emulated ranks {stuck} never finished the iteration (pending collectives: "
                             f"{sorted(map(str, fabric.pending))[:5]})")
    step_end = max(max(e for _, e, *_ in rec.cpu) for rec in recorders.values())
    config = OmegaConf.to_container(cfg, resolve=True)
    if s.write_ranks == "stage":   # every rank emulated, the stage ranks kept: exact waits, small output
        ranks = topo.stage_reps()
        recorders = {r: recorders[r] for r in ranks}
    return EmulationResult(settings=s, config=config, ranks=ranks,
                           stage_of_rank={r: topo.coords(r)[0] for r in ranks}, recorders=recorders,
                           iteration_us=round(step_end, 3), wall_s=time.perf_counter() - t_wall, topo=topo,
                           state=(env, fabric, programs))


FORK_WRITE_EVENTS = 2_000_000   # recorded events above which writing is split over two processes


def _write_ranks(result: EmulationResult, jobs) -> None:
    with _no_cycle_collection(), ThreadPoolExecutor(max_workers=1) as pool:
        pending = None
        for r, p in jobs:
            data = result.encode(r)
            if pending is not None:
                pending.result()   # at most one rank's bytes waiting: bounded memory, errors surface here
            pending = pool.submit(write_encoded, p, data, 1)   # bulk output: speed over size
        if pending is not None:
            pending.result()


def _write_forked(result: EmulationResult, jobs) -> None:
    """Odd-position ranks in a forked child, the rest here; the child's failure is raised here."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:   # child: write, then leave without running the parent's exit handlers
        code = 1
        try:
            _write_ranks(result, jobs[1::2])
            code = 0
        except BaseException as exc:   # noqa: BLE001 - reported, then the parent raises
            print(f"lumos emulate: writing rank traces failed in the writer process: {exc!r}", file=sys.stderr)
        finally:
            sys.stderr.flush()
            os._exit(code)
    try:
        _write_ranks(result, jobs[0::2])
    finally:
        _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        missing = [str(p) for _, p in jobs[1::2] if not p.exists()]
        raise OSError(f"the writer process failed (exit {os.waitstatus_to_exitcode(status)}); "
                      f"not written: {', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''}")


def emulate(overrides: Sequence[str] = (), progress: bool | None = None) -> EmulationResult:
    """Compose `config/emulate.yaml` with Hydra-style overrides and emulate it."""
    from lumos.config import compose

    return emulate_config(compose("emulate", list(overrides)), progress=progress)


def write_result(result: EmulationResult, out: str | os.PathLike) -> list[Path]:
    """Write rank{R}.json.gz per emulated rank and manifest.json, each atomically.

    A large run's ranks are split over two processes (a fork sharing the recorded timelines);
    within each, one rank's events are encoded while the previous rank's bytes are compressed
    and written on a second thread (zlib releases the GIL)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    paths = [out / f"rank{r}.json.gz" for r in result.ranks]
    jobs = list(zip(result.ranks, paths))
    events = sum(len(rec.cpu) + len(rec.rt) + 3 * len(rec.gpu) for rec in result.recorders.values())
    if events >= FORK_WRITE_EVENTS and len(jobs) > 1 and hasattr(os, "fork"):
        _write_forked(result, jobs)
    else:
        _write_ranks(result, jobs)
    s = result.settings
    manifest = {
        "emulated": True,
        "config": result.config,
        "seed": s.seed,
        "ranks": result.ranks,
        "stage_of_rank": {str(r): st for r, st in result.stage_of_rank.items()},
        "world_size": s.world_size,
        "parallel": {"tp": s.tp, "pp": s.pp, "dp": s.dp, "vp": s.vp, "stage_layers": list(s.stage_layers),
                     **({"cp": s.cp} if s.cp > 1 else {}), **({"ep": s.ep} if s.model.moe else {})},
        "num_microbatches": s.model.num_microbatches,
        "global_batch_size": s.model.global_batch_size,
        "granularity": granularity_level(s),   # what `auto` resolved to (coarse traces lack element-wise ops)
        "iteration_us": result.iteration_us,
        "wall_s": round(result.wall_s + time.perf_counter() - t0, 3),
    }
    write_text_atomic(out / "manifest.json",
                      orjson.dumps(manifest, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode() + "\n")
    return paths
