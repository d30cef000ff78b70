"""Replay throughput against graph size: compiled core, pure-Python reference, networkx, and a bound.

Run by hand (not part of the test suite; the 10^7 case takes a few minutes):

    python benchmarks/bench_replay.py                      # synthetic 1e4 .. 1e7, emulated traces if found
    python benchmarks/bench_replay.py --sizes 1e4,1e5,1e6 --limit-s 30 --trace DIR_OR_FILE ...

Engines, all on the same `SimArrays` (lumos.sim.prepare):
- compiled: `lumos.sim.compiled.simulate_compiled` (C, lumos/kernels/simulate.c; Algorithm 1 with run-time syncs);
- bound:    `lumos.sim.compiled.longest_path_bound`, one compiled pass in topological order
            (per-node max over predecessors + lag; no processors, no run-time dependencies);
- reference: `lumos.sim.reference.simulate_reference` (pure Python; checked identical to compiled);
- networkx: a straightforward replay on an nx.DiGraph: topological order, per-node max over
            predecessors (+ lag), per-processor availability. Its graph construction is timed apart.
Reference and networkx run only while their predicted time (last time x size ratio^1.1) stays
under --limit-s. Every (graph, engine) job runs in its own subprocess, so its peak memory
(VmHWM) is its own; the compiled job's peak includes generating the graph and prepare().
Times are the minimum over --reps runs (wall clock); the machine may be shared, see the load
average printed with the table.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from lumos.studies.emulated import emulated_traces

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("LUMOS_JIT", "always")  # figures of the compiled (C) paths


def _rss_mb() -> float:
    """This process's peak resident memory. VmHWM, not ru_maxrss: on Linux a child's ru_maxrss
    starts at its parent's size when it was forked, which would hide a small child's peak."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _best(fn, reps: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(reps):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def _graph(spec: dict):
    if spec["kind"] == "synthetic":
        from lumos.sim.synthetic import synthetic_graph
        return synthetic_graph(spec["n"], seed=spec["seed"], n_ranks=spec.get("ranks", 1)), {}
    from lumos.graph import build_graph
    from lumos.trace import load_trace
    table = load_trace(spec["path"])
    t = time.perf_counter()
    graph = build_graph(table)
    return graph, {"build_graph_s": time.perf_counter() - t}


def networkx_replay(graph) -> tuple[float, float]:
    """(build seconds, replay seconds) of the straightforward networkx replay."""
    import networkx as nx

    t0 = time.perf_counter()
    g = nx.DiGraph()
    g.add_nodes_from(range(graph.n_tasks))
    g.add_weighted_edges_from(zip(graph.src.tolist(), graph.dst.tolist(), graph.lag.tolist()), weight="lag")
    t1 = time.perf_counter()
    proc, dur, release = graph.proc.tolist(), graph.dur.tolist(), graph.release.tolist()
    avail: dict[int, float] = {}
    end = [0.0] * graph.n_tasks
    pred = g.pred
    for v in nx.topological_sort(g):
        s = release[v] if release[v] > -np.inf else -np.inf
        for u, attrs in pred[v].items():
            s = max(s, end[u] + attrs["lag"])
        s = max(s, avail.get(proc[v], -np.inf))
        end[v] = s + dur[v]
        avail[proc[v]] = end[v]
    return t1 - t0, time.perf_counter() - t1


def worker(spec: dict) -> dict:
    """One (graph, engine) measurement, in this process."""
    from lumos.sim import prepare, simulate
    from lumos.sim.compiled import longest_path_bound, simulate_compiled

    tiny = _graph({"kind": "synthetic", "n": 200, "seed": 0})[0]
    simulate_compiled(prepare(tiny))  # load the compiled code (cached) before measuring
    longest_path_bound(prepare(tiny))
    rss0 = _rss_mb()
    t = time.perf_counter()
    graph, extra = _graph(spec)
    out = {"tasks": graph.n_tasks, "edges": graph.n_edges, "graph_s": time.perf_counter() - t, **extra,
           "rss_before_mb": rss0}
    t = time.perf_counter()
    arrays = prepare(graph)
    out["prepare_s"] = time.perf_counter() - t
    engine, reps = spec["engine"], spec["reps"]
    if engine == "compiled":
        core, bound = [], []
        for _ in range(reps):  # alternated, so both see the same machine state; results dropped
            t, res = _best(lambda: simulate_compiled(arrays), 1)
            core.append(t)
            out["done"] = bool(res[2].all())
            del res
            bound.append(_best(lambda: longest_path_bound(arrays), 1)[0])
        out["core_s"], out["bound_s"] = min(core), min(bound)
        del arrays
        # the whole user-facing replay once: prepare() + compiled core + checks
        out["simulate_s"], _ = _best(lambda: simulate(graph, engine="compiled"), 1)
    elif engine == "reference":
        from lumos.sim.reference import simulate_reference
        out["core_s"], ref = _best(lambda: simulate_reference(arrays), 1)
        comp = simulate_compiled(arrays)
        out["identical"] = ref[3] == comp[3] and all(np.array_equal(r, c, equal_nan=True)
                                                     for r, c in zip(ref[:3], comp[:3]))
    else:
        out["nx_build_s"], out["core_s"] = networkx_replay(graph)
    out["peak_rss_mb"] = _rss_mb()
    return out


def run_job(spec: dict, timeout_s: float) -> dict | None:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(spec)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return None
    if proc.returncode != 0:
        print(proc.stderr[-2000:], file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def first_call_s() -> float:
    """First-call time of the compiled core in a fresh process (imports, a small graph, both kernels)."""
    code = ("import time; t=time.perf_counter(); from lumos.sim import prepare; "
            "from lumos.sim.compiled import simulate_compiled, longest_path_bound; "
            "from lumos.sim.synthetic import synthetic_graph; a=prepare(synthetic_graph(200)); "
            "simulate_compiled(a); longest_path_bound(a); print(time.perf_counter()-t)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    return float(proc.stdout.strip().splitlines()[-1])


def fit_exponent(ns: list[int], ts: list[float]) -> float:
    """Slope of log(time) against log(tasks)."""
    if len(ns) < 2:
        return float("nan")
    return float(np.polyfit(np.log(ns), np.log(ts), 1)[0])


def fmt(x, spec="{:.3g}") -> str:
    return "-" if x is None or (isinstance(x, float) and not np.isfinite(x)) else spec.format(x)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1e4,3e4,1e5,3e5,1e6,3e6,1e7")
    ap.add_argument("--limit-s", type=float, default=60.0, help="skip reference/networkx past this predicted time")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--trace", action="append", default=[], help="trace file(s) to replay too (emulated or real)")
    ap.add_argument("--json", type=Path, help="also write the raw results here")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return 0

    sizes = [int(float(s)) for s in args.sizes.split(",")]
    print(f"# replay benchmark  (load average at start: {os.getloadavg()[0]:.2f}, "
          f"{os.cpu_count()} CPUs)", flush=True)
    print(f"compiled core first call in a fresh process (imports included): {first_call_s():.2f} s", flush=True)
    rows = []
    last = {"reference": None, "networkx": None}
    for n in sizes:
        spec = {"kind": "synthetic", "n": n, "seed": args.seed}
        row = {"graph": f"synthetic {n:.0e}".replace("e+0", "e"), "n": n}
        row["compiled"] = run_job({**spec, "engine": "compiled", "reps": args.reps}, timeout_s=3600)
        for engine in ("reference", "networkx"):
            prev = last[engine]  # (tasks, seconds) of its last run, or "stop"
            if prev == "stop" or (prev and prev[1] * (n / prev[0]) ** 1.1 > args.limit_s):
                row[engine], last[engine] = None, "stop"
                continue
            res = run_job({**spec, "engine": engine, "reps": 1}, timeout_s=max(3 * args.limit_s, 120))
            row[engine] = res
            last[engine] = (n, res["core_s"] + res.get("nx_build_s", 0.0)) if res else "stop"
        rows.append(row)
        print_row(row, header=len(rows) == 1)
    for path in args.trace or [str(p) for p in emulated_traces()]:
        spec = {"kind": "trace", "path": str(path)}
        row = {"graph": f"emulated {Path(path).parent.name}/{Path(path).name}"}
        for engine in ("compiled", "reference", "networkx"):
            row[engine] = run_job({**spec, "engine": engine, "reps": args.reps if engine == "compiled" else 1},
                                  timeout_s=3600)
        row["n"] = row["compiled"]["tasks"] if row["compiled"] else 0
        rows.append(row)
        print_row(row, header=False)
    summarize(rows)
    if args.json:
        args.json.write_text(json.dumps({"compile": comp, "rows": rows}, indent=1))
    print(f"(load average at end: {os.getloadavg()[0]:.2f})")
    return 0


HEADER = ("| graph | tasks | edges | compiled s | compiled tasks/s | bound s | compiled/bound | "
          "reference s | ref = compiled | networkx s (build + replay) | compiled speed-up vs networkx "
          "(vs its replay only) | peak RSS MB (compiled job) |")


def print_row(row: dict, header: bool) -> None:
    if header:
        print(HEADER)
        print("|" + "---|" * (HEADER.count("|") - 1))
    c, r, x = row.get("compiled"), row.get("reference"), row.get("networkx")
    if c is None:
        print(f"| {row['graph']} | failed |")
        return
    nx_total = x["core_s"] + x["nx_build_s"] if x else None
    cells = [row["graph"], f"{c['tasks']:,}", f"{c['edges']:,}", fmt(c["core_s"]),
             fmt(c["tasks"] / c["core_s"], "{:.3g}"), fmt(c["bound_s"]), fmt(c["core_s"] / c["bound_s"], "{:.2f}"),
             fmt(r["core_s"]) if r else "-", ("yes" if r["identical"] else "NO") if r else "-",
             f"{nx_total:.3g} ({x['nx_build_s']:.3g} + {x['core_s']:.3g})" if x else "-",
             f"{nx_total / c['core_s']:.0f}x ({x['core_s'] / c['core_s']:.0f}x)" if x else "-",
             f"{c['peak_rss_mb']:.0f}"]
    print("| " + " | ".join(cells) + " |", flush=True)


def summarize(rows: list[dict]) -> None:
    syn = [r for r in rows if r["graph"].startswith("synthetic") and r.get("compiled")]
    for engine, key in (("compiled", "core_s"), ("bound", "bound_s"), ("reference", "core_s"),
                        ("networkx", "core_s")):
        src = "compiled" if engine == "bound" else engine
        pts = [(r["n"], r[src][key] + (r[src].get("nx_build_s", 0.0) if engine == "networkx" else 0.0))
               for r in syn if r.get(src)]
        big = [p for p in pts if p[0] >= 1e5] or pts
        print(f"growth exponent, {engine}: {fit_exponent(*zip(*pts)) if len(pts) > 1 else float('nan'):.3f} "
              f"over {len(pts)} sizes; {fit_exponent(*zip(*big)) if len(big) > 1 else float('nan'):.3f} "
              f"from 1e5 up")
    at = {r["n"]: r for r in syn}
    if 10**6 in at and at[10**6].get("networkx"):
        r = at[10**6]
        x = r["networkx"]
        print(f"at 1e6 tasks: compiled {r['compiled']['core_s']:.3f} s, bound {r['compiled']['bound_s']:.3f} s "
              f"(ratio {r['compiled']['core_s'] / r['compiled']['bound_s']:.2f}), networkx "
              f"{x['nx_build_s'] + x['core_s']:.1f} s incl. building its graph "
              f"({(x['nx_build_s'] + x['core_s']) / r['compiled']['core_s']:.0f}x), replay alone "
              f"{x['core_s']:.1f} s ({x['core_s'] / r['compiled']['core_s']:.0f}x)")
    if syn:
        big = max(syn, key=lambda r: r["n"])
        c = big["compiled"]
        print(f"largest: {c['tasks']:,} tasks: lumos.sim.simulate (prepare + compiled core) {c['simulate_s']:.2f} s "
              f"(prepare {c['prepare_s']:.2f} s, core {c['core_s']:.2f} s); peak RSS {c['peak_rss_mb']:.0f} MB "
              f"for generating the graph, prepare() and the replays (process baseline after imports "
              f"{c['rss_before_mb']:.0f} MB)")


if __name__ == "__main__":
    sys.exit(main())
