"""Collective samples from nccl-tests output: the cluster's own collectives, measured before any training job.

A one-GPU base has no collective to fit the alpha-beta model on, and a datasheet profile says what the
links could carry, not what NCCL gets from them at a training job's message sizes. NVIDIA's nccl-tests
(`all_reduce_perf`, `all_gather_perf`, `reduce_scatter_perf`, `sendrecv_perf`, `alltoall_perf`) run in
minutes on the cluster a user is about to rent; `lumos predict --nccl-tests LOG...` reads their output
and fits the levels the base has no sample of on it (`collectives.fit_alpha_beta`, `reference`).

What is read (the layout of nccl-tests' src/common.cu output, which has not changed in meaning since 2.x):
- the test: the `# Collective test starting: NAME` line of newer versions, else the file name
  (`all_reduce_perf.txt`, `all_gather_perf-2nodes.log`, ...);
- the GPUs: one `#  Rank  N Group G Pid P on HOST device D ...` line each (older versions: no Group); the group is as many GPUs on
  as many distinct hosts, numbered host by host (so `level_of` and `rails` read it as it ran);
- one row per size: size in bytes, element count, type, reduction, [root,] then the out-of-place time in
  microseconds (the column taken), algbw, busbw, #wrong, and the same in place. Rows whose time is not a
  number, and sizes below 1 MiB, are skipped: a few bytes' time is launch latency, not the links.
nccl-tests' `size` is the one this module's CollectiveSpec takes: the whole buffer of an all-reduce, the
gathered output of an all-gather, the input of a reduce-scatter, what each rank sends in send/recv.
"""

from __future__ import annotations

import re
from pathlib import Path

from lumos.errors import UserError

from .collectives import CollectiveSpec

__all__ = ["TEST_KINDS", "read_nccl_tests", "MIN_BYTES"]

TEST_KINDS = {"all_reduce_perf": "allreduce", "all_gather_perf": "allgather",
              "reduce_scatter_perf": "reduce_scatter", "sendrecv_perf": "send", "alltoall_perf": "all_to_all"}
MIN_BYTES = 1 << 20
_STARTING = re.compile(r"#\s*Collective test starting:\s*(\w+)")
_RANK = re.compile(r"#\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)")
_NUMBER = re.compile(r"^-?\d+(\.\d+)?$")


def read_nccl_tests(paths, gpus_per_host: int) -> tuple[list[tuple[CollectiveSpec, float]], list[str]]:
    """(samples, one line per file saying what was read) from nccl-tests output files."""
    samples, said = [], []
    for path in map(Path, paths):
        mine = _read_one(path, gpus_per_host)
        samples += mine[0]
        said.append(mine[1])
    return samples, said


def _read_one(path: Path, gph: int) -> tuple[list, str]:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        raise UserError(f"--nccl-tests {path}: cannot read it ({exc.strerror or exc})") from None
    test = _test_name(path, text)
    kind = TEST_KINDS[test]
    hosts: dict[str, int] = {}
    for host, _dev in ((m.group(2), m.group(3)) for m in map(_RANK.match, text.splitlines()) if m):
        hosts[host] = hosts.get(host, 0) + 1
    if not hosts:
        raise UserError(f"--nccl-tests {path}: no '#  Rank N Group G Pid P on HOST device D' line: nccl-tests prints "
                        "one per GPU, and the group's size and hosts are read from them")
    per_host = set(hosts.values())
    if len(per_host) > 1:
        raise UserError(f"--nccl-tests {path}: {len(hosts)} hosts with {sorted(per_host)} GPUs each; a group with the "
                        "same number of GPUs on every host is needed (the model's levels and rails assume it)")
    k = per_host.pop()
    if k > gph:
        raise UserError(f"--nccl-tests {path}: {k} GPUs on one host, more than the cluster profile's gpus_per_host "
                        f"{gph} (--cluster picks another profile)")
    group = tuple(h * gph + i for h in range(len(hosts)) for i in range(k))
    if kind == "send":     # a ring of sends: the slowest pair crosses hosts where there are several
        group = (0, gph) if len(hosts) > 1 else (0, 1)
    rows = []
    for lineno, line in enumerate(text.splitlines(), 1):
        cols = line.split()
        if not cols or line.lstrip().startswith("#") or not cols[0].isdigit():
            continue
        t = _out_of_place_us(cols)
        if t is None:
            continue
        if t <= 0:
            raise UserError(f"--nccl-tests {path}:{lineno}: time {t} us is not positive")
        size = int(cols[0])
        if size >= MIN_BYTES:
            rows.append((CollectiveSpec(kind, float(size), group), t))
    if not rows:
        raise UserError(f"--nccl-tests {path}: no row of {MIN_BYTES >> 20} MiB or more with a time (run the test "
                        "with e.g. -b 1M -e 1G -f 2)")
    said = (f"{path.name}: {test}, {len(hosts) * k} GPUs on {len(hosts)} host(s), {len(rows)} sizes "
            f"{_mib(rows[0][0].nbytes)}-{_mib(rows[-1][0].nbytes)}")
    return rows, said


def _test_name(path: Path, text: str) -> str:
    m = _STARTING.search(text)
    name = m.group(1) if m else next((t for t in TEST_KINDS if path.name.startswith(t)), None)
    if name not in TEST_KINDS:
        raise UserError(f"--nccl-tests {path}: which test made it is not said (no '# Collective test starting:' line, "
                        f"and the file name does not start with one of {', '.join(TEST_KINDS)}); rename the file")
    return name


def _out_of_place_us(cols: list[str]) -> float | None:
    """The out-of-place time of a result row: the first number after size, count, type and reduction and
    (versions since 2.10) root; None where it is not a number (N/A)."""
    i = 5 if len(cols) > 5 and cols[4] == "-1" else 4   # the root column: -1 for every test read here
    if len(cols) <= i or not _NUMBER.match(cols[i]):
        return None
    return float(cols[i])


def _mib(nbytes: float) -> str:
    return f"{nbytes / (1 << 20):g} MiB"
