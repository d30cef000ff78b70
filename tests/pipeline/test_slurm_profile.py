"""The SLURM profile and the local-cluster check that runs it (workflow/scripts/local_slurm.py).

The check itself (the tiny profile through a one-node SLURM, about 10 minutes on 2 cores) is run
by hand: `local_slurm.py install && local_slurm.py start && local_slurm.py run` (docs/pipeline.md,
"SLURM"). What is tested here needs no scheduler: that the profile's per-rule resources name rules
the workflow has (a renamed rule would silently fall back to the defaults on a cluster), and the
pieces of the check that decide its verdict.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import local_slurm  # workflow/scripts/, on the path by pyproject.toml's pytest pythonpath
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "workflow" / "profiles" / "slurm" / "config.yaml"


def test_profile_resources_name_rules_of_the_workflow():
    profile = yaml.safe_load(PROFILE.read_text())
    assert profile["executor"] == "slurm"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("LUMOS_CONFIG_DIR", None)
    out = subprocess.run([sys.executable, "-m", "snakemake", "--list-rules", "--configfile", "config/profile/tiny.yaml"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=True).stdout
    rules = set(out.split())
    assert {"emulate", "replay_real", "collect", "table", "figure"} <= rules
    assert set(profile["set-resources"]) <= rules, set(profile["set-resources"]) - rules
    # every job asks for a time and memory limit, and no default asks for more than one small node has
    assert {"mem_mb", "runtime", "cpus_per_task"} <= set(profile["default-resources"])
    assert max(r["mem_mb"] for r in profile["set-resources"].values()) <= 8000


def write_tables(root: Path, tables: dict[str, str]) -> Path:
    d = root / local_slurm.TABLES
    d.mkdir(parents=True)
    for name, text in tables.items():
        (d / name).write_text(text)
    return root


def test_tables_compare_byte_for_byte_then_name_the_columns_that_differ(tmp_path):
    same = "trace,error_pct,wall_s\ndlrm_rank0,0.0,1.25\n"
    local = write_tables(tmp_path / "local", {"a.csv": same, "b.csv": same})
    slurm = write_tables(tmp_path / "slurm", {"a.csv": same, "b.csv": same.replace("1.25", "1.5")})
    assert local_slurm.compare_tables(local, slurm) == {"a.csv": None, "b.csv": ["wall_s"]}
    # the same values written differently are not the same bytes but are the same table
    (slurm / local_slurm.TABLES / "b.csv").write_text(same.replace("0.0", "0.00"))
    assert local_slurm.compare_tables(local, slurm)["b.csv"] == []
    (slurm / local_slurm.TABLES / "b.csv").unlink()
    with pytest.raises(local_slurm.ClusterError, match=r"only local \['b.csv'\]"):
        local_slurm.compare_tables(local, slurm)


def test_sacct_elapsed_reads_days():
    assert local_slurm.seconds("00:00:16") == 16
    assert local_slurm.seconds("1-02:03:04") == 86400 + 2 * 3600 + 3 * 60 + 4


def test_listening_finds_a_daemon_on_every_address(monkeypatch):
    ss = ("LISTEN 0 4096 127.0.0.1:6817 0.0.0.0:* users:((\"slurmctld\",pid=8722,fd=3))\n"
          "LISTEN 0 4096 0.0.0.0:6819 0.0.0.0:* users:((\"slurmdbd\",pid=8687,fd=6))\n"
          "LISTEN 0 80 127.0.0.1:3307 0.0.0.0:* users:((\"mariadbd\",pid=8664,fd=23))\n"
          "LISTEN 0 128 0.0.0.0:22 0.0.0.0:* users:((\"sshd\",pid=1,fd=3))\n")
    monkeypatch.setattr(local_slurm, "sh", lambda cmd, *a, **k: subprocess.CompletedProcess(cmd, 0, ss, ""))
    assert local_slurm.listening() == [("slurmctld", "127.0.0.1"), ("slurmdbd", "0.0.0.0"), ("mariadbd", "127.0.0.1")]
