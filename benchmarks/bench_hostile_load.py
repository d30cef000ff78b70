"""Loading hostile traces against ordinary traces of the same size: the reader's resources stay bounded.

Run by hand (not part of the test suite):

    python benchmarks/bench_hostile_load.py                        # every case below
    python benchmarks/bench_hostile_load.py --sizes 5000,20000 --braces 10000000 --reps 3

Two hostile documents (`lumos.trace.hostile` builds them), each timed with `lumos.trace.load_trace`
beside an ordinary document of the same size and shape:
- names: N CPU ops whose names all fall in one slot of the name interner under its old, unkeyed hash
  (`old_span_hash`), against N ops with names of the same length drawn at random. With the old hash
  interning was quadratic (80,000 events: 59 s against 1.1 s down the plain path); the interner now
  hashes the table again under a key drawn per process (SipHash-1-3) once a lookup passes 64 taken
  slots, so the same names load in linear time.
- braces: one event whose args hold a string of B '{' (78 KB gzipped for B = 80 million), against one
  holding B 'a'. The scanner sized its table by the count of '{' in the whole file and asked for about
  29 GB; it now grows its table with the events it finds.

Figures: best of --reps wall-clock runs (a run longer than 10 s is not repeated) of the compiled path
(LUMOS_JIT=always) and, with --plain, of the plain path (LUMOS_JIT=never); "ratio" is hostile over
ordinary, and "done" asks it to be within 3x. A load that fails prints its error instead of a time.
To time a build from before the change, put it first on PYTHONPATH (the script imports `lumos` as
Python finds it).
"""

from __future__ import annotations

import argparse
import gzip
import os
import sys
import tempfile
import time
from pathlib import Path

from lumos.trace import hostile

LIMIT = 3.0   # done means: hostile within 3x of ordinary


def _time(path: Path, reps: int, mode: str) -> float | str:
    os.environ["LUMOS_JIT"] = mode
    from lumos.trace import load_trace
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        try:
            table = load_trace(path)
        except Exception as exc:   # noqa: BLE001 - a failed load is a figure too
            return f"failed: {type(exc).__name__}: {str(exc)[:60]}"
        best = min(best, time.perf_counter() - t)
        del table
        if best > 10:
            break
    return best


def _row(case: str, size: str, mb: float, ordinary, hostile_t, plain) -> str:
    fmt = (lambda v: f"{v:.3f}" if isinstance(v, float) else str(v))
    if isinstance(ordinary, float) and isinstance(hostile_t, float):
        ratio = hostile_t / ordinary
        verdict = f"{ratio:.2f}x", "yes" if ratio <= LIMIT else "NO"
    else:
        verdict = "-", "NO"
    cells = [case, size, f"{mb:.1f}", fmt(ordinary), fmt(hostile_t), *verdict]
    if plain is not None:
        cells += [fmt(plain[0]), fmt(plain[1])]
    return "| " + " | ".join(cells) + " |"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="5000,10000,20000,80000", help="event counts of the names case")
    ap.add_argument("--braces", type=int, default=80_000_000, help="braces in the string of the braces case")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--plain", action="store_true", help="also time the plain path (LUMOS_JIT=never)")
    args = ap.parse_args()
    import lumos
    print(f"# hostile load benchmark (lumos from {Path(lumos.__file__).parent}; load average "
          f"{os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs)")
    head = ["case", "size", "JSON MB", "ordinary s", "hostile s", "ratio", f"within {LIMIT:g}x"]
    if args.plain:
        head += ["plain ordinary s", "plain hostile s"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for n in [int(s) for s in args.sizes.split(",") if s]:
            bad, good = tmp / f"names_{n}_hostile.json", tmp / f"names_{n}_ordinary.json"
            names = hostile.colliding_names(n)
            slots = {hostile.old_span_hash(f'"{x}"'.encode()) & ((1 << 18) - 1) for x in names}
            assert len(slots) == 1, "the names collide under the old hash"
            bad.write_bytes(hostile.names_document(names))
            good.write_bytes(hostile.names_document(hostile.ordinary_names(n)))
            assert bad.stat().st_size == good.stat().st_size
            times = [_time(good, args.reps, "always"), _time(bad, args.reps, "always")]
            plain = [_time(good, args.reps, "never"), _time(bad, args.reps, "never")] if args.plain else None
            print(_row("names (one old-hash slot)", f"{n:,} events", bad.stat().st_size / 1e6, *times, plain),
                  flush=True)
            if all(isinstance(t, float) for t in times):
                worst = max(worst, times[1] / times[0])
            else:
                worst = float("inf")
        if args.braces:
            bad, good = tmp / "braces_hostile.json.gz", tmp / "braces_ordinary.json.gz"
            bad.write_bytes(gzip.compress(hostile.braces_document(args.braces), 9))
            good.write_bytes(gzip.compress(hostile.braces_document(args.braces, ordinary=True), 9))
            times = [_time(good, args.reps, "always"), _time(bad, args.reps, "always")]
            plain = [_time(good, args.reps, "never"), _time(bad, args.reps, "never")] if args.plain else None
            print(_row(f"braces in a string ({bad.stat().st_size / 1e3:.0f} KB gzipped)", f"{args.braces:,} '{{'",
                       (args.braces + 120) / 1e6, *times, plain), flush=True)
            if all(isinstance(t, float) for t in times):
                worst = max(worst, times[1] / times[0])
            else:
                worst = float("inf")
    print(f"worst hostile / ordinary: {worst:.2f}x ({'within' if worst <= LIMIT else 'NOT within'} {LIMIT:g}x)")
    return 0 if worst <= LIMIT else 1


if __name__ == "__main__":
    sys.exit(main())
