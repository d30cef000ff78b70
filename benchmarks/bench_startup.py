"""Whole-process times of `lumos replay` and `lumos predict` against HTA and against the floor (the
targets set for start-up: docs/notes/2026-12-03-startup-against-hta.md).

    python benchmarks/bench_startup.py [--repeat 5] [--env-python PY] [--before CHECKOUT] [--csv FILE] [TRACE ...]
    python benchmarks/bench_startup.py --kernels
    python benchmarks/bench_startup.py --predict-only [--repeat 7] [--before CHECKOUT]

Every figure is a median of `--repeat` whole processes, the commands of one trace interleaved
so that machine load hits them alike; the ratios are of medians from the same run.

Every process runs in the benchmark's own environment, HTA installed beside lumos (as the
start-up targets ask): `--env-python`, or a venv made on first use under the temp dir (`pip install
HolisticTraceAnalysis==0.5.0 'pandas<3' 'numpy<2.3'`, then `pip install -e` this checkout under
the same pins; pandas 3 breaks HTA 0.5.0). Both commands then start the same interpreter with the
same site-packages. Until 2026-12-06 lumos ran under the interpreter that runs this script while
HTA ran in a bare venv; where that interpreter's site-packages add work to every start-up (this
sandbox's adds a `.pth` importing certifi, ~30 ms), lumos alone paid for it. `lumos_here_s` keeps
that figure: `lumos replay` under the interpreter running this script.

- `lumos replay TRACE` as a user runs it (`LUMOS_JIT` unset: the C kernels, `lumos.jit`), the
  same with `LUMOS_JIT=never` (their plain-Python twins), and with `--before` a checkout of an
  earlier commit (run from that checkout, `PYTHONPATH=CHECKOUT`; its numba cache, where it has
  one, is filled by the untimed first run).
- HTA 0.5.0 (HolisticTraceAnalysis): `TraceAnalysis(trace_dir)` then
  `critical_path_analysis(rank, "ProfilerStep", None)`, the trace alone in a directory.
- `lumos predict` GPT-3 15B 2x2x4 -> 2x8x8 from the emulated base (`lumos.studies.emulated`)
  against the floor the start-up targets name: a process that starts Python, imports numpy and numba
  and reads (gunzips) the same base files.

`--csv FILE` also writes the rows (the README's start-up claim reads benchmarks/startup_vs_hta.csv,
written by `python benchmarks/bench_startup.py --csv benchmarks/startup_vs_hta.csv`).

`--kernels` prints, in one process, what each C kernel and its plain twin take on each trace.

Default traces: the four largest shipped real ones (measured on hardware by their authors) and
the emulated GPT-3 175B 8x4x8 rank 0 (EMULATED).
"""

from __future__ import annotations

import argparse
import csv
import gzip
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lumos.studies.emulated import CACHE, emulated_traces

ROOT = Path(__file__).resolve().parent.parent

REAL = ROOT / "resources" / "traces" / "real"
DEFAULT_REAL = [
    REAL / "hta" / "trace_diff__control__control.json.gz",
    REAL / "hta" / "negative_queue_length_values_check__rank0.json.gz",
    REAL / "hta" / "nccl_parser_config__nccl_data.json.gz",
    REAL / "kineto" / "resnet50_num_workers_0__worker0.1623143566756.pt.trace.json.gz",
]
BENCH_ENV = Path(tempfile.gettempdir()) / "lumos-bench-env"
PINS = ["pandas<3", "numpy<2.3"]   # HTA 0.5.0 breaks under pandas 3
HTA = "HolisticTraceAnalysis==0.5.0"
HTA_SCRIPT = """
import sys, time
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
ta = TraceAnalysis(trace_dir=sys.argv[1])
t1 = time.perf_counter()
graph, ok = ta.critical_path_analysis(rank=ta.t.get_ranks()[0], annotation="ProfilerStep", instance_id=None)
if not ok:
    sys.exit("HTA's critical path analysis failed")
print(f"HTA load {t1 - t0:.3f} s, critical path {time.perf_counter() - t1:.3f} s, {graph.number_of_nodes()} nodes",
      file=sys.stderr)
"""
FLOOR_SCRIPT = """
import gzip, sys
import numpy, numba
for f in sys.argv[1:]:
    data = open(f, "rb").read()
    if data[:2] == b"\\x1f\\x8b":
        data = gzip.decompress(data)
"""


def bench_python(given: str | None) -> str:
    """The python of the benchmark's environment (HTA and this checkout installed), made if need be."""
    if given:
        return given
    py = BENCH_ENV / "bin" / "python"
    if not py.exists():
        print(f"(making the benchmark's environment in {BENCH_ENV})", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(BENCH_ENV)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", HTA, *PINS], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "-e", str(ROOT), *PINS], check=True)
    where = subprocess.run([py, "-c", "import lumos; print(lumos.__file__)"], capture_output=True, text=True)
    if Path(where.stdout.strip()).resolve().parent != ROOT / "lumos":
        raise SystemExit(f"{py} imports lumos from {where.stdout.strip() or '(nowhere)'}, not from {ROOT}: "
                         f"`{py} -m pip install -e {ROOT}` there first")
    return str(py)


def timed(cmd: list[str], env: dict | None = None, may_fail: bool = False) -> float:
    """Seconds of one whole process; NaN where a `may_fail` command (HTA) fails. A process given
    PYTHONPATH (`--before`) runs from there, or `python -m` would import this checkout's lumos."""
    t = time.perf_counter()
    cwd = (env or {}).get("PYTHONPATH")
    proc = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    took = time.perf_counter() - t
    if proc.returncode != 0:
        if may_fail:
            print(f"({cmd[0]} failed: {proc.stderr.strip().splitlines()[-1][:200]})", file=sys.stderr)
            return float("nan")
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    return took


def env_with(**extra) -> dict:
    """This process's environment without LUMOS_JIT, and without PYTHONDONTWRITEBYTECODE: a user's
    Python caches compiled modules, so each command's untimed first run writes them (a checkout
    installed in editable mode has none until then; HTA's were compiled by pip)."""
    env = {k: v for k, v in os.environ.items() if k not in ("LUMOS_JIT", "PYTHONDONTWRITEBYTECODE")}
    env.update({k: v for k, v in extra.items() if v is not None})
    return env


PYTHON = sys.executable   # the benchmark environment's, once main() has made it


def lumos_cmd(*args: str, python: str | None = None) -> list[str]:
    return [python or PYTHON, "-m", "lumos.cli", *args]


def medians(variants: dict[str, tuple[list[str], dict]], repeat: int) -> dict[str, float]:
    """Each variant run once untimed (caches), then `repeat` rounds interleaved."""
    times: dict[str, list[float]] = {name: [] for name in variants}
    failed = set()
    for name, (cmd, env) in variants.items():
        if math.isnan(timed(cmd, env, may_fail=name == "hta")):
            failed.add(name)   # fails on this trace: not repeated
    for _ in range(repeat):
        for name, (cmd, env) in variants.items():
            times[name].append(float("nan") if name in failed else timed(cmd, env))
    return {name: statistics.median(ts) for name, ts in times.items()}


def events_and_mb(trace: Path) -> tuple[int, float]:
    data = gzip.decompress(trace.read_bytes()) if trace.suffix == ".gz" else trace.read_bytes()
    return data.count(b'"ph"'), len(data) / 1e6


def write_csv(rows: list[dict], path: Path) -> None:
    """The rows, written to a temporary name and renamed (a half-written file is never left)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    tmp.replace(path)


def row(command: str, trace: str, m: dict, reference: str, emulated: bool, events: int = 0, mb: float = 0.0) -> dict:
    ref = m.get(reference, float("nan"))
    return {"command": command, "trace": trace, "events": events, "mb_json": round(mb, 1),
            "emulated": emulated, "lumos_s": round(m["auto"], 3), "never_s": round(m["never"], 3),
            "before_s": round(m.get("before", float("nan")), 3),
            "lumos_here_s": round(m.get("here", float("nan")), 3), "reference": reference,
            "reference_s": round(ref, 3),
            "reference_over_lumos": round(ref / m["auto"], 2), "lumos_over_reference": round(m["auto"] / ref, 2),
            "cpus": os.cpu_count(), "load_average": round(os.getloadavg()[0], 2)}


def replay_rows(traces: list[Path], repeat: int, hta: bool, before: str | None) -> list[dict]:
    print("| trace | events | MB of JSON | lumos replay s | LUMOS_JIT=never s | under this script's python s |"
          + (" before s |" if before else "") + " HTA load + critical path s | HTA / lumos |")
    print("|---|---|---|---|---|---|" + ("---|" if before else "") + "---|---|")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for trace in traces:
            alone = Path(tmp) / trace.stem.replace(".json", "")
            alone.mkdir()
            (alone / trace.name).symlink_to(trace)
            variants = {"auto": (lumos_cmd("replay", str(trace)), env_with()),
                        "never": (lumos_cmd("replay", str(trace)), env_with(LUMOS_JIT="never")),
                        "here": (lumos_cmd("replay", str(trace), python=sys.executable), env_with())}
            if before:
                variants["before"] = (lumos_cmd("replay", str(trace)), env_with(PYTHONPATH=before))
            if hta:
                variants["hta"] = ([PYTHON, "-W", "ignore", "-c", HTA_SCRIPT, str(alone)], env_with())
            m = medians(variants, repeat)
            n, mb = events_and_mb(trace)
            label = trace.parent.name + "/" + trace.name[:44] + (" (EMULATED)" if CACHE in trace.parents else "")
            cells = [label, f"{n:,}", f"{mb:.1f}", f"{m['auto']:.2f}", f"{m['never']:.2f}", f"{m['here']:.2f}"]
            if before:
                cells.append(f"{m['before']:.2f}")
            if not hta:
                cells += ["-", "-"]
            elif math.isnan(m["hta"]):
                cells += ["fails", "-"]
            else:
                cells += [f"{m['hta']:.2f}", f"{m['hta'] / m['auto']:.1f}x"]
            print("| " + " | ".join(cells) + " |", flush=True)
            rows.append(row("replay", trace.parent.name + "/" + trace.name, m, "hta" if hta else "none",
                            CACHE in trace.parents, n, mb))
    return rows


def predict_row(repeat: int, before: str | None) -> dict:
    base = CACHE / "gpt3_15b_2x2x4"
    files = sorted(str(f) for f in base.glob("rank*.json.gz"))
    args = ["predict", str(base), "--tp", "2", "--pp", "8", "--dp", "8"]
    variants = {"auto": (lumos_cmd(*args), env_with()),
                "never": (lumos_cmd(*args), env_with(LUMOS_JIT="never")),
                "floor": ([PYTHON, "-c", FLOOR_SCRIPT, *files], env_with())}
    if before:
        variants["before"] = (lumos_cmd(*args), env_with(PYTHONPATH=before))
    m = medians(variants, repeat)
    print("\n| command | lumos s | LUMOS_JIT=never s |" + (" before s |" if before else "")
          + " floor s (python + numpy + numba + read the base) | lumos / floor |")
    print("|---|---|---|" + ("---|" if before else "") + "---|---|")
    cells = ["predict 15B 2x2x4 -> 2x8x8 (EMULATED base)", f"{m['auto']:.2f}", f"{m['never']:.2f}"]
    if before:
        cells.append(f"{m['before']:.2f}")
    cells += [f"{m['floor']:.2f}", f"{m['auto'] / m['floor']:.2f}x"]
    print("| " + " | ".join(cells) + " |")
    return row("predict 15B 2x2x4 -> 2x8x8", "gpt3_15b_2x2x4", m, "floor", True)


def best_of(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def kernels(traces: list[Path], repeat: int) -> None:
    """Each C kernel against its plain twin, in one process, best of `repeat`."""
    import orjson

    from lumos.analysis.critical_path import critical_path, critical_path_reference
    from lumos.graph import build_graph
    from lumos.sim import simulate
    from lumos.trace import reader, scanned

    print("| trace | MB | tasks | load plain / C s | simulate reference / C s | "
          "critical path reference / C s | build, leaf walk plain / C s |")
    print("|---|---|---|---|---|---|---|")
    for trace in traces:
        data = gzip.decompress(trace.read_bytes())
        plain = best_of(lambda: reader.parse_document(orjson.loads(data), trace), repeat)
        scan = best_of(lambda: scanned.scanned_columns(data), repeat)
        table = reader.load_trace(trace)
        g = build_graph(table)
        sim_ref = best_of(lambda: simulate(g, "reference"), repeat)
        sim_c = best_of(lambda: simulate(g, "compiled"), repeat)
        cp_ref = best_of(lambda: critical_path_reference(g, g.ts, g.end, 1.0), repeat)
        cp_c = best_of(lambda: critical_path(g, g.ts, g.end, 1.0), repeat)
        os.environ["LUMOS_JIT"] = "never"
        build_plain = best_of(lambda: build_graph(table), repeat)
        os.environ.pop("LUMOS_JIT")
        build_c = best_of(lambda: build_graph(table), repeat)
        print(f"| {trace.name[:44]} | {len(data) / 2**20:.1f} | {g.n_tasks:,} | {plain:.3f} / {scan:.3f} | "
              f"{sim_ref:.3f} / {sim_c:.4f} | {cp_ref:.3f} / {cp_c:.4f} | {build_plain:.3f} / {build_c:.3f} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("traces", nargs="*", type=Path)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--env-python", "--hta-python", default=None,
                    help="python of an environment with HTA 0.5.0 and this checkout installed")
    ap.add_argument("--no-hta", action="store_true", help="leave HTA out")
    ap.add_argument("--before", default=None, metavar="CHECKOUT", help="also time an earlier checkout's lumos")
    ap.add_argument("--kernels", action="store_true", help="each C kernel against its plain twin instead")
    ap.add_argument("--predict-only", action="store_true", help="only the `lumos predict` row (no HTA, no replays)")
    ap.add_argument("--csv", type=Path, default=None, metavar="FILE", help="also write the rows to this CSV")
    args = ap.parse_args()
    global PYTHON
    if not args.kernels:
        PYTHON = bench_python(args.env_python)
    if args.predict_only:
        emulated_traces()
        rows = [predict_row(args.repeat, args.before)]
        if args.csv:
            write_csv(rows, args.csv)
        return 0
    traces = args.traces or [*DEFAULT_REAL, *[t for t in emulated_traces() if "175b" in str(t)]]
    if args.kernels:
        kernels(traces, args.repeat)
        return 0
    print(f"# bench_startup: {len(traces)} traces, median of {args.repeat} whole processes each, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}, python {PYTHON}\n")
    rows = replay_rows(traces, args.repeat, not args.no_hta, args.before)
    emulated_traces()   # the predict base
    rows.append(predict_row(args.repeat, args.before))
    if args.csv:
        write_csv(rows, args.csv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
