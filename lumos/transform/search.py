"""`lumos search BASE --gpus N`: every layout of N GPUs predicted from one base trace, ranked.

Candidates are PP x DP x micro-batch size at the base's TP (`lumos predict` cannot change TP
yet): PP divides the layer count, TP x PP x DP = N, and with `--global-batch B` the batch
splits into whole micro-batches (B divisible by DP x micro-batch; micro-batches per
iteration = B / (DP x micro-batch)); without it each candidate keeps the base's micro-batch
count. Layouts that do not fit in memory (`memory.py`) are listed as such and not simulated.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from .memory import MemorySettings, plan_memory
from .schedule import layers_of_stage
from .suppliers.collectives import load_profile


def candidates(base, gpus: int, micro_batches: list[int], global_batch: int | None) -> list[dict]:
    """Valid (tp, pp, dp, micro_batch, microbatches) for `gpus` at the base's TP."""
    out = []
    tp = base.tp
    if gpus % tp:
        raise ValueError(f"{gpus} GPUs are not a multiple of the base's TP {tp} (TP changes are not supported)")
    for pp in range(1, gpus // tp + 1):
        if (gpus // tp) % pp or base.layers % pp:
            continue
        dp = gpus // (tp * pp)
        for mbs in micro_batches:
            if global_batch is not None:
                if global_batch % (dp * mbs):
                    continue
                m = global_batch // (dp * mbs)
            else:
                m = base.microbatches
            out.append({"tp": tp, "pp": pp, "dp": dp, "micro_batch": mbs, "microbatches": m})
    return out


def search(tables, gpus: int, micro_batches: list[int] | None = None, global_batch: int | None = None,
           memory: dict | None = None, progress: bool = True) -> list[dict]:
    """Predicted iteration time and memory of every candidate (micro-batch sizes: default the base's);
    fitting ones ranked fastest first."""
    from .predict import base_plan, simulate_plan, transform

    base = base_plan(tables)
    micro_batches = micro_batches or [base.shape.micro_batch]
    settings = MemorySettings.from_profile(load_profile(), **(memory or {}))
    rows = []
    cands = candidates(base, gpus, micro_batches, global_batch)
    if not cands:
        raise ValueError(f"no layout of {gpus} GPUs fits the base (TP {base.tp}, {base.layers} layers"
                         + (f", global batch {global_batch}" if global_batch else "") + ")")
    bar = _progress(len(cands), progress)
    for c in cands:
        shape = dataclasses.replace(base.shape, micro_batch=c["micro_batch"])
        per_stage = [len(list(layers_of_stage(s, c["pp"], base.layers))) for s in range(c["pp"])]
        mem = plan_memory(shape, per_stage, c["pp"], c["dp"], c["microbatches"], settings)
        row = dict(c, memory_gib_per_gpu=mem["memory_gib_per_gpu"], fits=mem["fits"], iteration_us=None)
        if mem["fits"]:
            plan = transform(base, pp=c["pp"], dp=c["dp"], micro_batch=c["micro_batch"],
                             global_batch=c["microbatches"] * c["dp"] * c["micro_batch"])
            _, _, bd = simulate_plan(plan)
            row["iteration_us"] = round(float(bd.as_dict()["iteration_us"]), 3)
        rows.append(row)
        bar.update(1)
    bar.close()
    fit = sorted((r for r in rows if r["fits"]), key=lambda r: r["iteration_us"])
    return fit + [r for r in rows if not r["fits"]]


def _progress(total: int, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc="layouts", unit="layout", file=sys.stderr,
                disable=not (enabled and sys.stderr.isatty()), leave=False)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("search", help="rank every layout of N GPUs predicted from one base trace",
                       description=__doc__.splitlines()[0])
    p.add_argument("base", help="directory of the base run (one trace per pipeline stage)")
    p.add_argument("--gpus", type=int, required=True)
    p.add_argument("--global-batch", type=int, default=None, help="sequences per iteration (fixed)")
    p.add_argument("--micro-batch", default=None,
                   help="micro-batch sizes to try, comma-separated (default: the base's)")
    p.add_argument("--top", type=int, default=None, help="show the K fastest fitting layouts")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.add_argument("--bytes-per-param", type=float, default=None)
    p.add_argument("--gpu-memory-gib", type=float, default=None)
    p.set_defaults(func=run)


def run(args) -> int:
    from lumos.cli import UserError
    from lumos.trace import load_run

    tables = load_run(args.base)
    try:
        mbs = [int(x) for x in args.micro_batch.split(",")] if args.micro_batch else None
    except ValueError:
        raise UserError(f"--micro-batch takes comma-separated integers, got {args.micro_batch!r}") from None
    try:
        rows = search(tables, args.gpus, mbs, args.global_batch,
                      memory={"bytes_per_param": args.bytes_per_param, "gpu_memory_gib": args.gpu_memory_gib})
    except ValueError as exc:
        raise UserError(str(exc)) from None
    shown = rows if args.top is None else [r for r in rows if r["fits"]][:args.top]
    if args.format == "json":
        sys.stdout.write(json.dumps(shown, indent=1) + "\n")
        return 0
    print(f"{args.base}: {len(rows)} layouts of {args.gpus} GPUs, {sum(r['fits'] for r in rows)} fit in memory")
    print(f"  {'tp':>3} {'pp':>3} {'dp':>4} {'mbs':>4} {'m':>4} {'iteration ms':>13} {'GiB/GPU':>8}  fits")
    for r in shown:
        it = f"{r['iteration_us'] / 1e3:13.3f}" if r["iteration_us"] is not None else f"{'-':>13}"
        print(f"  {r['tp']:>3} {r['pp']:>3} {r['dp']:>4} {r['micro_batch']:>4} {r['microbatches']:>4} {it} "
              f"{r['memory_gib_per_gpu']:8.1f}  {'yes' if r['fits'] else 'no'}")
    return 0
