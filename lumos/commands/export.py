"""`lumos export RUN --format chakra --out DIR`: a run's execution graph as Chakra traces for ASTRA-sim.

Writes one `NAME.RANK.et` per rank (the graph `lumos replay` builds for the step) and
`comm_groups.json`, the process groups ASTRA-sim's `--comm-group-configuration` reads.
Collectives that every rank of their group issues, of a kind ASTRA-sim simulates (all-reduce,
all-gather, reduce-scatter, all-to-all) and of a known size, go out as COMM_COLL nodes;
sends and receives paired with their peer as COMM_SEND / COMM_RECV; every other kernel and CPU
op as a COMP node that replays its measured duration, rounded to the microsecond. The
communication kernels left as compute are counted by reason. `lumos replay DIR` reads the
export back and replays it as the run itself replays (docs/usage.md, "Exporting to Chakra").
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lumos.errors import UserError
from lumos.graph import DEFAULT_GAP_THRESHOLD_US
from lumos.trace import load_run

from .flags import non_negative_float, non_negative_int, output_path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="write a run's execution graph as Chakra traces (ASTRA-sim's input)",
                       description=__doc__)
    p.add_argument("path", help="a .json/.json.gz Kineto trace, or a directory with one file per rank")
    p.add_argument("--format", choices=("chakra",), default="chakra", help="the output format (chakra: "
                   "MLCommons Chakra execution traces, NAME.RANK.et)")
    p.add_argument("--out", type=output_path, required=True, help="directory to write the traces into")
    p.add_argument("--name", default="trace", help="file name prefix: NAME.RANK.et (default trace)")
    p.add_argument("--step", type=non_negative_int, default=None,
                   help="ProfilerStep number (default: a steady-state step, as lumos replay picks it)")
    p.add_argument("--gap-threshold-us", type=non_negative_float, default=DEFAULT_GAP_THRESHOLD_US,
                   help="inter-thread gap rule threshold (us)")
    p.add_argument("--bare", action="store_true",
                   help="leave out the lumos_* attributes (exact durations, lags, threads and streams): smaller "
                        "files holding only what ASTRA-sim reads; lumos replay then replays them as it does a "
                        "trace from another tool (one lane per kind of node)")
    p.add_argument("--ranks-from-files", action="store_true",
                   help="take each file of a directory as its own rank, in file-name order")
    p.set_defaults(func=run)


def run(args) -> int:
    from lumos.graph.chakra import COMM_GROUPS_FILE, export_run
    from lumos.graph.chakra_comm import DEMOTED

    if Path(args.out).is_file():
        raise UserError(f"--out {args.out} is a file; give a directory")
    tables = load_run(args.path, ranks_from_files=args.ranks_from_files)
    try:
        s = export_run(tables, args.out, name=args.name, step=args.step, gap_threshold_us=args.gap_threshold_us,
                       bare=args.bare)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    names = [p.name for p in s.files]
    shown = names[0] if len(names) == 1 else f"{names[0]} .. {names[-1]}"
    print(f"wrote {len(names)} Chakra trace{'s' if len(names) > 1 else ''} to {s.out} ({shown}, "
          f"{s.bytes / 1e6:.2f} MB) and {COMM_GROUPS_FILE} ({len(s.groups)} process group"
          f"{'' if len(s.groups) == 1 else 's'})")
    comp = s.nodes.get("COMP_NODE", 0)
    other = ", ".join(f"{k} {v}" for k, v in sorted(s.nodes.items()) if k != "COMP_NODE")
    print(f"  nodes: COMP_NODE {comp} ({s.cpu_ops} CPU ops, {comp - s.cpu_ops} GPU ops)"
          + (f", {other}" if other else ""))
    print(f"  dependencies: {s.edges} edges of the graph, {s.wait_deps} from run-time syncs")
    for reason, n in sorted(s.demoted.items()):
        if n:
            print(f"  communication as COMP (replays its measured duration): {n} kernel{'s' if n > 1 else ''}, "
                  f"{DEMOTED[reason]}")
    if s.missing_ranks:
        print(f"  note: ranks {_ranks(s.missing_ranks)} of the run have no trace here, and ASTRA-sim reads "
              f"{args.name}.i.et for every NPU i (emulate with ranks=all, or run it on {len(s.ranks)} NPUs "
              f"only where the ranks are 0..{len(s.ranks) - 1})")
    print(f"  ASTRA-sim: --workload-configuration={Path(s.out) / args.name} "
          f"--comm-group-configuration={Path(s.out) / COMM_GROUPS_FILE} (plus its system, network and "
          f"remote-memory files); lumos replay {s.out} replays it here")
    return 0


def _ranks(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks[:8])) + (f" (+{len(ranks) - 8} more)" if len(ranks) > 8 else "")
