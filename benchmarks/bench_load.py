"""Trace loading throughput and peak memory: lumos.trace beside orjson.loads alone and json.load.

Run by hand (not part of the test suite):

    python benchmarks/bench_load.py                 # shipped real traces + emulated traces
    python benchmarks/bench_load.py --trace FILE ... --reps 5

Every trace is first decompressed to a temporary .json, so MB/s counts JSON bytes and every
method starts from the same file:
- lumos:        lumos.trace.load_trace(path.json), the whole job: read, parse, columns, free;
- lumos (.gz):  load_trace(path.json.gz), the same plus gzip decompression;
- orjson:       orjson.loads(bytes) on bytes already in memory, called as is (cyclic GC on);
- orjson no GC: the same with the cyclic garbage collector paused (as load_trace does), which
                is orjson's own cost: the collector alone can double it on big documents;
- json:         json.load(open file).
Times are the best of --reps runs (wall clock). Peak memory is measured per (file, method)
in a fresh subprocess: peak resident memory (VmHWM) after the call minus before it (after
imports and a warm-up load), with the result still alive; the input bytes are not counted
for orjson (read before), and are for lumos and json (they read the file).
"""

from __future__ import annotations

import argparse
import gc
import gzip
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lumos.studies.emulated import emulated_traces

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("LUMOS_JIT", "always")  # figures of the compiled (C) paths
REAL = ROOT / "resources" / "traces" / "real"
DEFAULT_REAL = [
    REAL / "kineto" / "resnet50_num_workers_0__worker0.1623143566756.pt.trace.json.gz",
    REAL / "hta" / "trace_diff__control__control.json.gz",
    REAL / "hta" / "negative_queue_length_values_check__rank0.json.gz",
    REAL / "param" / "resnet_1gpu" / "resnet_kineto.json.gz",
    REAL / "hta" / "nccl_parser_config__nccl_data.json.gz",
    REAL / "param" / "dlrm_8rank" / "kineto" / "worker0_step_12.1694128201545.pt.trace.json.gz",
]
METHODS = ("lumos", "lumos_gz", "orjson", "orjson_nogc", "json")
WARM_UP = REAL / "hta" / "sync_fixtures" / "critical_path__cuda_event_sync__event_sync_trace.json.gz"


def _call(method: str, json_path: Path, gz_path: Path, data: bytes | None):
    """Run one method once; returns what it built (kept alive by the caller)."""
    import orjson

    from lumos.trace import load_trace
    if method == "lumos":
        return load_trace(json_path)
    if method == "lumos_gz":
        return load_trace(gz_path)
    if method == "orjson":
        return orjson.loads(data)
    if method == "orjson_nogc":
        gc.disable()
        try:
            return orjson.loads(data)
        finally:
            gc.enable()
    with open(json_path, "rb") as fh:
        return json.load(fh)


def time_method(method: str, json_path: Path, gz_path: Path, reps: int) -> float:
    data = json_path.read_bytes() if method.startswith("orjson") else None
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        out = _call(method, json_path, gz_path, data)
        best = min(best, time.perf_counter() - t)
        del out
        gc.collect()
    return best


def _peak_rss_mb() -> float:
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


def memory_worker(method: str, json_path: Path, gz_path: Path) -> float:
    """Peak RSS growth (MB) of one call, measured in this (fresh) process."""
    from lumos.trace import load_trace
    load_trace(WARM_UP)  # first call outside the timing
    data = json_path.read_bytes() if method.startswith("orjson") else None
    before = _peak_rss_mb()
    out = _call(method, json_path, gz_path, data)
    after = _peak_rss_mb()
    del out
    return after - before


def peak_memory(method: str, json_path: Path, gz_path: Path) -> float | None:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--memory", method, str(json_path), str(gz_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        print(proc.stderr[-1500:], file=sys.stderr)
        return None
    return float(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", action="append", type=Path, default=[], help="trace file(s) (.json or .json.gz)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json-reps", type=int, default=2)
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--json", type=Path, help="also write the raw results here")
    ap.add_argument("--memory", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.memory:
        method, json_path, gz_path = args.memory
        print(memory_worker(method, Path(json_path), Path(gz_path)))
        return 0

    traces = args.trace or (DEFAULT_REAL + emulated_traces())
    print(f"# load benchmark  (load average at start: {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs)")
    header = ("| trace | JSON MB | events kept | lumos MB/s | lumos .gz MB/s | orjson MB/s | orjson no-GC MB/s | "
              "json MB/s | lumos / orjson | lumos / orjson no-GC | peak MB: lumos | orjson | json | "
              "lumos peak / JSON size |")
    print(header)
    print("|" + "---|" * (header.count("|") - 1), flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for src in traces:
            src = Path(src)
            raw = src.read_bytes()
            text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
            json_path = Path(tmp) / (src.name.removesuffix(".gz").removesuffix(".json") + ".json")
            gz_path = Path(tmp) / (json_path.name + ".gz")
            json_path.write_bytes(text)
            gz_path.write_bytes(raw if raw[:2] == b"\x1f\x8b" else gzip.compress(text))
            mb = len(text) / 1e6
            from lumos.trace import load_trace
            kept = len(load_trace(json_path))
            t = {m: time_method(m, json_path, gz_path, args.json_reps if m == "json" else args.reps)
                 for m in METHODS}
            mem = {m: (None if args.no_memory else peak_memory(m, json_path, gz_path))
                   for m in ("lumos", "orjson", "json")}
            label = ("emulated " if "lumos-bench-emulated" in str(src) else "") + (
                f"{src.parent.name}/{src.name}" if "emulated" in str(src) else src.name)
            row = {"trace": label, "json_mb": mb, "kept": kept, "seconds": t, "peak_mb": mem}
            rows.append(row)
            cells = [label[:60], f"{mb:.1f}", f"{kept:,}"] + [f"{mb / t[m]:.0f}" for m in METHODS] + [
                f"{t['lumos'] / t['orjson']:.2f}", f"{t['lumos'] / t['orjson_nogc']:.2f}"] + [
                "-" if mem[m] is None else f"{mem[m]:.0f}" for m in ("lumos", "orjson", "json")] + [
                "-" if mem["lumos"] is None else f"{mem['lumos'] / mb:.1f}x"]
            print("| " + " | ".join(cells) + " |", flush=True)
    worst = max(rows, key=lambda r: r["seconds"]["lumos"] / r["seconds"]["orjson_nogc"])
    big = [r for r in rows if r["json_mb"] >= 5] or rows
    print(f"lumos / orjson.loads, traces >= 5 MB: "
          f"{max(r['seconds']['lumos'] / r['seconds']['orjson'] for r in big):.2f} at most (GC on), "
          f"{max(r['seconds']['lumos'] / r['seconds']['orjson_nogc'] for r in big):.2f} at most (GC paused); "
          f"worst of all traces {worst['seconds']['lumos'] / worst['seconds']['orjson_nogc']:.2f} ({worst['trace']})")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    print(f"(load average at end: {os.getloadavg()[0]:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
