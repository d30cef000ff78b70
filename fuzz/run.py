"""The fuzz driver: run the targets of fuzz/harness.py for a bounded time, keep what fails.

    python -m fuzz.run --seconds 300 [--targets trace,arrays,kernels] [--out DIR] [--seed N]
    python -m fuzz.run --replay DIR/findings/NAME.bin     # run one saved input again, with its traceback
    python -m fuzz.run --summary DIR                       # the counts of every run into DIR

Each input is a buffer of bytes that Hypothesis turns into a test case
(`fuzz_one_input`): random, or a previous valid buffer with a few bytes changed. Before it runs,
the buffer is written to DIR/current/<target>.bin (the trace target also writes the trace file
itself there), so when a sanitizer aborts the process, fuzz/run.sh finds the input that did it.
A Python-level failure (a Finding of the oracle, or any unexpected exception) is saved to
DIR/findings/ with its traceback, once per signature (target, exception type, first words of
the message), and the run goes on. At the end (or on SIGTERM) DIR/stats-<pid>.json holds the
counts: inputs run and valid per target, outcomes, findings, the slowest inputs.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import random
import re
import signal
import sys
import time
import traceback
import warnings
from pathlib import Path

from fuzz import harness  # first: it loads the sanitizer build of the kernels where asked

from hypothesis import HealthCheck, given, settings  # noqa: E402

BUFFER = 8192


def _target(name: str, stats: dict):
    strategy, check = harness.TARGETS[name]

    @settings(database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(strategy())
    def run(case):
        got = check(case)
        stats["outcomes"][_outcome_key(name, got)] += 1

    return run.hypothesis.fuzz_one_input


def _outcome_key(name: str, got: dict) -> str:
    key = f"{name}: {got.get('outcome')}"
    if got.get("stage"):
        key += f" at {got['stage']}"
    if got.get("outcome") == "ValueError":   # a ValueError that is not a TraceError: a traceback in the CLI
        key += f": {_words(got.get('message', ''))}"
    return key


def _words(message: str) -> str:
    """The first words of a message with numbers and paths taken out (a signature)."""
    m = re.sub(r"\S*/\S*", "PATH", message)
    m = re.sub(r"-?\d+(\.\d+)?(e[-+]?\d+)?", "N", m)
    return " ".join(m.split()[:10])


def _save_finding(out: Path, name: str, buf: bytes, exc: BaseException, stats: dict) -> None:
    sig = f"{name}: {type(exc).__name__}: {_words(str(exc))}"
    stats["findings"][sig] += 1
    if stats["findings"][sig] > 1:
        return
    h = hashlib.sha1(sig.encode()).hexdigest()[:10]
    d = out / "findings"
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{name}-{h}.bin").write_bytes(buf)
    text = "".join(traceback.format_exception(exc))
    replay = f"python -m fuzz.run --replay {d / f'{name}-{h}.bin'}"
    (d / f"{name}-{h}.txt").write_text(f"{sig}\n\nreplay: {replay}\n\n{text}")
    current = out / "current"
    for f in current.glob("trace.json*") if name == "trace" else ():
        (d / f"{name}-{h}{''.join(f.suffixes)}").write_bytes(f.read_bytes())
    print(f"finding: {sig}", file=sys.stderr, flush=True)


def fuzz(seconds: float, names: list[str], out: Path, seed: int) -> dict:
    os.environ["FUZZ_OUT"] = str(out)
    (out / "current").mkdir(parents=True, exist_ok=True)
    rnd = random.Random(seed)
    stats = {"kernels": harness.KERNELS_FILE or "installed", "seconds": seconds, "seed": seed,
             "inputs": collections.Counter(), "valid": collections.Counter(), "outcomes": collections.Counter(),
             "findings": collections.Counter(), "slowest": []}
    targets = {n: _target(n, stats) for n in names}
    corpus: dict[str, list[bytes]] = {n: [] for n in names}
    stop = time.monotonic() + seconds
    stats_path = out / f"stats-{os.getpid()}.json"

    def dump(*_):
        stats["slowest"] = sorted(stats["slowest"], reverse=True)[:10]
        stats_path.write_text(json.dumps(stats, indent=1, default=str))

    signal.signal(signal.SIGTERM, lambda *a: (dump(), sys.exit(0)))
    k = 0
    last_dump = time.monotonic()
    while time.monotonic() < stop:
        name = names[k % len(names)]
        k += 1
        pool = corpus[name]
        if pool and rnd.random() < 0.5:   # a valid earlier input, a few bytes changed
            buf = bytearray(rnd.choice(pool))
            for _ in range(rnd.randint(1, 8)):
                if buf:
                    buf[rnd.randrange(len(buf))] = rnd.randrange(256)
            buf = bytes(buf) + rnd.randbytes(64)
        else:
            buf = rnd.randbytes(BUFFER)
        (out / "current" / f"{name}.bin").write_bytes(buf)
        (out / "current" / "target").write_text(name)   # which of the inputs there ran last
        stats["inputs"][name] += 1
        t = time.monotonic()
        try:
            kept = targets[name](buf)
        except Exception as exc:  # noqa: BLE001 - every failure is a finding, the run goes on
            _save_finding(out, name, buf, exc, stats)
            kept = None
        took = time.monotonic() - t
        if kept is not None:
            stats["valid"][name] += 1
            if len(pool) < 500:
                pool.append(kept)
            else:
                pool[rnd.randrange(len(pool))] = kept
        if took > 2.0:
            stats["slowest"].append((round(took, 2), name, hashlib.sha1(buf).hexdigest()[:10]))
            (out / "slow").mkdir(exist_ok=True)
            (out / "slow" / f"{name}-{hashlib.sha1(buf).hexdigest()[:10]}.bin").write_bytes(buf)
        if time.monotonic() - last_dump > 30:
            dump()
            last_dump = time.monotonic()
    dump()
    return stats


def replay(path: Path) -> int:
    name = path.name.split("-")[0].split(".")[0]
    stats = {"outcomes": collections.Counter()}
    os.environ.setdefault("FUZZ_OUT", str(path.parent.parent))
    try:
        _target(name, stats)(path.read_bytes())
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        return 1
    print(f"{path}: passes now ({dict(stats['outcomes'])})")
    return 0


def summary(out: Path) -> dict:
    total = {"inputs": collections.Counter(), "valid": collections.Counter(), "outcomes": collections.Counter(),
             "findings": collections.Counter(), "slowest": [], "runs": 0, "kernels": set()}
    for f in sorted(out.glob("stats-*.json")):
        s = json.loads(f.read_text())
        total["runs"] += 1
        total["kernels"].add(s["kernels"])
        for key in ("inputs", "valid", "outcomes", "findings"):
            total[key].update(s[key])
        total["slowest"] += s["slowest"]
    total["slowest"] = sorted(total["slowest"], reverse=True)[:10]
    total["kernels"] = sorted(total["kernels"])
    crashes = sorted(p.name for p in (out / "crashes").glob("*")) if (out / "crashes").exists() else []
    total["sanitizer_reports"] = crashes
    return total


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--targets", default=",".join(harness.TARGETS))
    p.add_argument("--out", default=str(harness.ROOT / "fuzz" / "out" / "manual"))
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--replay", default=None, metavar="FILE")
    p.add_argument("--summary", default=None, metavar="DIR")
    args = p.parse_args(argv)
    warnings.simplefilter("ignore", RuntimeWarning)   # numpy casting the hostile values the strategies make
    if args.replay:
        return replay(Path(args.replay))
    if args.summary:
        print(json.dumps(summary(Path(args.summary)), indent=1, default=str))
        return 0
    names = [n.strip() for n in args.targets.split(",") if n.strip()]
    unknown = [n for n in names if n not in harness.TARGETS]
    if unknown:
        p.error(f"unknown targets {unknown}: expected some of {', '.join(harness.TARGETS)}")
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    stats = fuzz(args.seconds, names, Path(args.out), seed)
    print(json.dumps({k: stats[k] for k in ("kernels", "seed", "inputs", "valid", "findings")}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
