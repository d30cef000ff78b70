"""Is a refactor of graph building exact? Snapshot every graph array, change the code, compare.

    python studies/refactor_checks/graph_snapshot.py save DIR      # before the change
    python studies/refactor_checks/graph_snapshot.py compare DIR   # after it: one line per trace, then a count

Builds `build_graph(load_trace(f))` for every shipped real trace (`resources/traces/real/**`),
the first six rank files of the H200 recordings ending in `_r0`, and any `--extra` files (e.g. the
pipeline's emulated ranks), and stores every field of the Graph (or the error it raised). The
compare step reports each trace whose arrays differ in dtype, shape or value (NaN equal to NaN).
The graph-building changes made for the cost of a pipeline job were checked this way on 35 traces
(the real ones, six H200 ranks and the 15B 2x2x4 ranks 0 and 8 and 175B 8x4x8 rank 0 of the
pipeline's seed 0).
"""

from __future__ import annotations

import argparse
import pickle
import sys
from pathlib import Path

import numpy as np

from lumos.graph import build_graph
from lumos.trace import load_trace

ROOT = Path(__file__).resolve().parents[2]   # the checkout: studies/refactor_checks/graph_snapshot.py


def traces(extra: list[str]) -> list[Path]:
    files = sorted((ROOT / "resources" / "traces" / "real").rglob("*.json.gz"))
    files += sorted((ROOT / "resources" / "traces" / "h200").glob("*_r0/rank*.json*"))[:6]
    return files + [Path(e) for e in extra]


def snapshot(path: Path):
    try:
        fields = dict(vars(build_graph(load_trace(path))))
    except Exception as exc:   # noqa: BLE001 - an error is part of what must not change
        return ("error", type(exc).__name__, str(exc).replace(str(ROOT), "ROOT"))
    fields["summary"] = {k: v for k, v in fields["summary"].items() if k != "trace"}   # where the checkout is
    return fields


def same(a, b) -> list[str]:
    """Names of the fields that differ (['(error)'] if either side raised and they differ)."""
    if isinstance(a, tuple) or isinstance(b, tuple):
        return [] if a == b else ["(error)"]
    out = sorted(set(a) ^ set(b))
    for k in set(a) & set(b):
        x, y = a[k], b[k]
        if isinstance(x, np.ndarray):
            ok = (isinstance(y, np.ndarray) and x.dtype == y.dtype and x.shape == y.shape
                  and np.array_equal(x, y, equal_nan=x.dtype.kind == "f"))
        else:
            ok = x == y
        if not ok:
            out.append(k)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=("save", "compare"))
    ap.add_argument("dir", type=Path)
    ap.add_argument("--extra", nargs="*", default=[], help="more trace files")
    args = ap.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    bad = 0
    files = traces(args.extra)
    for f in files:
        name = f.resolve().relative_to(ROOT) if f.resolve().is_relative_to(ROOT) else f.resolve()
        store = args.dir / (str(name).replace("/", "_") + ".pkl")   # the same name from any checkout
        snap = snapshot(f)
        if args.mode == "save":
            store.write_bytes(pickle.dumps(snap))
            continue
        diff = same(pickle.loads(store.read_bytes()), snap)
        bad += bool(diff)
        print(("same     " if not diff else f"DIFFERS  {', '.join(diff)}  ") + str(f))
    print(f"{len(files)} traces{'' if args.mode == 'save' else f', {bad} differ'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
