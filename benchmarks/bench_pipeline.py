"""Where a pipeline job's time goes (against the targets set for the cost of a pipeline job): per
stage, in one run.

    python benchmarks/bench_pipeline.py [--trace RANK.json.gz] [--base DIR] [--repeat 3]

Part 1, one emulated 175B rank (default: the pipeline's gpt3_175b-8x4x8 seed 0 rank 0;
EMULATED): the median of `--repeat` in-process runs of each stage, beside a bare
`orjson.loads` of the same (gunzipped) bytes:
  load       `load_trace` (read, gunzip, scan, columns)
  build      `build_graph` (tasks, edges, timing fit)
  prepare    `lumos.sim.prepare` (the replay core's arrays)
  replay     the compiled replay core on prepared arrays
  breakdown  `replayed_breakdown`
  write      `write_timeline` of the replayed schedule (gzip JSON)
Part 2, whole processes (wall time, the median of `--repeat` runs after one warm-up):
`lumos replay RANK` (with and without the start-up prefetch of the trace, `lumos.prefetch`),
`lumos predict BASE --tp 2 --pp 8 --dp 8` (15B 2x2x4 -> 2x8x8) and `python -c "import lumos.cli"`
(start-up alone).
Part 3, batches: the nine scale-out targets of the base predicted in one process (as a pipeline
`predict_batch_*` job does: `lumos.cli.main` per target, the base loaded and fitted once) against
nine `lumos predict` processes.
Part 4, the emulator's trace writer on one emulated 15B 2x2x4 iteration (seed 0, 2 ranks; EMULATED;
`--writer-large`: also 15B 2x16x4 and 175B 8x4x8): every rank's events built as dicts and encoded
by orjson (`Recorder.events`, the definition) against the column-wise encoder (`Recorder.encode`,
what `write_result` writes), the same bytes.
Needs the pipeline's emulated runs (`snakemake --cores 8`) or the paths given.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("LUMOS_JIT", "always")  # figures of the compiled (C) paths

from lumos.analysis.replay import replayed_breakdown  # noqa: E402
from lumos.graph import build_graph  # noqa: E402
from lumos.report.timeline import write_timeline  # noqa: E402
from lumos.sim import Schedule, prepare, simulate  # noqa: E402
from lumos.sim.compiled import simulate_compiled  # noqa: E402
from lumos.trace import load_trace  # noqa: E402

RANK = ROOT / "results/default/emulated/gpt3_175b-8x4x8/seed0/rank0.json.gz"
BASE = ROOT / "results/default/emulated/gpt3_15b-2x2x4/seed0"


def median_time(fn, repeat):
    times, out = [], None
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def stages(path: Path, repeat: int) -> list[tuple[str, float]]:
    data = gzip.decompress(path.read_bytes())
    rows = [("orjson.loads (bytes in memory)", median_time(lambda: orjson.loads(data), repeat)[0])]
    t, table = median_time(lambda: load_trace(path), repeat)
    rows.append(("load", t))
    t, graph = median_time(lambda: build_graph(table), repeat)
    rows.append(("build", t))
    t, arrays = median_time(lambda: prepare(graph), repeat)
    rows.append(("prepare", t))
    simulate(graph)  # first call outside the timing
    t, out = median_time(lambda: simulate_compiled(arrays), repeat)
    rows.append(("replay", t))
    schedule = Schedule(start=out[0], end=out[1])
    rows.append(("breakdown", median_time(lambda: replayed_breakdown(graph, schedule), repeat)[0]))
    with tempfile.TemporaryDirectory() as tmp:
        rows.append(("write", median_time(lambda: write_timeline(Path(tmp) / "t.json.gz", graph, schedule.start,
                                                                   schedule.end, table), repeat)[0]))
    rows.append(("tasks", graph.n_tasks))
    return rows


def wall(cmd: list[str], **env: str) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=dict(os.environ, PYTHONPATH=str(ROOT), **env))
    return time.perf_counter() - t0


SCALEOUT = [(2, 2, 8), (2, 2, 16), (2, 2, 32), (2, 4, 4), (2, 8, 4), (2, 16, 4), (2, 4, 8), (2, 8, 8), (2, 4, 16)]


def predict_argv(base: Path, tp: int, pp: int, dp: int) -> list[str]:
    return ["predict", str(base), "--tp", str(tp), "--pp", str(pp), "--dp", str(dp), "--format", "json"]


def batch_in_process(base: Path) -> float:
    """Seconds for one fresh process that predicts every scale-out target (imports included)."""
    code = ("import contextlib, io, sys; from lumos.cli import main\n"
            f"for argv in {[predict_argv(base, *t) for t in SCALEOUT]!r}:\n"
            "    with contextlib.redirect_stdout(io.StringIO()):\n"
            "        assert main(argv) == 0\n")
    return wall([sys.executable, "-c", code])


WRITER_RUNS = {"15B 2x2x4": ["model=gpt3_15b", "parallel.tp=2", "parallel.pp=2", "parallel.dp=4"]}
WRITER_LARGE = {"15B 2x16x4": ["model=gpt3_15b", "parallel.tp=2", "parallel.pp=16", "parallel.dp=4"],
                "175B 8x4x8": ["model=gpt3_175b", "parallel.tp=8", "parallel.pp=4", "parallel.dp=8"]}


def emulator_write(overrides: list[str], repeat: int) -> tuple[int, int, float, float]:
    """(ranks, events, dict path s, column-wise s) for one emulated iteration (seed 0), both timed
    as `write_result` runs them (cyclic collector paused), after one call each (numba's start-up)."""
    from lumos.emulator import emulate
    from lumos.emulator.emulate import _no_cycle_collection
    from lumos.trace.writer import encode_trace

    result = emulate(overrides + ["seed=0"], progress=False)
    with _no_cycle_collection():
        result.encode(result.ranks[0])
        t_dicts, old = median_time(lambda: [encode_trace(result.events(r), result.metadata(r))
                                            for r in result.ranks], repeat)
        t_cols, new = median_time(lambda: [result.encode(r).tobytes() for r in result.ranks], repeat)
    if old != new:
        raise SystemExit("the column-wise encoder wrote other bytes than the dict path")
    events = sum(len(orjson.loads(b)["traceEvents"]) for b in new)
    return len(result.ranks), events, t_dicts, t_cols


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path, default=RANK)
    ap.add_argument("--base", type=Path, default=BASE)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--writer-large", action="store_true",
                    help="also time the emulator's writer on 15B 2x16x4 and 175B 8x4x8 (about a minute more)")
    args = ap.parse_args()
    for p in (args.trace, args.base):
        if not p.exists():
            raise SystemExit(f"{p}: not found (run the pipeline first, or pass --trace/--base)")
    print(f"load average {os.getloadavg()[0]:.2f}; {args.trace} (EMULATED)\n")
    rows = stages(args.trace, args.repeat)
    tasks = dict(rows).pop("tasks")
    loads = rows[0][1]
    print(f"| stage ({tasks:,} tasks) | s | / orjson.loads |\n|---|---|---|")
    for name, t in rows:
        if name != "tasks":
            print(f"| {name} | {t:.3f} | {t / loads:.2f} |")
    staged = sum(t for n, t in rows if n in ("load", "build", "prepare", "replay", "breakdown"))
    print(f"| load + build + prepare + replay + breakdown | {staged:.3f} | {staged / loads:.2f} |\n")
    py = sys.executable
    replay = [py, "-m", "lumos.cli", "replay", str(args.trace), "--format", "json"]
    cmds = {"python -c 'import lumos.cli' (start-up)": ([py, "-c", "import lumos.cli"], {}),
            f"lumos replay {args.trace.name}": (replay, {}),
            f"lumos replay {args.trace.name}, LUMOS_NO_PREFETCH=1": (replay, {"LUMOS_NO_PREFETCH": "1"}),
            "lumos predict 15B 2x2x4 -> 2x8x8": ([py, "-m", "lumos.cli", "predict", str(args.base), "--tp", "2",
                                                  "--pp", "8", "--dp", "8", "--format", "json"], {})}
    print(f"| whole process (median of {args.repeat}) | wall s | / orjson.loads |\n|---|---|---|")
    for label, (cmd, env) in cmds.items():
        wall(cmd, **env)  # warm-up: numba cache, page cache
        t = statistics.median(wall(cmd, **env) for _ in range(args.repeat))
        print(f"| {label} | {t:.2f} | {t / loads:.2f} |", flush=True)
    separate = sum(statistics.median(wall([py, "-m", "lumos.cli", *predict_argv(args.base, *t)])
                                     for _ in range(args.repeat)) for t in SCALEOUT)
    batched = statistics.median(batch_in_process(args.base) for _ in range(args.repeat))
    print(f"\n| the nine scale-out predictions (medians of {args.repeat}) | wall s |\n|---|---|")
    print(f"| nine `lumos predict` processes, summed | {separate:.2f} |")
    print(f"| one process, nine `lumos.cli.main` calls (a `predict_batch_*` job) | {batched:.2f} |")
    print(f"| ratio | {separate / batched:.2f}x |\n", flush=True)
    print(f"| emulator trace encode, seed 0 (EMULATED; median of {args.repeat}) | ranks | events | "
          "dicts + orjson.dumps s | column-wise s | ratio |\n|---|---|---|---|---|---|")
    for label, overrides in {**WRITER_RUNS, **(WRITER_LARGE if args.writer_large else {})}.items():
        ranks, events, t_dicts, t_cols = emulator_write(overrides, args.repeat)
        print(f"| {label} | {ranks} | {events:,} | {t_dicts:.3f} | {t_cols:.3f} | {t_dicts / t_cols:.1f}x |",
              flush=True)

if __name__ == "__main__":
    main()
