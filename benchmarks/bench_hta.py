"""HTA (HolisticTraceAnalysis) loading the emulated multi-rank runs `bench_ranks.py` replays: wall time and peak memory.

The runs are bench_ranks.py's (GPT-3 15B at TP 2 x PP 2 x DP n, every rank emulated and written with
`ranks=all`, granularity `coarse`; EMULATED), made here the same way into --work (or reused from there).
Each is loaded by `TraceAnalysis(trace_dir=DIR)` in a fresh process of the Python that has HTA
(--python; HTA 0.5.0 wants pandas < 3: `pip install HolisticTraceAnalysis 'pandas<3' 'numpy<2.3'`,
in an environment of its own); wall time is perf_counter around the subprocess, peak memory the
process's maximum resident set (`/usr/bin/time -v`: the largest one process, HTA's parsing workers
included as children, not their sum), its address space capped at --max-gb so that a run too large
fails instead of taking the machine.

HTA finds each file's rank with the regular expression `"rank":\\s+(\\d+)` (hta/common/trace_file.py,
0.5.0): one or more spaces after the colon, as Kineto writes it. The emulator writes compact JSON
(`"rank":3`), so HTA gives every file rank 0 and keeps one of them. The benchmark says so (the load of
the run as written) and then loads a copy with `"rank": N` in each file's distributedInfo (HTA's own
format, every event as emulated), which is what the table's times are for.

    python benchmarks/bench_hta.py [--ranks 64,256,1024] [--work DIR] [--python PY] [--max-gb 10]

Prints a message and exits 0 where --python has no HTA. Not run by the test suite.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

LOAD = r"""
import json, sys, time
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t1 = time.perf_counter()
a = TraceAnalysis(trace_dir=sys.argv[1])
t2 = time.perf_counter()
traces = a.t.traces
print("HTA_RESULT " + json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "ranks": len(traces),
                                   "events": int(sum(len(df) for df in traces.values()))}))
"""


def emulate(ranks: int, out: Path) -> float:
    """Seconds to emulate and write the run as bench_ranks.py does (0 when it was already there)."""
    if (out / "manifest.json").exists():
        return 0.0
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "lumos.cli", "emulate", "model=gpt3_15b", "parallel.tp=2", "parallel.pp=2",
                    f"parallel.dp={ranks // 4}", "ranks=all", "emulator.granularity=coarse", "progress=false",
                    f"out={out}"], check=True, capture_output=True)
    return time.perf_counter() - t


def hta_copy(run: Path, out: Path) -> float:
    """`run` with `"rank": N` (a space after the colon) in each file's distributedInfo; seconds taken."""
    if (out / ".complete").exists():
        return 0.0
    t = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    for f in sorted(run.glob("rank*.json.gz")):
        data = gzip.decompress(f.read_bytes())
        head, n = re.subn(rb'"rank":(\d+)', rb'"rank": \1', data[:4096], count=1)
        if not n:
            raise SystemExit(f"{f}: no \"rank\" in its first 4096 bytes")
        (out / f.name).write_bytes(gzip.compress(head + data[4096:], compresslevel=1))
    (out / ".complete").write_text("")
    return time.perf_counter() - t


def load(python: str, trace_dir: Path, max_gb: float, timeout: float) -> dict:
    """One `TraceAnalysis(trace_dir)` in a fresh process: wall s, peak MB, what HTA says it loaded."""
    cap = int(max_gb * 2**30)

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    t = time.perf_counter()
    try:
        p = subprocess.run(["/usr/bin/time", "-v", python, "-c", LOAD, str(trace_dir)], capture_output=True,
                           text=True, timeout=timeout, preexec_fn=limit, check=False)
    except subprocess.TimeoutExpired:
        return {"ok": False, "why": f"not done in {timeout:.0f} s", "wall_s": timeout}
    wall = time.perf_counter() - t
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr)
    row = {"wall_s": wall, "peak_mb": int(rss.group(1)) / 1024 if rss else float("nan")}
    got = re.search(r"HTA_RESULT (.*)", p.stdout)
    if p.returncode or not got:
        tail = [x for x in p.stderr.splitlines() if x.strip() and not x.startswith("\t")][-1:] or ["?"]
        return {**row, "ok": False, "why": f"exit {p.returncode}: {tail[0][:200]}"}
    return {**row, "ok": True, **json.loads(got.group(1))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", default="64,256,1024")
    ap.add_argument("--work", default="/tmp/lumos-bench-ranks", help="where bench_ranks.py's runs are (or go)")
    ap.add_argument("--python", default=sys.executable, help="a Python with HTA installed")
    ap.add_argument("--max-gb", type=float, default=10.0, help="address-space cap of each HTA process (GiB)")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds before an HTA load is given up")
    ap.add_argument("--as-written", action="store_true", help="also load each run as the emulator wrote it")
    args = ap.parse_args()
    probe = subprocess.run([args.python, "-c", "import hta, pandas; print(pandas.__version__)"],
                           capture_output=True, text=True, check=False)
    if probe.returncode:
        print(f"HTA is not installed in {args.python} (pip install HolisticTraceAnalysis 'pandas<3' 'numpy<2.3', in "
              "an environment of its own, then --python ENV/bin/python): skipped")
        return 0
    print(f"HTA with pandas {probe.stdout.strip()} ({args.python}), {os.cpu_count()} CPUs, address space <= "
          f"{args.max_gb:g} GiB per load")
    print(f"{'ranks':>6} {'trace MB':>9} {'what':>16} {'HTA ranks':>10} {'events':>11} {'wall s':>8} "
          f"{'load s':>8} {'peak MB':>8}  note")
    for n in map(int, args.ranks.split(",")):
        run = Path(args.work) / f"gpt3_15b_2x2x{n // 4}"
        emulate(n, run)
        mb = sum(f.stat().st_size for f in run.glob("rank*.json.gz")) / 1e6
        cases = [("as written", run)] if args.as_written else []
        prep = hta_copy(run, Path(f"{run}_hta"))
        cases.append(("rank spaced", Path(f"{run}_hta")))
        for what, d in cases:
            r = load(args.python, d, args.max_gb, args.timeout)
            note = "" if r["ok"] else r["why"]
            if what == "rank spaced" and prep:
                note = (note + "; " if note else "") + f"copy made in {prep:.1f} s"
            print(f"{n:>6} {mb:>9.1f} {what:>16} {r.get('ranks', '-'):>10} {r.get('events', '-'):>11} "
                  f"{r['wall_s']:>8.1f} {r.get('load_s', float('nan')):>8.1f} {r.get('peak_mb', float('nan')):>8.0f}"
                  f"  {note}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
