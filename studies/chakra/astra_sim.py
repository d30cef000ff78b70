"""Our Chakra exports checked outside this repository: Chakra's reference decoder and ASTRA-sim's analytical backend.

    python studies/chakra/astra_sim.py exports --work W                        # the runs of the note, exported
    python studies/chakra/astra_sim.py decode  --work W --python PY EXPORT_DIR... # Chakra's et_def_pb2 reader vs ours
    python studies/chakra/astra_sim.py run     --work W --astra-sim BIN --examples EX EXPORT_DIR...
    python studies/chakra/astra_sim.py all     --work W --python PY --astra-sim BIN --examples EX

ASTRA-sim and Chakra are not part of this project and nothing here builds or installs them: `--astra-sim` is the
path of an ASTRA-sim analytical-backend binary you built yourself (`AstraSim_Analytical_Congestion_Unaware`),
`--examples` its source tree's `examples/` folder (the system and remote-memory files named below), `--python` a
Python with Chakra's package (mlcommons/chakra) importable. docs/notes/2026-12-07-astra-sim-run.md says which
versions the note's numbers came from.

`run` writes, per export, a network file (one switch of N NPUs, 2 for a one-rank export, whose rank 1
is idle, `--bandwidth` GB/s, `--latency` ns: by default ASTRA-sim's
examples/network/analytical/HGX-H100-validated.yml), takes examples/system/native_collectives/HGX-H100-validated.json
and no remote memory, runs the binary with `--comm-group-configuration` = the export's comm_groups.json, and prints
for every rank the time ASTRA-sim says it finished beside our replay of the same files. A run counts only if every
rank prints `sys[i] finished`. ASTRA-sim's time is its own analytical network model's for the collectives and
send/recv, and the files' `duration_micros` for every compute node, one CPU op, one kernel and one communication
node per rank at a time: not a measurement.

Not run by the test suite; lumos must be importable (the repository root on PYTHONPATH, or installed).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

FINISHED = re.compile(r"sys\[(\d+)\] finished, (\d+) cycles, exposed communication (\d+) cycles")
STAT = re.compile(r"sys\[(\d+)\], (GPU|Comm|CPU) time: (\d+)")   # its statistics: busy time of each kind, ns


# -- the reference decoder ------------------------------------------------------------------------
# run by the venv's Python: every node of a file as Chakra's own classes read it
_DECODE = r"""
import json, sys
from chakra.schema.protobuf.et_def_pb2 import GlobalMetadata, Node
from chakra.src.third_party.utils.protolib import decodeMessage, openFileRd

def attrs(msg):
    out = []
    for a in msg.attr:
        kind = a.WhichOneof("value")
        v = getattr(a, kind)
        out.append([a.name, kind, list(v.values) if kind.endswith("_list") else v])
    return out

fh = openFileRd(sys.argv[1])
meta = GlobalMetadata()
decodeMessage(fh, meta)
nodes = []
node = Node()
while decodeMessage(fh, node):
    nodes.append([node.id, node.name, node.type, list(node.ctrl_deps), list(node.data_deps),
                  node.start_time_micros, node.duration_micros, attrs(node)])
json.dump({"version": meta.version, "meta": attrs(meta), "nodes": nodes}, sys.stdout)
"""


def decode(exports: list[Path], python: Path) -> bool:
    """Each .et file read by Chakra's decoder (`python`: the venv's) and by ours; True when they agree."""
    from lumos.trace.chakra import et_files, read_et

    ok = True
    for d in exports:
        files = et_files(d)
        for f in files.values():
            theirs = json.loads(subprocess.run([str(python), "-c", _DECODE, str(f)], check=True,
                                               capture_output=True, text=True).stdout)
            meta, nodes = read_et(f)
            ours = [[n.id, n.name, int(n.type), list(n.ctrl_deps), list(n.data_deps), n.start_time_micros,
                     n.duration_micros, [[k, kind, v] for k, (kind, v) in n.attr.items()]] for n in nodes]
            same = (theirs["version"] == meta.version and theirs["nodes"] == json.loads(json.dumps(ours))
                    and theirs["meta"] == json.loads(json.dumps([[k, kind, v] for k, (kind, v) in meta.attr.items()])))
            ok &= same
            print(f"{'same' if same else 'DIFFERENT'}: {f} ({len(theirs['nodes'])} nodes, schema "
                  f"{theirs['version']}, as Chakra's et_def_pb2 reads it and as lumos.trace.chakra does)")
    return ok


# -- ASTRA-sim -------------------------------------------------------------------------------------
def _inputs(work: Path, examples: Path, npus: int, bandwidth: float, latency: float) -> dict:
    cfg = work / "configs"
    cfg.mkdir(parents=True, exist_ok=True)
    net = cfg / f"switch_{npus}npus.yml"
    net.write_text(f"topology: [ Switch ]\nnpus_count: [ {npus} ]\nbandwidth: [ {bandwidth} ]  # GB/s\n"
                   f"latency: [ {latency} ]  # ns\n")
    system = examples / "system/native_collectives/HGX-H100-validated.json"
    memory = examples / "remote_memory/analytical/no_memory_expansion.json"
    return {"network": net, "system": system, "memory": memory}


def _astra_sim(work: Path, binary: Path, examples: Path, d: Path, name: str, bandwidth: float,
               latency: float) -> tuple[dict, int, float]:
    """ASTRA-sim on one export: {rank: {finished, gpu, comm, cpu: ns}} (what each rank printed), exit status,
    wall s."""
    from lumos.trace.chakra import et_files

    ranks = sorted(et_files(d))
    if ranks != list(range(len(ranks))):
        raise SystemExit(f"{d}: ranks {ranks}; ASTRA-sim reads {name}.i.et for i = 0 .. N-1")
    where = _padded(work, d, name) if len(ranks) == 1 else d
    cfg = _inputs(work, examples, max(len(ranks), 2), bandwidth, latency)
    cmd = [str(binary), f"--workload-configuration={where / name}",
           f"--system-configuration={cfg['system']}", f"--remote-memory-configuration={cfg['memory']}",
           f"--network-configuration={cfg['network']}", f"--comm-group-configuration={d / 'comm_groups.json'}"]
    print("+", " ".join(cmd), flush=True)
    t0 = time.time()
    p = subprocess.run(cmd, check=False, capture_output=True, text=True, cwd=work)
    wall = time.time() - t0
    log = d.parent / f"{d.name}.astra_sim.log"
    log.write_text(p.stdout + p.stderr)
    done = {int(m[1]): {"finished": int(m[2])} for m in FINISHED.finditer(p.stdout + p.stderr)}
    for m in STAT.finditer(p.stdout + p.stderr):
        done.setdefault(int(m[1]), {})[m[2].lower()] = int(m[3])
    print(f"{d.name}: exit {p.returncode}, {sum(r in done for r in ranks)} of {len(ranks)} ranks finished"
          + (" (and the idle rank 1)" if len(ranks) == 1 and 1 in done else "") + f", {wall:.1f} s (log: {log})")
    return {r: done.get(r, {}) for r in ranks}, p.returncode, wall


def _ours(d: Path) -> dict:
    """Our replay of an export, per rank: the iteration `lumos replay` reports (the step period) and the
    span from the first task's start to the last one's end (ASTRA-sim's finish time counts from 0)."""
    from lumos.analysis.replay import replay_graph
    from lumos.graph.chakra import load_chakra_run

    out = {}
    for g in load_chakra_run(d):
        r = replay_graph(g)
        out[r.rank] = (r.replayed.iteration_us, float(r.schedule.end.max() - r.schedule.start.min()))
    return out


def run(work: Path, binary: Path, examples: Path, exports: list[Path], bandwidth: float, latency: float,
        name: str = "trace") -> list[dict]:
    """ASTRA-sim on each export (and on its `--bare` twin DIR_bare where there is one: what ASTRA-sim reads
    is the same, so its times must be too); per rank its finish time beside our replays of the same files."""
    rows = []
    for d in exports:
        done, code, wall = _astra_sim(work, binary, examples, d, name, bandwidth, latency)
        bare = d.parent / f"{d.name}_bare"
        done_bare = _astra_sim(work, binary, examples, bare, name, bandwidth, latency)[0] if bare.is_dir() else None
        ours, ours_bare = _ours(d), _ours(bare) if bare.is_dir() else {}
        for rank, got in done.items():
            ns = got.get("finished")
            rows.append({"export": d.name, "rank": rank, "exit": code, "wall_s": round(wall, 2),
                         "finished": ns is not None, "astra_sim_us": ns / 1e3 if ns is not None else None,
                         "astra_sim_gpu_us": got.get("gpu", 0) / 1e3, "astra_sim_comm_us": got.get("comm", 0) / 1e3,
                         "bare_same": None if done_bare is None else done_bare.get(rank) == got,
                         "lumos_iteration_us": ours[rank][0], "lumos_span_us": ours[rank][1],
                         "lumos_bare_span_us": ours_bare[rank][1] if rank in ours_bare else None})
    print("\n| export | rank | ASTRA-sim: finished (ms) | its kernels busy (ms) | its communication busy (ms) | "
          "from --bare | lumos replay: iteration (ms) | lumos replay: first start to last end (ms) | "
          "the same, --bare export (ms) |\n|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        a = f"{r['astra_sim_us'] / 1e3:.3f}" if r["finished"] else "NOT FINISHED"
        same = {None: "-", True: "identical", False: "DIFFERENT"}[r["bare_same"]]
        b = f"{r['lumos_bare_span_us'] / 1e3:.3f}" if r["lumos_bare_span_us"] is not None else "-"
        print(f"| {r['export']} | {r['rank']} | {a} | {r['astra_sim_gpu_us'] / 1e3:.3f} | "
              f"{r['astra_sim_comm_us'] / 1e3:.3f} | {same} | {r['lumos_iteration_us'] / 1e3:.3f} | "
              f"{r['lumos_span_us'] / 1e3:.3f} | {b} |")
    return rows


def _padded(work: Path, d: Path, name: str) -> Path:
    """A one-rank export beside an idle rank 1 (one COMP node of 0 us): the analytical network backend
    refuses fewer than 2 NPUs. The export's own file is linked, not rewritten."""
    from lumos.trace.chakra import Metadata, Node, NodeType, write_et

    out = work / "padded" / d.name
    out.mkdir(parents=True, exist_ok=True)
    own = out / f"{name}.0.et"
    if own.is_symlink() or own.exists():
        own.unlink()
    own.symlink_to(d / f"{name}.0.et")
    write_et(out / f"{name}.1.et", Metadata(), [Node(id=0, name="idle", type=NodeType.COMP_NODE,
                                                     attr={"is_cpu_op": ("bool_val", False)})])
    return out


# the runs of docs/notes/2026-12-07-astra-sim-run.md: (name, lumos emulate arguments or a shipped trace)
RUNS = [
    ("tiny_2x2x2", ["model=tiny", "parallel.tp=2", "parallel.pp=2", "parallel.dp=2", "ranks=all", "seed=0"]),
    ("gpt3_15b_2x2x2", ["model=gpt3_15b", "parallel.tp=2", "parallel.pp=2", "parallel.dp=2", "ranks=all", "seed=0"]),
    ("dlrm_8rank", "resources/traces/real/param/dlrm_8rank/kineto"),
    ("h200_base_r0", "resources/traces/h200/base_r0"),
]


# decoded only: a prediction's export (`lumos predict --export`) holds the ranks it simulates, one per stage (0 and
# 8 here), where ASTRA-sim reads NAME.i.et for every NPU i
PREDICTED = ("predict_tiny_dp4", ["model=tiny", "parallel.tp=2", "parallel.pp=2", "parallel.dp=2", "seed=0"], ["--dp", "4"])


def make_predicted(work: Path) -> Path:
    from lumos.cli import main as lumos_main

    name, emulate, target = PREDICTED
    base = work / "runs" / (name + "_base")
    if not base.exists():
        assert lumos_main(["emulate", *emulate, f"out={base}", "progress=false", "--quiet"]) == 0
    d = work / "exports" / name
    assert lumos_main(["predict", str(base), *target, "--export", str(d)]) == 0
    return d


def make_exports(work: Path) -> list[Path]:
    """Each run of RUNS exported twice: DIR (with the lumos_* attributes) and DIR_bare (`--bare`)."""
    from lumos.cli import main as lumos_main

    out = []
    for name, src in RUNS:
        if isinstance(src, list):
            run_dir = work / "runs" / name
            if not run_dir.exists():
                assert lumos_main(["emulate", *src, f"out={run_dir}", "progress=false", "--quiet"]) == 0
            src = str(run_dir)
        d = work / "exports" / name
        assert lumos_main(["export", src, "--out", str(d)]) == 0
        assert lumos_main(["export", src, "--out", f"{d}_bare", "--bare"]) == 0
        out.append(d)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("step", choices=("exports", "decode", "run", "all"))
    ap.add_argument("exports", nargs="*", type=Path, help="directories written by `lumos export` (decode, run)")
    ap.add_argument("--work", type=Path, required=True, help="where the runs, exports and network files go")
    ap.add_argument("--python", type=Path, default=None, help="a Python with Chakra's package (decode, all)")
    ap.add_argument("--astra-sim", type=Path, default=None, help="an ASTRA-sim analytical-backend binary (run, all)")
    ap.add_argument("--examples", type=Path, default=None, help="ASTRA-sim's examples/ folder (run, all)")
    ap.add_argument("--bandwidth", type=float, default=400.0, help="switch bandwidth, GB/s (HGX-H100-validated)")
    ap.add_argument("--latency", type=float, default=936.25, help="switch latency, ns (HGX-H100-validated)")
    a = ap.parse_intermixed_args(argv)
    work = a.work.resolve()
    if a.step in ("decode", "all") and a.python is None:
        ap.error(f"{a.step} needs --python (a Python with Chakra's package)")
    if a.step in ("run", "all") and (a.astra_sim is None or a.examples is None):
        ap.error(f"{a.step} needs --astra-sim BINARY and --examples DIR (your own ASTRA-sim build)")
    exports = [p.resolve() for p in a.exports]
    if a.step in ("exports", "all"):
        exports = make_exports(work)
        if a.step == "exports":
            return 0
    ok = True
    if a.step in ("decode", "all"):
        twins = [d.parent / f"{d.name}_bare" for d in exports] if a.step == "all" else []
        ok &= decode(exports + twins + ([make_predicted(work)] if a.step == "all" else []), a.python)
    if a.step in ("run", "all"):
        rows = run(work, a.astra_sim, a.examples, exports, a.bandwidth, a.latency)
        ok &= all(r["finished"] and r["bare_same"] is not False for r in rows)
        (work / "astra_sim_rows.json").write_text(json.dumps(rows, indent=1) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
