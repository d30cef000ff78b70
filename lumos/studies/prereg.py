"""A pre-registered hardware check of `lumos predict`: predictions committed before the recording.

    python studies/prereg/prereg_h200.py predict [--out benchmarks/prereg/predictions.csv]
    python studies/prereg/prereg_h200.py predict --pooled     # -> benchmarks/prereg/predictions_pooled.csv
    bash studies/prereg/prereg_h200.sh DEST [--budget-s S]      # on the GPU: `record --pack`, pieces to DEST
    python studies/prereg/prereg_h200.py record --out DIR [--device cuda|cpu] [--tiny] [--budget-s S] [--pack]
    python studies/prereg/prereg_h200.py score --traces DIR [--predictions CSV] [--out benchmarks/prereg/scores.md]

(The script is `main` of this module; `tests/benchmarks/test_prereg.py` imports the module. The CSVs
stay under `benchmarks/prereg/`, where they were committed: `score` checks the git history of that
path, which a move would restart.)

`predict` runs `lumos predict` from each recording of the H200 base (`resources/traces/h200/base_r0`,
`base_r1`: 12 layers, hidden 2048, FFN 8192, 16 heads, sequence 2048, micro-batch 4, 2 micro-batches)
for eight configurations of the single-GPU bundled GPT that were never recorded, and writes one CSV
row per configuration and base: the `lumos capture gpt` command that will record it, the exact
`lumos predict` command, the predicted iteration and its four components (ms), the predicted memory
(GiB, `max_memory_allocated`'s terms: 8 bytes per parameter for plain bf16 AdamW, no recomputation,
no workspace constant), the commit of the working tree, whether it was dirty, and a digest of
`lumos/` and `config/` as they were (the commit cannot name itself: the CSV names the commit its
code came from, and is committed in a later one).

`record` records every configuration once in one process (`lumos.capture.evidence`'s
`record_one`), cheapest first and the largest in memory last, after one more recording of the
base (`base_r2`: how much the new machine differs from the old one; no prediction, reported
beside) and one of the base with 20 profiled steps (`base_long`: calibration for the sustained-clock
model, `studies/h200/clocks.py`; no prediction). A recording that fails (out of memory) is written down and the next one starts; no
recording starts whose estimated wall time (the longest so far, scaled by training FLOPs) would
pass `--budget-s`.

`score` reads the committed CSV unchanged and the recordings, and writes a Markdown table: the
error of each prediction against the mean of the recording's profiled steps
(`lumos.predict.prediction.measured_steps`), per component, the recording's step-to-step spread,
and the mean |error| and worst per base. It refuses (one line) a CSV changed after it was
committed: the CSV must be clean in git, and exactly one commit after the one it names may have
touched it (`git show` of that commit is compared with the file read).

`predict --pooled` makes the same predictions from each base with the other base recording's
profiled steps (`lumos predict --other-recordings`: host work and kernels the median over both
recordings' six steps), into `predictions_pooled.csv`. It was added after `predictions.csv` was
committed (`3cd6801`), and committed itself before any recording (`git log` says when): both are
pre-registered, and `score --predictions` scores either unchanged.

What can be pre-registered is what `lumos predict` expresses on one GPU: layers, hidden and FFN
size, micro-batch size and micro-batch count. It takes no head count and no sequence length, so
neither can be changed here: where the hidden size changes, the heads follow it (hidden / 128,
the base's head dimension), and the sequence stays 2048.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import datetime as dt
import hashlib
import io
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from lumos.capture import evidence as gpu_evidence
from lumos.studies import ROOT

BASE = dict(gpu_evidence.BASE)
TINY = {**gpu_evidence.TINY, "heads": 4}   # head dim 16, so the tiny widths 80 and 160 keep it
H200_DIR = "resources/traces/h200"
BASES = ("base_r0", "base_r1")
REPEAT = ("base_r2", 2)                    # the base recorded once more (name, seed): not a prediction
# The base with 20 profiled steps (2.8 s of work): calibration for the sustained-clock model, whose
# constants come from runs that end at 1.3 s (docs/notes/2026-12-02-sustained-clocks.md: does the
# dip at 0.85-1.0 s recur?). Not a prediction; `python studies/h200/clocks.py` reads it.
LONG = ("base_long", 3, 20)                # (name, seed, profiled steps)
PREDICTIONS = "benchmarks/prereg/predictions.csv"
POOLED = "benchmarks/prereg/predictions_pooled.csv"   # the same from each base with the other's steps too
SCORES = "benchmarks/prereg/scores.md"
H200_GIB = 140.4   # 143771 MiB, nvidia-smi's memory.total of the H200 the base was recorded on
# The memory model set for the bundled GPT as it runs: bf16 parameters, gradients and AdamW moments
# (8 bytes per parameter), no recomputation, no workspace constant (what max_memory_allocated counts).
MEMORY_FLAGS = ["--bytes-per-param", "8", "--recompute", "none", "--workspace-gib", "0",
                "--gpu-memory-gib", str(H200_GIB)]
CODE_PATHS = ("lumos", "config")           # what makes a prediction, for the code digest
PARTS = ("iteration", "exposed_compute", "overlapped", "exposed_comm", "other")
FIELDS = ["config", "capture_command", "predict_command", "base", *(f"{p}_ms" for p in PARTS),
          "memory_gib", "fits_h200", "commit", "dirty", "code_digest"]
SIZE_FLAGS = {"--layers": "layers", "--hidden": "hidden", "--ffn": "ffn", "--heads": "heads", "--seq": "seq",
              "--micro-batch": "micro_batch", "--micro-batches": "microbatches"}


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to a temporary file beside `path`, then rename it over `path`.

    (`lumos.trace.atomic` does the same, but importing `lumos.trace` pulls in numba and scipy,
    which the GPU machine's Python need not have.)"""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class PreregError(Exception):
    """Something the check refuses to go on with; the message is one line."""


def configurations(base: dict) -> dict[str, dict]:
    """Name -> full sizes of every pre-registered configuration, as changes of `base`.

    Relative to the base, so `--tiny` shrinks them all alike; the comments give the H200 sizes.
    """
    head_dim = base["hidden"] // base["heads"]

    def width(scale: float) -> dict:
        hidden = round(base["hidden"] * scale)
        assert hidden % head_dim == 0, (hidden, head_dim)
        return dict(hidden=hidden, ffn=round(base["ffn"] * scale), heads=hidden // head_dim)

    changes = {   # in recording order: lumos's memory model of the H200 sizes, smallest first (tested)
        "ffn_0.5x": {"ffn": base["ffn"] // 2},                                # FFN 4096 at hidden 2048
        "mbcount_3": {"microbatches": base["microbatches"] * 3 // 2},         # 3 micro-batches, global batch 12
        "mbs_6": {"micro_batch": base["micro_batch"] * 3 // 2},               # micro-batch 6
        "width_1.25x": width(1.25),                                           # 2560 / 10240, 20 heads
        "layers_16_mbs_8": {"layers": round(base["layers"] * 4 / 3),          # 16 layers at micro-batch 8
                            "micro_batch": base["micro_batch"] * 2},
        "mbs_16": {"micro_batch": base["micro_batch"] * 4},                   # micro-batch 16 (outside: 2-8)
        "layers_3x": {"layers": base["layers"] * 3},                          # 36 layers (outside: 12-24)
        "width_2.5x": width(2.5),                                             # 5120 / 20480, 40 heads (outside)
    }
    return {name: {**base, **change} for name, change in changes.items()}


def recorded_sizes() -> list[dict]:
    """The sizes recorded on the H200 so far (resources/traces/h200, `lumos.capture.evidence`)."""
    return [{**BASE, **change} for change, _side in gpu_evidence.configurations(BASE).values()]


def outside_recorded(sizes: dict) -> list[str]:
    """The sizes of `sizes` outside the range recorded so far."""
    rec = recorded_sizes()
    return [k for k in ("layers", "hidden", "ffn", "micro_batch", "microbatches")
            if not min(r[k] for r in rec) <= sizes[k] <= max(r[k] for r in rec)]


def memory_gib(sizes: dict) -> float:
    """Peak GiB by lumos's memory model (the MEMORY_FLAGS settings): what orders the recordings."""
    from lumos.predict.memory import MemorySettings, stage_memory
    from lumos.model.structure import ModelShape

    shape = ModelShape(hidden=sizes["hidden"], ffn=sizes["ffn"], seq=sizes["seq"], micro_batch=sizes["micro_batch"],
                       vocab=1024, heads=sizes["heads"], tp=1)
    m = MemorySettings(bytes_per_param=8.0, recompute="none", workspace_gib=0.0)
    return stage_memory(shape, sizes["layers"], 0, 1, 1, sizes["microbatches"], m, ndigits=None)["total_gib"]


def recording_order(base: dict) -> list[tuple[str, dict, int]]:
    """(name, sizes, seed) in recording order: the base again (the cheapest, and first in its process
    as base_r0 was), then the configurations as listed, the largest in memory last.

    The order is written into `configurations` rather than computed here: `record` runs on the GPU
    machine's own Python, which has torch but need not have what `lumos.transform` imports."""
    return ([(REPEAT[0], dict(base), REPEAT[1]), (LONG[0], dict(base), LONG[1])]
            + [(name, sizes, 0) for name, sizes in configurations(base).items()])


def capture_command(name: str, sizes: dict, device: str = "cuda") -> str:
    return " ".join(gpu_evidence.command_line(sizes, True, device, f"DIR/traces/{name}")) + " --seed 0"


def predict_argv(base_dir: str, sizes: dict, others: tuple[str, ...] = ()) -> list[str]:
    """`lumos predict` for `sizes` from `base_dir`: every size explicit, global batch = micro-batch x count;
    `others`: other recordings of the base, pooled (`--other-recordings`)."""
    pooled = ["--other-recordings", *others] if others else []
    return ["lumos", "predict", base_dir, "--layers", str(sizes["layers"]), "--hidden", str(sizes["hidden"]),
            "--ffn", str(sizes["ffn"]), "--micro-batch", str(sizes["micro_batch"]),
            "--global-batch", str(sizes["micro_batch"] * sizes["microbatches"]), *MEMORY_FLAGS, *pooled,
            "--format", "json"]


def other_bases(base: str, pooled: bool) -> tuple[str, ...]:
    """The other base recordings a `--pooled` prediction from `base` pools (none without)."""
    return tuple(f"{H200_DIR}/{b}" for b in BASES if b != base) if pooled else ()


def sizes_of(command: str) -> dict:
    """The model sizes a `lumos capture gpt` or `lumos predict` command line names."""
    argv = shlex.split(command)
    out = {SIZE_FLAGS[a]: int(argv[i + 1]) for i, a in enumerate(argv[:-1]) if a in SIZE_FLAGS}
    if "predict" in argv[:2] and "--global-batch" in argv:
        out["microbatches"] = int(argv[argv.index("--global-batch") + 1]) // out["micro_batch"]
    return out


# ---------------------------------------------------------------- git

def git(*args: str, cwd: Path = ROOT, binary: bool = False):
    """stdout of `git ARGS` in `cwd`, or None where git or the object is not there."""
    try:
        r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    if r.returncode:
        return None
    return r.stdout if binary else r.stdout.decode().strip()


def _blob_sha(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def code_digest(commit: str | None = None, cwd: Path = ROOT) -> str | None:
    """sha256 over (path, git blob id) of the files under CODE_PATHS: of the working tree
    (tracked and untracked, ignored left out), or of `commit`."""
    if commit is None:
        listing = git("ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *CODE_PATHS, cwd=cwd)
        if listing is None:
            return None
        entries = sorted((p, _blob_sha((cwd / p).read_bytes()))
                         for p in set(listing.split("\0")) if p and (cwd / p).is_file())
    else:
        listing = git("ls-tree", "-r", "-z", commit, "--", *CODE_PATHS, cwd=cwd)
        if listing is None:
            return None
        entries = sorted((line.split("\t", 1)[1], line.split()[2]) for line in listing.split("\0") if line)
    return hashlib.sha256("".join(f"{p} {s}\n" for p, s in entries).encode()).hexdigest()[:16]


def committed_check(path: Path, named: str) -> str:
    """Where the predictions file was committed, or why that is unknown; PreregError if it changed since.

    The file names the commit its code came from (HEAD when `predict` ran); it is committed in a
    later one. It must be clean, touched by exactly one commit after the one it names, and equal
    to that commit's version.
    """
    top = git("rev-parse", "--show-toplevel", cwd=path.parent)
    if top is None:
        return "unverified: not in a git checkout"
    rel = path.resolve().relative_to(Path(top).resolve()).as_posix()
    if git("cat-file", "-e", f"{named}^{{commit}}", cwd=Path(top)) is None:
        return f"unverified: commit {named[:12]} is not in this repository"
    if git("status", "--porcelain", "--", rel, cwd=Path(top)):
        raise PreregError(f"{rel} has uncommitted changes (or is not committed): commit it before scoring")
    after = (git("log", "--format=%H", f"{named}..HEAD", "--", rel, cwd=Path(top)) or "").split()
    if len(after) > 1:
        raise PreregError(f"{rel} was modified after it was committed in {after[-1][:12]}: by "
                          f"{', '.join(c[:12] for c in after[:-1])}")
    where = after[0] if after else named
    if git("show", f"{where}:{rel}", cwd=Path(top), binary=True) != path.read_bytes():
        raise PreregError(f"{rel} differs from its version in {where[:12]}")
    return where


# ---------------------------------------------------------------- predict

def predict(out: Path, pooled: bool = False) -> list[dict]:
    """Every configuration from each base, through `lumos.cli.main` (the `lumos` command's own entry);
    `pooled`: each with the other base recording's profiled steps too."""
    from lumos.cli import main

    rel_out = out.resolve().relative_to(ROOT) if out.resolve().is_relative_to(ROOT) else None
    status = git("status", "--porcelain", "--untracked-files=all") or ""
    dirty = [line for line in status.splitlines() if line and (rel_out is None or line[3:] != rel_out.as_posix())]
    common = {"commit": git("rev-parse", "HEAD") or "unknown", "dirty": "yes" if dirty else "no",
              "code_digest": code_digest() or "unknown"}
    rows = []
    cwd = os.getcwd()
    os.chdir(ROOT)   # the commands name the bases relative to the repository root
    try:
        for base in BASES:    # by base: lumos.commands.predict keeps the last base loaded
            for name, sizes in configurations(BASE).items():
                argv = predict_argv(f"{H200_DIR}/{base}", sizes, other_bases(base, pooled))
                buf = io.StringIO()
                with contextlib.redirect_stdout(buf):
                    rc = main(argv[1:])
                if rc:
                    raise PreregError(f"{' '.join(argv)} exited {rc}")
                doc = json.loads(buf.getvalue())
                p, mem = doc["predicted"], doc["memory"]
                rows.append({"config": name, "capture_command": capture_command(name, sizes),
                             "predict_command": " ".join(argv), "base": base,
                             **{f"{k}_ms": f"{p[f'{k}_us'] / 1e3:.3f}" for k in PARTS},
                             "memory_gib": f"{mem['memory_gib_per_gpu']:.2f}", "fits_h200": str(mem["fits"]).lower(),
                             **common})
                print(f"{name:<16} {base}: {p['iteration_us'] / 1e3:9.3f} ms, {mem['memory_gib_per_gpu']:6.2f} GiB",
                      file=sys.stderr, flush=True)
    finally:
        os.chdir(cwd)
    order = list(configurations(BASE))
    rows.sort(key=lambda r: (order.index(r["config"]), r["base"]))
    write_atomic(out, to_csv(rows))
    return rows


def to_csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=FIELDS, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


# ---------------------------------------------------------------- record

def record(out: Path, device: str = "cuda", tiny: bool = False, budget_s: float = 360.0,
           only: list[str] | None = None, predictions: Path = ROOT / PREDICTIONS, do_pack: bool = False) -> dict:
    """Record every configuration once, in one process; write out/summary.json (and the pieces)."""
    from lumos.capture.gpt import GPTConfig

    t0 = time.perf_counter()
    base = TINY if tiny else BASE
    plan = [p for p in recording_order(base) if not only or p[0] in only]
    (out / "traces").mkdir(parents=True, exist_ok=True)
    pred = {"path": str(predictions), "sha256": None, "commit": None}
    if predictions.is_file():
        pred["sha256"] = hashlib.sha256(predictions.read_bytes()).hexdigest()
        pred["commit"] = sorted({r["commit"] for r in read_predictions(predictions)})
    summary = {"environment": gpu_evidence.environment(device), "base": base, "tiny": tiny, "budget_s": budget_s,
               "recorded_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
               "git_head": git("rev-parse", "HEAD"), "predictions": pred, "runs": []}

    def flops(sizes):   # training FLOPs per iteration, up to a constant: parameters x tokens
        cfg = GPTConfig(**{k: sizes[k] for k in ("layers", "hidden", "ffn", "heads", "seq", "micro_batch")},
                        vocab=1024)
        return cfg.parameter_count() * sizes["seq"] * sizes["micro_batch"] * sizes["microbatches"]

    longest = None   # (wall s, flops) of the longest recording so far
    for i, (name, sizes, seed) in enumerate(plan):
        elapsed = time.perf_counter() - t0
        estimate = longest[0] * max(1.0, flops(sizes) / longest[1]) if longest else 0.0
        if elapsed + estimate > budget_s:
            for skipped, _, _ in plan[i:]:
                summary["runs"].append({"config": skipped, "skipped": "budget", "elapsed_s": round(elapsed, 1)})
            print(f"budget: {elapsed:.0f} s + {estimate:.0f} s estimated for {name} > {budget_s:.0f} s; "
                  f"not recorded: {', '.join(p[0] for p in plan[i:])}", flush=True)
            break
        try:
            steps = LONG[2] if name == LONG[0] else 3
            row = {"config": name, **gpu_evidence.record_one(sizes, True, out / "traces" / name, device, seed=seed,
                                                             steps=steps)}
        except Exception as exc:   # out of memory, most likely: the others still run
            row = {"config": name, "sizes": sizes, "error": f"{type(exc).__name__}: {exc}"[:500]}
        else:
            if longest is None or row["wall_s"] > longest[0]:
                longest = (row["wall_s"], flops(sizes))
        summary["runs"].append(row)
        print(json.dumps(row), flush=True)
    summary["total_s"] = round(time.perf_counter() - t0, 1)
    write_atomic(out / "summary.json", json.dumps(summary, indent=1) + "\n")
    if do_pack:
        print("packed:", gpu_evidence.pack(out, name="prereg", order=[p[0] for p in plan]), flush=True)
    return summary


# ---------------------------------------------------------------- score

def read_predictions(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    missing = [f for f in FIELDS if rows and f not in rows[0]]
    if not rows or missing:
        raise PreregError(f"{path}: not a predictions file ({'no rows' if not rows else 'no ' + ', '.join(missing)})")
    return rows


def recorded_config(trace_dir: Path) -> dict:
    """The sizes a recording says it was made with (its `lumosCapture` block)."""
    import gzip

    import orjson

    files = sorted(trace_dir.glob("rank*.json*"))
    if not files:
        raise PreregError(f"{trace_dir}: no rank*.json(.gz) trace")
    raw = files[0].read_bytes()
    cap = orjson.loads(gzip.decompress(raw) if files[0].suffix == ".gz" else raw).get("lumosCapture") or {}
    cfg = cap.get("config") or {}
    return {**{k: cfg.get(k) for k in ("layers", "hidden", "ffn", "heads", "seq", "micro_batch")},
            "microbatches": cap.get("microbatches")}


def _mean(xs):
    return sum(xs) / len(xs)


def measured(trace_dir: Path, cache: dict) -> dict:
    """Mean of each part (ms) over the recording's profiled steps, and the step-to-step spread (%)."""
    from lumos.predict.prediction import measured_steps

    key = str(trace_dir.resolve())
    if key not in cache:
        steps = measured_steps(trace_dir)
        its = [s["iteration_us"] for s in steps]
        cache[key] = {**{p: _mean([s[f"{p}_us"] for s in steps]) / 1e3 for p in PARTS},
                      "steps": len(steps), "spread_pct": 100.0 * (max(its) - min(its)) / _mean(its)}
    return cache[key]


def error_pct(predicted: float, actual: float) -> float | None:
    return None if actual == 0 else 100.0 * (predicted - actual) / actual


def score_rows(traces: Path, predictions: Path) -> tuple[list[dict], dict]:
    """One scored row per prediction, and the header facts (commit check, the base recorded again)."""
    rows = read_predictions(predictions)
    commits = sorted({r["commit"] for r in rows})
    if len(commits) != 1:
        raise PreregError(f"{predictions}: rows name {len(commits)} commits ({', '.join(c[:12] for c in commits)})")
    where = committed_check(predictions, commits[0])
    summary_path = traces / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    runs = {r["config"]: r for r in summary.get("runs", [])}
    sha = hashlib.sha256(predictions.read_bytes()).hexdigest()
    on_machine = summary.get("predictions") or {}
    head = {"predictions": str(predictions), "commit": commits[0], "dirty": rows[0]["dirty"],
            "code_digest": rows[0]["code_digest"], "committed_in": where,
            "code_matches": None, "same_file_as_recording": None if not on_machine.get("sha256")
            else on_machine["sha256"] == sha, "recorded_at": summary.get("recorded_at"),
            "environment": summary.get("environment")}
    if not where.startswith("unverified"):
        head["code_matches"] = code_digest(where, cwd=Path(git("rev-parse", "--show-toplevel",
                                                               cwd=predictions.parent))) == rows[0]["code_digest"]
    cache: dict = {}
    out = []
    for r in rows:
        d = traces / "traces" / r["config"]
        want = sizes_of(r["capture_command"])
        if sizes_of(r["predict_command"]) != {k: want[k] for k in sizes_of(r["predict_command"])}:
            raise PreregError(f"{r['config']}: the capture and predict commands name different sizes")
        row = {"config": r["config"], "base": r["base"],
               "predicted": {p: float(r[f"{p}_ms"]) for p in PARTS}, "memory_gib": float(r["memory_gib"]),
               "commit_matches": None if not on_machine.get("commit") else r["commit"] in on_machine["commit"],
               "measured": None, "note": ""}
        run = runs.get(r["config"], {})
        if not d.is_dir():
            row["note"] = run.get("error") or (f"skipped ({run['skipped']})" if "skipped" in run else "not recorded")
            out.append(row)
            continue
        got = recorded_config(d)
        if got != want:
            raise PreregError(f"{d} was recorded with {got}, the predictions are for {want}")
        m = measured(d, cache)
        row["measured"] = m
        row["measured_memory_gib"] = run.get("max_memory_gib")
        row["error_pct"] = error_pct(row["predicted"]["iteration"], m["iteration"])
        out.append(row)
    # the base recorded again, beside the recordings of the base the predictions came from
    again = traces / "traces" / REPEAT[0]
    if again.is_dir():
        bases = {}
        for r in rows:
            argv = shlex.split(r["predict_command"])
            bases[r["base"]] = ROOT / argv[argv.index("predict") + 1]
        head["base_again"] = {"name": REPEAT[0], **measured(again, cache),
                              "bases": {b: measured(p, cache)["iteration"] for b, p in sorted(bases.items())
                                        if p.is_dir()}}
    return out, head


def _cell(p: float, m: float) -> str:
    e = error_pct(p, m)
    return f"{p:.2f} / {m:.2f}" + ("" if e is None else f" ({e:+.1f}%)")


def to_markdown(rows: list[dict], head: dict) -> str:
    lines = ["# Pre-registered H200 check: committed predictions against new recordings", ""]
    dirty = " (working tree dirty)" if head["dirty"] == "yes" else ""
    lines.append(f"- Predictions: `{head['predictions']}`, made at commit `{head['commit'][:12]}`{dirty}; "
                 + (f"committed in `{head['committed_in'][:12]}`, unchanged since"
                    if not head["committed_in"].startswith("unverified") else head["committed_in"]))
    if head["code_matches"] is not None:
        lines.append(f"- Code (`{'`, `'.join(CODE_PATHS)}`) of that commit is the code that predicted: "
                     f"{'yes' if head['code_matches'] else 'NO'} (digest `{head['code_digest']}`)")
    if head["same_file_as_recording"] is not None:
        lines.append(f"- The same predictions file was on the recording machine: "
                     f"{'yes' if head['same_file_as_recording'] else 'NO'}")
    if head.get("recorded_at"):
        env = head.get("environment") or {}
        lines.append(f"- Recorded {head['recorded_at']} on {env.get('gpu', env.get('device', '?'))}, "
                     f"torch {env.get('torch', '?')}" + (f" ({env['nvidia_smi']})" if env.get("nvidia_smi") else ""))
    lines += ["", "Per cell of a component: predicted / measured ms (error %). Measured: mean over the "
              "recording's profiled steps; spread: (max - min) / mean over those steps.", "",
              "| config | base | predicted ms | measured ms | error % | exposed compute | overlapped | exposed comm "
              "| other | spread % | memory GiB pred / meas | commit matches |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        p, m = r["predicted"], r["measured"]
        cm = {None: "-", True: "yes", False: "NO"}[r["commit_matches"]]
        if m is None:
            lines.append(f"| {r['config']} | {r['base']} | {p['iteration']:.3f} | {r['note']} | | | | | | | "
                         f"{r['memory_gib']:.2f} / - | {cm} |")
            continue
        meas_mem = "-" if r.get("measured_memory_gib") is None else f"{r['measured_memory_gib']:.2f}"
        lines.append(f"| {r['config']} | {r['base']} | {p['iteration']:.3f} | {m['iteration']:.3f} | "
                     f"{r['error_pct']:+.2f} | " + " | ".join(_cell(p[c], m[c]) for c in PARTS[1:])
                     + f" | {m['spread_pct']:.1f} | {r['memory_gib']:.2f} / {meas_mem} | {cm} |")
    lines.append("")
    for base in sorted({r["base"] for r in rows}):
        scored = [r for r in rows if r["base"] == base and r["measured"] is not None]
        if not scored:
            lines.append(f"- From {base}: nothing recorded to score")
            continue
        worst = max(scored, key=lambda r: abs(r["error_pct"]))
        lines.append(f"- From {base}: mean |error| {_mean([abs(r['error_pct']) for r in scored]):.2f}% over "
                     f"{len(scored)} configurations; worst {worst['config']} {worst['error_pct']:+.2f}%")
    again = head.get("base_again")
    if again:
        old = ", ".join(f"{b} {v:.3f} ms ({100.0 * (again['iteration'] - v) / v:+.2f}%)"
                        for b, v in again["bases"].items())
        lines.append(f"- The base recorded again ({again['name']}, not a prediction): {again['iteration']:.3f} ms "
                     f"(spread {again['spread_pct']:.1f}%) against " + (old or "no base recording here"))
    return "\n".join(lines) + "\n"


def score(traces: Path, predictions: Path, out: Path | None) -> str:
    rows, head = score_rows(traces, predictions)
    text = to_markdown(rows, head)
    if out is not None:
        write_atomic(out, text)
    return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("predict", help="predict every configuration from base_r0 and base_r1; write the CSV")
    p.add_argument("--out", default=None, help=f"default {PREDICTIONS}, with --pooled {POOLED}")
    p.add_argument("--pooled", action="store_true", help="each base with the other base recording's steps")
    r = sub.add_parser("record", help="record every configuration once, in one process")
    r.add_argument("--out", required=True)
    r.add_argument("--device", default="cuda")
    r.add_argument("--tiny", action="store_true", help="every configuration shrunk alike (a CPU check of the path)")
    r.add_argument("--budget-s", type=float, default=360.0,
                   help="start no recording whose estimated end is later than this (s from the start)")
    r.add_argument("--only", nargs="*", default=None, help="configurations to record (default all)")
    r.add_argument("--predictions", default=str(ROOT / PREDICTIONS),
                   help="the predictions file whose hash goes into summary.json")
    r.add_argument("--pack", action="store_true", help="also DIR/pack/prereg.tar.xz.part-NN")
    s = sub.add_parser("score", help="score the committed predictions against the recordings")
    s.add_argument("--traces", required=True, help="the unpacked recordings (traces/NAME/, summary.json)")
    s.add_argument("--predictions", default=str(ROOT / PREDICTIONS))
    s.add_argument("--out", default=str(ROOT / SCORES))
    args = ap.parse_args(argv)
    try:
        if args.command == "predict":
            t0 = time.perf_counter()
            out = Path(args.out) if args.out else ROOT / (POOLED if args.pooled else PREDICTIONS)
            rows = predict(out, pooled=args.pooled)
            print(f"{len(rows)} predictions in {time.perf_counter() - t0:.1f} s -> {out}")
        elif args.command == "record":
            record(Path(args.out), device=args.device, tiny=args.tiny, budget_s=args.budget_s, only=args.only,
                   predictions=Path(args.predictions), do_pack=args.pack)
        else:
            print(score(Path(args.traces), Path(args.predictions), Path(args.out) if args.out else None), end="")
    except PreregError as exc:
        print(f"prereg_h200.py {args.command}: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
