"""A one-node SLURM cluster on this machine, and the tiny pipeline run through the SLURM profile on it.

`workflow/profiles/slurm/` is what a user who outgrows one machine hands to their cluster; this
script is the check that it works against a real scheduler rather than only parsing. It brings up
Debian's SLURM (slurmctld, slurmd, and slurmdbd over a private MariaDB, so `sacct` answers as on a
real cluster), runs the tiny profile through `snakemake --workflow-profile workflow/profiles/slurm`
in a fresh copy of the repository, checks in `sacct` that every job was an `sbatch` allocation that
completed, and compares the tables with a plain `snakemake --cores 2` run in a second copy.
`run` needs the executor plugin: `pip install -e '.[slurm]'`.

    python workflow/scripts/local_slurm.py install   # apt packages, slurm.conf, slurmdbd.conf, database
    python workflow/scripts/local_slurm.py start     # munged, mariadbd, slurmdbd, slurmctld, slurmd
    python workflow/scripts/local_slurm.py run       # tiny profile through SLURM and locally, compared
    python workflow/scripts/local_slurm.py stop

Every step is safe to repeat. Everything lives under LUMOS_SLURM_DIR (default /var/tmp/lumos-slurm):
`logs/` (the daemons', each phase's, and per run `run-TIME-{slurm,local}.log`, `sacct-TIME.tsv`,
`run-TIME.json`), `state/`, `db/`, `runs/TIME/{slurm,local}` (the two copies, kept to inspect). Every daemon
listens on 127.0.0.1 only. The configs go to /etc/slurm, marked as ours; one that is not is never
overwritten. Root only (it installs packages and starts daemons).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HOME = Path(os.environ.get("LUMOS_SLURM_DIR", "/var/tmp/lumos-slurm"))
LOGS, STATE, DB, RUNS = HOME / "logs", HOME / "state", HOME / "db", HOME / "runs"
ETC = Path("/etc/slurm")
MARK = "# written by lumos workflow/scripts/local_slurm.py"
PACKAGES = ["slurmctld", "slurmd", "slurm-client", "slurmdbd", "munge", "mariadb-server"]
CLUSTER, ACCOUNT, PARTITION = "lumos", "lumos", "main"
MUNGED_PID = Path("/run/munge/munged.pid")
DB_PORT = 3307               # not MariaDB's 3306: the database is ours alone, beside any system one
READY_S = 90                 # a daemon not answering after this long has failed (its log says why)
TINY = "config/profile/tiny.yaml"
TABLES = "results/tiny/tables"


class ClusterError(RuntimeError):
    """A step of bringing up or using the local cluster failed; the message names the log to read."""


def sh(cmd: list[str], log: Path | None = None, check: bool = True, **kw) -> subprocess.CompletedProcess:
    """Run a command; its output goes to `log` (appended) when given, else is returned."""
    if log is None:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, **kw)
    else:
        with log.open("a") as f:
            f.write(f"$ {' '.join(cmd)}\n")
            f.flush()
            proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, text=True, check=False, **kw)
    if check and proc.returncode != 0:
        where = f"; see {log}" if log else f": {(proc.stderr or proc.stdout).strip()[-2000:]}"
        raise ClusterError(f"{' '.join(cmd)} exited {proc.returncode}{where}")
    return proc


def wait_for(what: str, test, log: Path, timeout: float = READY_S) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if test():
            return
        time.sleep(1)
    raise ClusterError(f"{what} not ready after {timeout:.0f} s; see {log}")


def alive(pidfile: Path) -> int | None:
    """The pid in `pidfile` if that process still runs."""
    try:
        pid = int(pidfile.read_text().split()[0])
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError, IndexError):
        return None


# ---- install ---------------------------------------------------------------------------------

def write_ours(path: Path, text: str, mode: int = 0o644, owner: str | None = None) -> None:
    """Write a config file, refusing to replace one that someone else wrote."""
    if path.exists() and MARK not in path.read_text():
        raise ClusterError(f"{path} exists and was not written by this script; move it away to use a local cluster")
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(f"{MARK}\n{text}")
    tmp.chmod(mode)
    if owner:
        shutil.chown(tmp, owner, owner)
    tmp.replace(path)


def node_line() -> str:
    """This machine as SLURM sees it (`slurmd -C`: CPUs, sockets, cores, threads, RealMemory), named localhost."""
    out = sh(["slurmd", "-C"]).stdout.splitlines()[0]
    return re.sub(r"^NodeName=\S+", "NodeName=localhost NodeAddr=127.0.0.1", out) + " State=UNKNOWN"


def slurm_conf() -> str:
    # linuxproc / task none / no cgroups: works in a container; memory is a consumable resource, so a
    # job asking for more than the node has is refused at sbatch, as a cluster would refuse it
    return f"""ClusterName={CLUSTER}
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=slurm
AuthType=auth/munge
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
StateSaveLocation={STATE}/slurmctld
SlurmdSpoolDir={STATE}/slurmd
SlurmctldPidFile={STATE}/slurmctld/slurmctld.pid
SlurmdPidFile={STATE}/slurmd/slurmd.pid
SlurmctldLogFile={LOGS}/slurmctld.log
SlurmdLogFile={LOGS}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoreFlags=job_comment
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
{node_line()}
PartitionName={PARTITION} Nodes=localhost Default=YES MaxTime=INFINITE State=UP
"""


def slurmdbd_conf(password: str) -> str:
    return f"""AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
CommunicationParameters=NoInAddrAny
SlurmUser=slurm
LogFile={LOGS}/slurmdbd.log
PidFile={STATE}/slurmdbd/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={DB_PORT}
StorageUser=slurm
StoragePass={password}
StorageLoc=slurm_acct_db
"""


def install(args) -> None:
    log = LOGS / "install.log"
    t0 = time.monotonic()
    if not all(shutil.which(b) for b in ("slurmctld", "slurmd", "slurmdbd", "sbatch", "sacct", "munged", "mariadbd")):
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        sh(["apt-get", "update", "-q"], log, env=env)
        sh(["apt-get", "install", "-y", "-q", *PACKAGES], log, env=env)
    for d, owner in ((STATE / "slurmctld", "slurm"), (STATE / "slurmdbd", "slurm"), (STATE / "slurmd", "root"),
                     (DB, "mysql")):
        d.mkdir(parents=True, exist_ok=True)
        shutil.chown(d, owner, owner)
    for d in (HOME, LOGS, STATE):
        d.chmod(0o755)
    shutil.chown(LOGS, "slurm", "slurm")   # slurmctld and slurmdbd write their logs as slurm
    if not Path("/etc/munge/munge.key").exists():
        sh(["mungekey", "--create"], log)
        shutil.chown("/etc/munge/munge.key", "munge", "munge")
    ETC.mkdir(exist_ok=True)
    pw_file = STATE / "db.password"
    if not pw_file.exists():
        pw_file.write_text(secrets.token_hex(16))
        pw_file.chmod(0o600)
    write_ours(ETC / "slurm.conf", slurm_conf())
    write_ours(ETC / "slurmdbd.conf", slurmdbd_conf(pw_file.read_text()), mode=0o600, owner="slurm")
    if not (DB / "mysql").exists():
        sh(["mariadb-install-db", "--no-defaults", "--user=mysql", f"--datadir={DB}", "--skip-test-db"], log)
    print(f"installed in {time.monotonic() - t0:.1f} s: /etc/slurm/slurm.conf ({node_line()}), database in {DB}; "
          f"logs in {LOGS}")


# ---- start / stop ----------------------------------------------------------------------------

def daemon(name: str, cmd: list[str], pidfile: Path, log: Path, daemon_log: Path) -> bool:
    """Start a daemon (self-daemonising or left detached) unless its pid file names a live process."""
    if alive(pidfile):
        return False
    with log.open("a") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)

    def up() -> bool:
        if proc.poll():   # exited non-zero: a self-daemonising parent that failed, or a daemon that died
            raise ClusterError(f"{name} exited {proc.returncode} at start; see {daemon_log}")
        return alive(pidfile) is not None

    wait_for(f"{name} (pid file {pidfile})", up, daemon_log)
    return True


def mariadb(sql: str) -> None:
    sh(["mariadb", "--no-defaults", f"--socket={DB}/mysqld.sock", "-u", "root", "-e", sql], LOGS / "start.log")


def register_user(log: Path) -> None:
    """The cluster, an account, and the user in it as their default account, as a cluster's admin would set them up."""
    user = os.environ.get("SUDO_USER") or "root"

    def shown(*what: str) -> str:
        return sh(["sacctmgr", "-n", "-P", "show", *what]).stdout.strip()

    if not shown("cluster", CLUSTER, "format=cluster"):
        sh(["sacctmgr", "-i", "add", "cluster", CLUSTER], log)
    if not shown("account", ACCOUNT, "format=account"):
        sh(["sacctmgr", "-i", "add", "account", ACCOUNT, f"Cluster={CLUSTER}"], log)
    if not shown("assoc", f"user={user}", f"account={ACCOUNT}", "format=user"):
        sh(["sacctmgr", "-i", "add", "user", user, f"Account={ACCOUNT}", f"Cluster={CLUSTER}"], log)
    if shown("user", user, "format=defaultaccount") != ACCOUNT:
        sh(["sacctmgr", "-i", "modify", "user", user, "set", f"DefaultAccount={ACCOUNT}"], log)


def listening() -> list[tuple[str, str]]:
    """(daemon, address) of every TCP socket our daemons listen on (`ss -ltnp`)."""
    out = sh(["ss", "-H", "-ltnp"]).stdout
    return [(m.group(2), m.group(1)) for m in re.finditer(r"\s(\S+):\d+\s+\S+\s+users:\(\(\"(slurm\w*|mariadbd)\"", out)]


def node_state() -> str:
    proc = sh(["sinfo", "-h", "-N", "-n", "localhost", "-o", "%T"], check=False)
    return proc.stdout.strip() if proc.returncode == 0 else ""


def start(args) -> None:
    if not (ETC / "slurm.conf").exists() or MARK not in (ETC / "slurm.conf").read_text():
        raise ClusterError("no local cluster installed: run `local_slurm.py install` first")
    log = LOGS / "start.log"
    t0 = time.monotonic()
    Path("/run/munge").mkdir(exist_ok=True)
    shutil.chown("/run/munge", "munge", "munge")
    started = []
    if not alive(MUNGED_PID):
        sh(["runuser", "-u", "munge", "--", "munged"], log)
        (STATE / "munged.ours").touch()   # stop ends munged only if we started it: it may serve others
        started.append("munged")
    sh(["sh", "-c", "munge -n | unmunge"], log)   # the credential round trip every daemon relies on
    if daemon("mariadbd", ["runuser", "-u", "mysql", "--", "mariadbd", "--no-defaults", f"--datadir={DB}",
                           f"--socket={DB}/mysqld.sock", f"--port={DB_PORT}", "--bind-address=127.0.0.1",
                           "--skip-name-resolve", f"--pid-file={DB}/mariadbd.pid", f"--log-error={LOGS}/mariadb.log"],
              DB / "mariadbd.pid", log, LOGS / "mariadb.log"):
        started.append("mariadbd")
    wait_for("mariadbd", lambda: sh(["mariadb-admin", "--no-defaults", f"--socket={DB}/mysqld.sock", "-u", "root",
                                     "ping"], check=False).returncode == 0, LOGS / "mariadb.log")
    pw = (STATE / "db.password").read_text()
    mariadb(f"CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '{pw}'; "
            "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';")
    if daemon("slurmdbd", ["slurmdbd"], STATE / "slurmdbd" / "slurmdbd.pid", log, LOGS / "slurmdbd.log"):
        started.append("slurmdbd")
    wait_for("slurmdbd", lambda: sh(["sacctmgr", "-n", "show", "cluster"], check=False).returncode == 0,
             LOGS / "slurmdbd.log")
    register_user(log)
    if daemon("slurmctld", ["slurmctld"], STATE / "slurmctld" / "slurmctld.pid", log, LOGS / "slurmctld.log"):
        started.append("slurmctld")
    if daemon("slurmd", ["slurmd", "-N", "localhost"], STATE / "slurmd" / "slurmd.pid", log, LOGS / "slurmd.log"):
        started.append("slurmd")
    wait_for("node localhost idle in sinfo", lambda: node_state() in ("idle", "mixed", "allocated"), LOGS / "slurmd.log")
    exposed = [f"{name} on {addr}" for name, addr in listening() if not addr.startswith("127.")]
    if exposed:
        stop(args)
        raise ClusterError(f"stopped again: {', '.join(exposed)}, not on 127.0.0.1 only (slurmdbd and srun bind to "
                           "the address the hostname resolves to; make it resolve to 127.0.0.1 in /etc/hosts)")
    print(f"started {', '.join(started) or 'nothing (all running)'} in {time.monotonic() - t0:.1f} s; "
          f"node localhost {node_state()}")


def stop(args) -> None:
    """Stop our daemons, newest first; munged only if `start` started it."""
    stopped = []
    ours = STATE / "munged.ours"
    for name, pidfile in (("slurmd", STATE / "slurmd" / "slurmd.pid"),
                          ("slurmctld", STATE / "slurmctld" / "slurmctld.pid"),
                          ("slurmdbd", STATE / "slurmdbd" / "slurmdbd.pid"), ("mariadbd", DB / "mariadbd.pid"),
                          ("munged", MUNGED_PID)):
        pid = alive(pidfile)
        if pid is None or (name == "munged" and not ours.exists()):
            continue
        os.kill(pid, signal.SIGTERM)
        end = time.monotonic() + 60
        while time.monotonic() < end:
            try:
                os.kill(pid, 0)
            except OSError:
                break
            time.sleep(0.5)
        else:
            raise ClusterError(f"{name} (pid {pid}) still running 60 s after SIGTERM")
        stopped.append(name)
    ours.unlink(missing_ok=True)
    print(f"stopped {', '.join(stopped) or 'nothing (none running)'}")


# ---- run -------------------------------------------------------------------------------------

def copy_repository(dest: Path) -> None:
    """The repository's tracked files as they are in the working tree, plus the compiled kernels."""
    files = sh(["git", "-C", str(ROOT), "ls-files", "-z"]).stdout.split("\0")
    for rel in filter(None, files):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    for so in ROOT.glob("lumos/_kernels*.so"):
        shutil.copy2(so, dest / "lumos" / so.name)


def snakemake(copy: Path, args: list[str], log: Path) -> tuple[float, int]:
    """Run the tiny profile in `copy`; wall seconds and the number of jobs it ran."""
    env = dict(os.environ, PYTHONPATH=str(copy))
    env.pop("LUMOS_CONFIG_DIR", None)
    t0 = time.monotonic()
    sh([sys.executable, "-m", "snakemake", *args, "--configfile", TINY], log, cwd=copy, env=env)
    wall = time.monotonic() - t0
    done = re.findall(r"(\d+) of (\d+) steps \(100%\) done", log.read_text())
    if not done:
        raise ClusterError(f"snakemake in {copy} did not report all steps done; see {log}")
    return wall, int(done[-1][1])


SACCT_FIELDS = ["JobID", "JobName", "Partition", "Account", "State", "ExitCode", "Elapsed", "SubmitLine", "Comment"]


def sacct_jobs(since: str, log: Path) -> list[dict]:
    """Allocations (no steps) submitted since `since`, as sacct reports them."""
    out = sh(["sacct", "-X", "-n", "-P", "-a", "--starttime", since, "-o", ",".join(SACCT_FIELDS)]).stdout
    rows = [dict(zip(SACCT_FIELDS, line.split("|", len(SACCT_FIELDS) - 1))) for line in out.splitlines() if line]
    log.write_text("\t".join(SACCT_FIELDS) + "\n" + "".join("\t".join(r.values()) + "\n" for r in rows))
    return rows


def seconds(elapsed: str) -> int:
    """sacct's Elapsed ([D-]HH:MM:SS) in seconds."""
    days, _, hms = elapsed.rpartition("-")
    h, m, s = (int(x) for x in hms.split(":"))
    return int(days or 0) * 86400 + h * 3600 + m * 60 + s


def compare_tables(local: Path, slurm: Path) -> dict[str, list[str] | None]:
    """Each table of the local run against the SLURM run's: None where byte-identical, else the columns
    whose values differ ([] where only the writing differs, e.g. 0.0 vs 0.00)."""
    import pandas as pd

    names = sorted(p.name for p in (local / TABLES).glob("*.csv"))
    other = sorted(p.name for p in (slurm / TABLES).glob("*.csv"))
    if names != other:
        raise ClusterError(f"table sets differ: only local {sorted(set(names) - set(other))}, "
                           f"only SLURM {sorted(set(other) - set(names))}")
    diffs: dict[str, list[str] | None] = {}
    for name in names:
        a, b = local / TABLES / name, slurm / TABLES / name
        if a.read_bytes() == b.read_bytes():
            diffs[name] = None
            continue
        da, db = pd.read_csv(a), pd.read_csv(b)
        if list(da.columns) != list(db.columns) or len(da) != len(db):
            diffs[name] = [f"shape {da.shape} vs {db.shape}"]
            continue
        diffs[name] = [c for c in da.columns if not da[c].equals(db[c])]
    return diffs


def run(args) -> None:
    import importlib.util

    if importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
        raise ClusterError("the SLURM executor plugin is not installed: pip install -e '.[slurm]'")
    if node_state() not in ("idle", "mixed"):
        raise ClusterError("the local cluster is not up (sinfo shows no idle node): run `local_slurm.py start`")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = RUNS / stamp
    report: dict = {"runs": str(base)}
    for kind in ("slurm", "local"):
        copy = base / kind
        copy.mkdir(parents=True)
        copy_repository(copy)
    since = time.strftime("%Y-%m-%dT%H:%M:%S")
    # no account or partition given: the local cluster's default partition and the user's default account
    # serve, as on many clusters (where they do not, see the profile's comment)
    wall, jobs = snakemake(base / "slurm", ["--workflow-profile", "workflow/profiles/slurm"],
                           LOGS / f"run-{stamp}-slurm.log")
    report["slurm"] = {"wall_s": round(wall, 1), "jobs": jobs}
    print(f"SLURM: {jobs} jobs in {wall:.0f} s")
    rows = sacct_jobs(since, LOGS / f"sacct-{stamp}.tsv")
    submitted = set(re.findall(r"SLURM jobid (\d+)", (LOGS / f"run-{stamp}-slurm.log").read_text()))
    report["sacct"] = {
        "allocations": len(rows),
        "states": {s: sum(r["State"] == s for r in rows) for s in sorted({r["State"] for r in rows})},
        "by_sbatch": sum(r["SubmitLine"].startswith("sbatch ") for r in rows),
        "elapsed_s_sum": sum(seconds(r["Elapsed"]) for r in rows),
        "elapsed_s_max": max((seconds(r["Elapsed"]) for r in rows), default=0),
        "submitted_in_log": len(submitted),
        "partitions": sorted({r["Partition"] for r in rows}), "accounts": sorted({r["Account"] for r in rows}),
    }
    wall, local_jobs = snakemake(base / "local", ["--cores", "2"], LOGS / f"run-{stamp}-local.log")
    report["local"] = {"wall_s": round(wall, 1), "jobs": local_jobs}
    print(f"local: {local_jobs} jobs in {wall:.0f} s")
    diffs = compare_tables(base / "local", base / "slurm")
    report["tables"] = {"byte_identical": [n for n, d in diffs.items() if d is None],
                        "equal_values": [n for n, d in diffs.items() if d == []],
                        "differ": {n: d for n, d in diffs.items() if d}}
    (LOGS / f"run-{stamp}.json").write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))
    problems = []
    ids = {r["JobID"] for r in rows}
    if ids != submitted:
        problems.append(f"sacct allocations {sorted(ids - submitted)} not in the log, "
                        f"submitted {sorted(submitted - ids)} missing from sacct")
    if len(rows) + 1 != jobs:   # the target rule `all` runs in the submitting process
        problems.append(f"{len(rows)} allocations for {jobs} jobs")
    if report["sacct"]["states"] != {"COMPLETED": len(rows)}:
        problems.append(f"not every allocation COMPLETED: {report['sacct']['states']}")
    if report["sacct"]["by_sbatch"] != len(rows):
        problems.append("not every allocation was submitted with sbatch")
    if jobs != local_jobs:
        problems.append(f"{jobs} jobs through SLURM, {local_jobs} locally")
    if report["tables"]["differ"]:
        problems.append(f"tables differ: {report['tables']['differ']}")
    if problems:
        raise ClusterError("; ".join(problems) + f" (logs in {LOGS})")
    same = report["tables"]["equal_values"]
    print(f"OK: the tiny profile ran through SLURM, {len(rows)} sbatch allocations all COMPLETED, "
          f"{len(report['tables']['byte_identical'])} of {len(diffs)} tables byte-identical to the local run's"
          + (f", {', '.join(same)} equal in value" if same else ""))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="step", required=True)
    for name in ("install", "start", "run", "stop"):
        sub.add_parser(name)
    args = p.parse_args(argv)
    if os.geteuid() != 0:
        print("local_slurm.py: must run as root (it installs packages and starts daemons)", file=sys.stderr)
        return 2
    LOGS.mkdir(parents=True, exist_ok=True)
    try:
        {"install": install, "start": start, "stop": stop, "run": run}[args.step](args)
    except ClusterError as e:
        print(f"local_slurm.py {args.step}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
