"""The trace reader against a typed decoder from a well-kept library: does the scanner earn its place?

    python benchmarks/bench_json_reader.py [FILE ...]     # default: shipped real traces + emulated ranks

For each trace, from its bytes in memory (gunzipped once, not timed), the median of
`--repeat` runs of:
  orjson      `orjson.loads` alone: a floor, no columns;
  scanner     `lumos.trace.reader` as shipped (numba scanner + column decoding, the
              TraceTable every stage reads);
  plain       the reader's fallback: `orjson.loads` + `parse_document` (a loop over events);
  msgspec     `benchmarks/msgspec_reader.py`: `msgspec.json.decode` into typed Structs that skip
              unknown fields, then every column the scanner gives, from the Structs, checked
              equal to the scanner's (the metadata and unmodelled counts too);
  msgspec-ng  the same without its guard (a search for exponents orjson would refuse).
msgspec is not a dependency: `pip install msgspec` to run those columns. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import os
import statistics
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("LUMOS_JIT", "always")  # figures of the compiled paths, as before lumos.jit chose by size

from lumos import collector  # noqa: E402
from lumos.trace import reader, scanned  # noqa: E402

DEFAULT = [ROOT / "resources/traces/real/kineto/resnet50_num_workers_0__worker0.1623143566756.pt.trace.json.gz",
           ROOT / "resources/traces/real/hta/nccl_parser_config__nccl_data.json.gz",
           ROOT / "resources/traces/real/hta/trace_diff__control__control.json.gz",
           ROOT / "resources/traces/real/param/resnet_1gpu/resnet_kineto.json.gz",
           ROOT / "resources/traces/real/hta/negative_queue_length_values_check__rank0.json.gz",
           ROOT / "results/default/emulated/gpt3_15b-2x2x4/seed0/rank0.json.gz",
           ROOT / "results/default/emulated/gpt3_175b-8x4x8/seed0/rank0.json.gz"]


try:   # benchmarks/msgspec_reader.py: beside this script, whose folder Python puts first on sys.path
    import msgspec_reader
except ImportError:  # msgspec not installed: that column is skipped
    msgspec_reader = None


def timed(fn, data, repeat):
    out, times = None, []
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        out = fn(data)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    have_msgspec = msgspec_reader is not None
    print("| trace | MB | events kept | orjson s | scanner s | plain s | msgspec s | msgspec-ng s "
          "| msgspec / scanner |")
    print("|---|---|---|---|---|---|---|---|---|")
    for path in args.files or [p for p in DEFAULT if p.exists()]:
        data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()

        def scanner(d):
            with collector.paused():
                return scanned.scanned_columns(d)

        def plain(d):
            with collector.paused():
                return reader.parse_document(orjson.loads(d), path)

        t_orjson, _ = timed(orjson.loads, data, args.repeat)
        t_scan, (cols, doc, unmodelled, *_) = timed(scanner, data, args.repeat)   # and the unmodelled durations
        t_plain, _ = timed(plain, data, args.repeat)
        t_ms = t_ng = float("nan")
        if have_msgspec:
            for guard in (True, False):
                def via_msgspec(d, guard=guard):
                    with collector.paused():
                        return msgspec_reader.typed_columns(d, guard=guard)
                t, (ms, ms_doc, ms_unmodelled) = timed(via_msgspec, data, args.repeat)
                if guard:
                    t_ms = t
                else:
                    t_ng = t
                for c, col in cols.items():
                    assert ms[c].dtype == col.dtype and ms[c].tolist() == col.tolist(), f"{path.name}: {c} differs"
                assert ms_doc == doc and ms_unmodelled == unmodelled, f"{path.name}: metadata differs"
        print(f"| {path.name[:40]} | {len(data) / 1e6:.1f} | {len(cols['ts']):,} | {t_orjson:.3f} | {t_scan:.3f} "
              f"| {t_plain:.3f} | {t_ms:.3f} | {t_ng:.3f} | {t_ms / t_scan:.2f} |", flush=True)


if __name__ == "__main__":
    main()
