"""`lumos search BASE --gpus N`: every layout of N GPUs predicted from one base trace, ranked.

Which layouts are candidates and what each is predicted to take is `lumos.predict.search`;
this module parses the flags and prints the ranking.
"""

from __future__ import annotations

import argparse
import json
import sys

from lumos.predict.device_memory import device_memory
from lumos.predict.search import search
from lumos.errors import UserError

from .flags import FORMAT_HELP, positive_int, positive_int_list
from .predict import add_cluster_flag, add_memory_flags, memory_overrides


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("search", help="rank every layout of N GPUs predicted from one base trace",
                       description=__doc__.splitlines()[0])
    p.add_argument("base", help="directory of the base run (one trace per pipeline stage)")
    p.add_argument("--gpus", type=positive_int, required=True,
                   help="GPUs of every layout: TP x PP x DP = N")
    p.add_argument("--global-batch", type=positive_int, default=None, help="sequences per iteration (fixed)")
    p.add_argument("--micro-batch", type=positive_int_list, default=None,
                   help="micro-batch sizes to try, comma-separated (default: the base's)")
    p.add_argument("--vp", type=positive_int_list, default=None,
                   help="model chunks per pipeline stage to try, comma-separated (1: 1F1B, more: interleaved 1F1B; "
                        "default: the base's)")
    p.add_argument("--cp", type=positive_int_list, default=None,
                   help="context-parallel degrees to try, comma-separated (default: the base's; others from a base "
                        "that ran with context parallelism)")
    p.add_argument("--top", type=positive_int, default=None, help="show the K fastest fitting layouts")
    p.add_argument("--format", choices=("table", "json"), default="table", help=FORMAT_HELP)
    p.add_argument("--exact", action="store_true",
                   help="replay every layout's micro-batches whole (default: more than 2 x max(8, PP) are "
                        "extrapolated from two shorter replays, lumos/predict/search.py)")
    p.add_argument("--workers", type=positive_int, default=None,
                   help="processes sharing the layouts (default: every core; the ranking does not depend on it)")
    add_cluster_flag(p)
    add_memory_flags(p)
    p.set_defaults(func=run)


def _judged_against(tables, args) -> str:
    """The GPU memory the layouts are judged against and where it came from: given, the trace's, else the
    cluster profile's."""
    from lumos.durations.collectives import cluster_path, load_profile

    mem, device = device_memory(tables, memory_overrides(args))
    gib = float(mem.get("gpu_memory_gib") or load_profile(cluster_path(args.cluster))["memory"]["gpu_memory_gib"])
    return f"{gib:g} GiB ({device['source']})"


def run(args) -> int:
    from lumos.trace import load_run

    tables = load_run(args.base)
    try:
        rows = search(tables, args.gpus, args.micro_batch, args.global_batch, memory=memory_overrides(args),
                      exact=args.exact, workers=args.workers, cluster=args.cluster, vps=args.vp,
                      cps=args.cp, nccl_tests=tuple(args.nccl_tests))
    except ValueError as exc:
        raise UserError(str(exc)) from None
    shown = rows if args.top is None else [r for r in rows if r["fits"]][:args.top]
    if args.format == "json":
        sys.stdout.write(json.dumps(shown, indent=1) + "\n")
        return 0
    print(f"{args.base}: {len(rows)} layouts of {args.gpus} GPUs, {sum(r['fits'] for r in rows)} fit in memory")
    print(f"  memory per GPU judged against {_judged_against(tables, args)}")
    fsdp = any("fsdp_strategy" in r for r in rows)   # an FSDP base: each layout with each strategy
    moe = any("ep" in r for r in rows)               # an MoE base: each layout with each EP
    print(f"  {'tp':>3} {'cp':>3} {'pp':>3} {'vp':>3} {'dp':>4}" + (f" {'ep':>3}" if moe else "")
          + f" {'mbs':>4} {'m':>5}" + (f" {'FSDP':<13}" if fsdp else "")
          + f" {'iteration ms':>13} {'GiB/GPU':>8}  fits  replayed m")
    for r in shown:
        it = f"{r['iteration_us'] / 1e3:13.3f}" if r["iteration_us"] is not None else f"{'-':>13}"
        replayed = ",".join(map(str, r["replayed_microbatches"] or [])) or "-"
        strategy = f" {r['fsdp_strategy']:<13}" if fsdp else ""
        ep = f" {r['ep']:>3}" if moe else ""
        print(f"  {r['tp']:>3} {r['cp']:>3} {r['pp']:>3} {r['vp']:>3} {r['dp']:>4}{ep} {r['micro_batch']:>4} "
              f"{r['microbatches']:>5}{strategy} {it} {r['memory_gib_per_gpu']:8.1f}  {'yes' if r['fits'] else 'no ':<4}  "
              f"{replayed}")
    if any(len(r["replayed_microbatches"] or []) == 2 for r in shown):
        print("  replayed m with two counts: extrapolated to m from those two replays (--exact: replay all)")
    return 0
