"""Our Chakra exports checked outside this repository: Chakra's reference decoder and ASTRA-sim's analytical backend.

    python studies/chakra/astra_sim.py build  --work W [--mirrors M] [-j 2]   # sources at pinned commits, cmake
    python studies/chakra/astra_sim.py decode --work W EXPORT_DIR...          # Chakra's et_def_pb2 reader vs ours
    python studies/chakra/astra_sim.py run    --work W EXPORT_DIR...          # ASTRA-sim on each export, per rank
    python studies/chakra/astra_sim.py all    --work W [--mirrors M]          # the runs of the note, end to end

`build` gets ASTRA-sim (astra-sim/astra-sim 518bd51, analytical network backend, congestion-unaware)
and its submodules at the commits in SOURCES, cloned from GitHub or, with `--mirrors M`, read from
bare repositories `M/OWNER+NAME/repo` already on the machine, and builds it with cmake and Debian's
protobuf (`apt-get install -y protobuf-compiler libprotobuf-dev`). Where a submodule's pinned commit
was not at hand, SOURCES names the one used; four local patches (`build`) make them build together,
stop a double free at ASTRA-sim's exit and let its statistics report a rank with CPU ops
(docs/notes/2026-12-07-astra-sim-run.md). It also makes
`W/venv`, a virtual environment of its own (not the project's) with Chakra's Python package
(mlcommons/chakra v1.0.0, `--no-deps`: its pinned HTA is not needed to decode) for `decode`.

`run` writes, per export, a network file (one switch of N NPUs, 2 for a one-rank export, whose rank 1
is idle, `--bandwidth` GB/s, `--latency` ns:
by default ASTRA-sim's examples/network/analytical/HGX-H100-validated.yml), the system file of
examples/system/native_collectives/HGX-H100-validated.json and no remote memory, runs the binary
with `--comm-group-configuration` = the export's comm_groups.json, and prints for every rank the
time ASTRA-sim says it finished beside our replay of the same files. A run counts only if every rank
prints `sys[i] finished`. ASTRA-sim's time is its own analytical network model's for the
collectives and send/recv, and the files' `duration_micros` for every compute node, one CPU op,
one kernel and one communication node per rank at a time: not a measurement.

Not run by the test suite (minutes of compiling); lumos must be importable (the repository root on
PYTHONPATH, or installed).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

# (path in the ASTRA-sim tree, owner/name, commit): what was built for the note
ASTRA_SIM = ("astra-sim/astra-sim", "518bd513ae110428cd62eb60efc0f3993fd53c70")
SOURCES = [
    # pinned 0e3cd40 (not in the snapshot at hand): the newest with src/feeder_v3 that was, branch `stage`
    ("extern/graph_frontend/chakra", "astra-sim/chakra", "f37c2bb50afa8b0e99b32ba9921662ab77502e85"),
    # pinned e8c5119 (not at hand): the repository's newest, which ASTRA-sim pinned up to 2025-08
    ("extern/network_backend/analytical", "astra-sim/astra-network-analytical",
     "599a0473a9a74f5383f73b3cea5a12b9bc5ebaef"),
    ("extern/remote_memory_backend/analytical", "astra-sim/astra-memory-analytical",
     "641cce854d256bfd288b1de9607b6757313363f9"),
    ("extern/helper/fmt", "fmtlib/fmt", "7e73566ce7bd3617cd4b14a2e3a19a2a30b524c7"),
    # pinned 63f0875 (not at hand): v1.13.x's 62302019
    ("extern/helper/spdlog", "gabime/spdlog", "62302019babd8fdf63c1c6dc4c9faa48d441a7f0"),
]
# ASTRA-sim's CMakeLists.txt fetches yaml-cpp at a83cd31 with FetchContent: given here as a source dir
YAML_CPP = ("jbeder/yaml-cpp", "a83cd31548b19d50f3f983b069dceb4f4d50756d")
CHAKRA = ("mlcommons/chakra", "21585d8f2d65603d791d2121e3d4632351120262")   # the reference decoder (v1.0.0)
BINARY = "build/astra_analytical/build/bin/AstraSim_Analytical_Congestion_Unaware"
FINISHED = re.compile(r"sys\[(\d+)\] finished, (\d+) cycles, exposed communication (\d+) cycles")
STAT = re.compile(r"sys\[(\d+)\], (GPU|Comm|CPU) time: (\d+)")   # its statistics: busy time of each kind, ns


def _sh(cmd, **kw) -> subprocess.CompletedProcess:
    print("+", cmd if isinstance(cmd, str) else " ".join(map(str, cmd)), flush=True)
    return subprocess.run(cmd, check=True, shell=isinstance(cmd, str), **kw)


def _tree(repo: str, commit: str, dest: Path, mirrors: Path | None, paths=()) -> None:
    """`repo` at `commit` unpacked into `dest` (from a bare mirror, or a fresh clone)."""
    if dest.exists() and any(dest.iterdir()):
        return
    dest.mkdir(parents=True, exist_ok=True)
    if mirrors is not None:
        git_dir = mirrors / repo.replace("/", "+") / "repo"
    else:
        git_dir = dest.parent / f".{dest.name}.git"
        if not git_dir.exists():
            _sh(["git", "clone", "--bare", "--filter=blob:none", f"https://github.com/{repo}.git", str(git_dir)])
    _sh(f"git --git-dir={git_dir} archive {commit} {' '.join(paths)} | tar -x -C {dest}")


def _patch(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    if new not in text:
        assert old in text, f"{path}: {old!r} not found"
        path.write_text(text.replace(old, new, 1))


def build(work: Path, mirrors: Path | None, jobs: int) -> Path:
    src = work / "astra-sim"
    _tree(ASTRA_SIM[0], ASTRA_SIM[1], src, mirrors)
    for path, repo, commit in SOURCES:
        only = ("schema", "src") if repo.endswith("/chakra") else ()   # its tests/data are large, and not needed
        _tree(repo, commit, src / path, mirrors, only)
    _tree(YAML_CPP[0], YAML_CPP[1], work / "yaml-cpp", mirrors)
    # PATCHES: ASTRA-sim 518bd51 names Chakra::ETFeeder(Node); the feeder at hand has them in Chakra::FeederV3
    feeder = src / "extern/graph_frontend/chakra/src/feeder_v3/et_feeder.h"
    text = feeder.read_text()
    if "local shim" not in text:
        i = text.rindex("#endif")
        feeder.write_text(text[:i] + "// local shim: ASTRA-sim 518bd51 names these Chakra::ETFeeder / "
                          "Chakra::ETFeederNode\nnamespace Chakra {\nusing FeederV3::ETFeeder;\n"
                          "using FeederV3::ETFeederNode;\n} // namespace Chakra\n\n" + text[i:])
    # and both ASTRA-sim and the network backend add a yaml-cpp target: the backend's only if none is there
    _patch(src / "extern/network_backend/analytical/CMakeLists.txt",
           "add_subdirectory(${CMAKE_CURRENT_SOURCE_DIR}/extern/yaml-cpp yaml-cpp)",
           "if (NOT TARGET yaml-cpp)\n  add_subdirectory(${CMAKE_CURRENT_SOURCE_DIR}/extern/yaml-cpp yaml-cpp)\nendif ()")
    # and a sub-world group's collective plan frees CollectiveImplLookup's shared implementations: with two or more
    # such groups (TP and DP groups) every run aborts at exit with a double free, after every rank has finished
    _patch(src / "astra-sim/system/CollectivePlan.cc",
           "        delete topology;\n        for (auto& ci : implementation_per_dimension) {\n            delete ci;\n"
           "        }",
           "        delete topology;\n        // local patch: the implementations are CollectiveImplLookup's, shared by "
           "every group's plan\n        // (a double free at exit once two groups smaller than the world have plans)")
    # and its statistics throw on CPU ops ("Only GPU and COMM types are supported for overlap extraction") once a
    # rank has finished: the throw skips each rank's statistics report (the finish line is printed before it)
    _patch(src / "astra-sim/workload/Statistics.cc",
           "            throw std::runtime_error(\n                \"Only GPU and COMM types are supported for overlap "
           "extraction\");",
           "            break;  // local patch: CPU time is not part of the compute-communication overlap")
    proto = src / "extern/graph_frontend/chakra/schema/protobuf"
    if not (proto / "et_def.pb.h").exists():   # once: a new one would rebuild most of ASTRA-sim
        _sh(["protoc", "et_def.proto", f"--proto_path={proto}", f"--cpp_out={proto}"])
    out = src / "build/astra_analytical/build"
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    _sh(["cmake", "..", "-DBUILDTARGET=congestion_unaware", f"-DFETCHCONTENT_SOURCE_DIR_YAML-CPP={work / 'yaml-cpp'}",
         "-DFETCHCONTENT_FULLY_DISCONNECTED=ON"], cwd=out, stdout=subprocess.DEVNULL)
    _sh(["cmake", "--build", ".", "-j", str(jobs)], cwd=out, stdout=subprocess.DEVNULL)
    print(f"built {src / BINARY} in {time.time() - t0:.0f} s with -j {jobs}")
    venv = work / "venv"
    if not (venv / "bin" / "chakra_jsonizer").exists():
        _tree(CHAKRA[0], CHAKRA[1], work / "chakra", mirrors, ("schema", "src", "setup.py", "setup.cfg",
                                                             "pyproject.toml", "README.md", "LICENSE.md"))
        _sh([sys.executable, "-m", "venv", str(venv)])
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
        _sh(pip + ["setuptools", "wheel", "setuptools-grpc", "grpcio-tools", "protobuf"])
        _sh(pip + ["--no-deps", "--no-build-isolation", str(work / "chakra")])
    return src / BINARY


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
def _inputs(work: Path, npus: int, bandwidth: float, latency: float) -> dict:
    cfg = work / "configs"
    cfg.mkdir(parents=True, exist_ok=True)
    net = cfg / f"switch_{npus}npus.yml"
    net.write_text(f"topology: [ Switch ]\nnpus_count: [ {npus} ]\nbandwidth: [ {bandwidth} ]  # GB/s\n"
                   f"latency: [ {latency} ]  # ns\n")
    system = work / "astra-sim/examples/system/native_collectives/HGX-H100-validated.json"
    memory = work / "astra-sim/examples/remote_memory/analytical/no_memory_expansion.json"
    return {"network": net, "system": system, "memory": memory}


def _astra_sim(work: Path, d: Path, name: str, bandwidth: float, latency: float) -> tuple[dict, int, float]:
    """ASTRA-sim on one export: {rank: {finished, gpu, comm, cpu: ns}} (what each rank printed), exit status,
    wall s."""
    from lumos.trace.chakra import et_files

    ranks = sorted(et_files(d))
    if ranks != list(range(len(ranks))):
        raise SystemExit(f"{d}: ranks {ranks}; ASTRA-sim reads {name}.i.et for i = 0 .. N-1")
    where = _padded(work, d, name) if len(ranks) == 1 else d
    cfg = _inputs(work, max(len(ranks), 2), bandwidth, latency)
    cmd = [str(work / "astra-sim" / BINARY), f"--workload-configuration={where / name}",
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


def run(work: Path, exports: list[Path], bandwidth: float, latency: float, name: str = "trace") -> list[dict]:
    """ASTRA-sim on each export (and on its `--bare` twin DIR_bare where there is one: what ASTRA-sim reads
    is the same, so its times must be too); per rank its finish time beside our replays of the same files."""
    rows = []
    for d in exports:
        done, code, wall = _astra_sim(work, d, name, bandwidth, latency)
        bare = d.parent / f"{d.name}_bare"
        done_bare = _astra_sim(work, bare, name, bandwidth, latency)[0] if bare.is_dir() else None
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
    ap.add_argument("step", choices=("build", "decode", "run", "all"))
    ap.add_argument("exports", nargs="*", type=Path, help="directories written by `lumos export` (decode, run)")
    ap.add_argument("--work", type=Path, required=True, help="where the sources, build, venv and runs go")
    ap.add_argument("--mirrors", type=Path, default=None, help="bare git repositories OWNER+NAME/repo to read "
                                                               "the sources from (default: clone from GitHub)")
    ap.add_argument("-j", "--jobs", type=int, default=2)
    ap.add_argument("--python", type=Path, default=None, help="the Python with Chakra's package (default WORK/venv)")
    ap.add_argument("--bandwidth", type=float, default=400.0, help="switch bandwidth, GB/s (HGX-H100-validated)")
    ap.add_argument("--latency", type=float, default=936.25, help="switch latency, ns (HGX-H100-validated)")
    a = ap.parse_intermixed_args(argv)
    work = a.work.resolve()
    python = a.python or work / "venv" / "bin" / "python"
    if a.step == "build":
        build(work, a.mirrors, a.jobs)
        return 0
    exports = [p.resolve() for p in a.exports]
    if a.step == "all":
        if not (work / "astra-sim" / BINARY).exists():
            build(work, a.mirrors, a.jobs)
        exports = make_exports(work)
    ok = True
    if a.step in ("decode", "all"):
        twins = [d.parent / f"{d.name}_bare" for d in exports] if a.step == "all" else []
        ok &= decode(exports + twins + ([make_predicted(work)] if a.step == "all" else []), python)
    if a.step in ("run", "all"):
        rows = run(work, exports, a.bandwidth, a.latency)
        ok &= all(r["finished"] and r["bare_same"] is not False for r in rows)
        (work / "astra_sim_rows.json").write_text(json.dumps(rows, indent=1) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
