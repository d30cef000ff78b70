"""Layers found by repetition vs the annotated ones, on an emulated run (EMULATED).

Strips every `user_annotation` but `ProfilerStep#N` from each rank of RUN_DIR, recovers the
layers (`lumos.model.recover`), and prints: how many graph tasks land in a different block
than with the annotations, the recovery time, and the predicted iteration from the stripped and
the annotated traces for each target (their difference in %). The command behind the numbers in
docs/notes/2026-12-01-layer-recovery.md:

    python studies/structure/recover_check.py results/default/emulated/gpt3_15b-2x2x4/seed0 --scaleout --variants
    python studies/structure/recover_check.py results/default/emulated/gpt3_175b-8x4x8/seed0 \\
        --target pp=8 --target dp=16 --target layers=128 --target pp=8,dp=4 --target hidden=16384,ffn=65536
    python studies/structure/recover_check.py resources/traces/h200/base_r0 --ours-only   # a recorded trace
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from lumos.predict.prediction import predict
from lumos.graph.run_graph import build_run_graph
from lumos.trace import load_run, schema
from lumos.model.recover import recover_layers
from lumos.model.structure import ANN, BUCKET, find_structure

SCALEOUT = ["dp=8", "dp=16", "dp=32", "pp=4", "pp=8", "pp=16", "pp=4,dp=8", "pp=8,dp=8", "pp=4,dp=16"]
VARIANTS = ["layers=64", "layers=96", "hidden=9216,ffn=18432", "hidden=12288,ffn=24576"]   # V1-V4 of 15B


def strip(table, ours_only: bool = False):
    """Without annotations but the step markers; `ours_only`: without the ranges our capture writes
    only (torch's own `Optimizer.step#` stays, as in anybody's trace)."""
    names = table.name.astype(str)
    drop = (table.cat == schema.ANNOTATION) & ~np.char.startswith(names, "ProfilerStep#")
    if ours_only:
        drop &= np.array([bool(ANN.match(n) or BUCKET.match(n)) or n in ("optimizer", "forward", "backward")
                          for n in names])
    return table.take(~drop)


def block_keys(graph, tables):
    st = find_structure(graph, tables)
    return [None if b < 0 else repr(st.blocks[b].key + (st.blocks[b].kind,)) for b in st.task_block]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", help="a directory of emulated rank traces with layer ranges")
    ap.add_argument("--target", action="append", default=[], help="k=v[,k=v]: tp, pp, dp, layers, hidden, ffn")
    ap.add_argument("--scaleout", action="store_true", help="the nine scale-out targets of the 15B base")
    ap.add_argument("--variants", action="store_true", help="V1-V4 of the 15B base")
    ap.add_argument("--ours-only", action="store_true",
                    help="strip only the ranges our capture writes (a recorded trace: keep torch's own)")
    args = ap.parse_args()
    tables = load_run(args.run)
    stripped = [strip(t, args.ours_only) for t in tables]
    t0 = time.perf_counter()
    recovered, how = recover_layers(stripped)
    took = time.perf_counter() - t0
    for h in how:
        print(f"{h.source}: {h.note}")
    graph_a, graph_b = build_run_graph(tables), build_run_graph(stripped)   # the same tasks, in order
    assert graph_a.n_tasks == graph_b.n_tasks and (graph_a.name == graph_b.name).all()
    a, b = block_keys(graph_a, tables), block_keys(graph_b, recovered)
    differ = sum(x != y for x, y in zip(a, b))
    print(f"tasks {len(a)}, in another block than annotated: {differ}; recovery {took:.2f} s "
          f"({len(tables)} ranks, {sum(len(t) for t in tables)} events)")
    targets = args.target + (SCALEOUT if args.scaleout else []) + (VARIANTS if args.variants else [])
    worst = 0.0
    for text in targets:
        target = {k: int(v) for k, v in (kv.split("=") for kv in text.split(","))}
        pa = predict(tables, target)["predicted"]["iteration_us"]
        pb = predict(stripped, target)["predicted"]["iteration_us"]
        d = 100.0 * (pb - pa) / pa
        worst = max(worst, abs(d))
        print(f"{text:<24} annotated {pa / 1e3:10.3f} ms  recovered {pb / 1e3:10.3f} ms  {d:+.4f}%")
    if targets:
        print(f"worst |difference| {worst:.4f}%")


if __name__ == "__main__":
    main()
