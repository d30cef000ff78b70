"""Why the FSDP DP predictions spread over seeds (docs/notes/2026-12-06-fsdp-seed-spread.md):
each seed's error beside what that seed's base waited for its peers.

    python studies/sharded/seeds.py [--runs results/default/emulated_sharded/fsdp] [--targets 2x2x8 2x2x32]

Each target is predicted from the base of the same seed with the default settings (`--peer-waits auto`:
anchored for this sharded base) and compared with the emulated actual (EMULATED, the runs
`snakemake --cores 2` leaves in results/default). Prints per seed the error, the base's DP collectives'
total peer wait and its anchored part, the base's and the actual's iteration, and per target the
correlation of the error with each.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from lumos.predict.prediction import measure_run, predict
from lumos.trace import load_run
from lumos.predict.whatif import base_plan


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=Path, default=Path("results/default/emulated_sharded/fsdp"))
    ap.add_argument("--targets", nargs="+", default=["2x2x8", "2x2x32"])
    args = ap.parse_args()
    seeds = sorted(int(p.name.removeprefix("seed")) for p in (args.runs / "base").glob("seed*"))
    rows: dict[str, list[tuple]] = {t: [] for t in args.targets}
    print(f"{'seed':>4} {'target':>8} {'error %':>8} {'base wait ms':>13} {'anchored ms':>12} "
          f"{'base ms':>8} {'actual ms':>10} {'predicted ms':>13}")
    for s in seeds:
        base = load_run(args.runs / "base" / f"seed{s}")
        plan = base_plan(base)
        base_ms = measure_run(base)["iteration_us"] / 1e3
        for t in args.targets:
            dp = int(t.split("x")[2])
            doc = predict(base, {"dp": dp}, plan=plan, actual_tables=load_run(args.runs / t / f"seed{s}"))
            pw = doc.get("peer_waits", {})
            r = (doc["error_pct"], pw.get("wait_ms", float("nan")), pw.get("anchored_wait_ms", float("nan")),
                 base_ms, doc["measured"]["iteration_us"] / 1e3, doc["predicted"]["iteration_us"] / 1e3)
            rows[t].append(r)
            print(f"{s:>4} {t:>8} {r[0]:>+8.2f} {r[1]:>13.1f} {r[2]:>12.1f} {r[3]:>8.1f} {r[4]:>10.1f} {r[5]:>13.1f}")
    for t, rs in rows.items():
        a = np.array(rs)
        print(f"{t}: corr(error, base wait) {np.corrcoef(a[:, 0], a[:, 1])[0, 1]:.2f}, "
              f"corr(error, base iteration) {np.corrcoef(a[:, 0], a[:, 3])[0, 1]:.2f}, "
              f"corr(error, actual iteration) {np.corrcoef(a[:, 0], a[:, 4])[0, 1]:.2f}")


if __name__ == "__main__":
    main()
