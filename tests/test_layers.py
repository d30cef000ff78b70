"""The layering of `lumos` is import-linter's to check; these tests run it and show it can fail.

The contracts live in pyproject.toml (`[tool.importlinter]`). One test runs them on this
checkout; the others plant one forbidden import in a copy of the package and check that the
contract meant to catch it, and only that one, reports it: a contract that names a module
wrongly, or one an exception has hollowed out, would pass the first test and fail these.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from importlinter.api import read_configuration

import lumos.cli

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "pyproject.toml"
CONTRACTS = {c["id"]: c for c in read_configuration(str(CONFIG))["contracts_options"]}
PREDICTOR = ("lumos.graph", "lumos.sim", "lumos.transform", "lumos.analysis", "lumos.baselines")

# `lint-imports` in this interpreter; click reads the arguments after `-c`.
LINT = "from importlinter.cli import lint_imports_command; lint_imports_command()"


def lint_imports(root: Path) -> tuple[int, str]:
    """Exit status and report of lint-imports on the `lumos` package under `root`, with our contracts."""
    env = dict(os.environ, PYTHONPATH=str(root), COLUMNS="1000")  # one contract per line
    res = subprocess.run([sys.executable, "-c", LINT, str(CONFIG), "--no-cache", "--no-logo"],
                         cwd=root, env=env, capture_output=True, text=True, timeout=300)
    return res.returncode, res.stdout + res.stderr


def verdicts(report: str) -> dict[str, str]:
    """Contract id -> KEPT or BROKEN, from the report's summary lines."""
    out = {}
    for cid, c in CONTRACTS.items():
        m = re.search(rf"^{re.escape(c['name'])} (KEPT|BROKEN)$", report, flags=re.M)
        out[cid] = m.group(1) if m else "missing"
    return out


def test_every_contract_is_kept():
    rc, report = lint_imports(ROOT)
    assert rc == 0, report
    assert set(verdicts(report).values()) == {"KEPT"}, report
    # ... and it was this checkout's package that was checked (an editable install may point elsewhere)
    where = subprocess.run([sys.executable, "-c", "import lumos; print(lumos.__file__)"], cwd=ROOT,
                           env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True)
    assert Path(where.stdout.strip()).resolve() == ROOT / "lumos" / "__init__.py"


def test_the_contracts_say_what_the_architecture_promises():
    layers = [set(layer.replace(" ", "").split("|")) for layer in CONTRACTS["layers"]["layers"]]
    order = ["lumos.cli", "lumos.commands", "lumos.report", "lumos.analysis", "lumos.transform",
             "lumos.sim", "lumos.graph", "lumos.trace"]
    index = [next(i for i, layer in enumerate(layers) if name in layer) for name in order]
    assert index == sorted(index) and len(set(index)) == len(index), layers
    assert {"lumos.transform", "lumos.baselines"} in layers      # siblings: neither imports the other
    emulator = CONTRACTS["emulator"]
    assert emulator["type"] == "forbidden" and emulator["source_modules"] == ["lumos.emulator"]
    assert set(PREDICTOR) <= set(emulator["forbidden_modules"])
    assert not [cid for cid, c in CONTRACTS.items() if c.get("ignore_imports")], "no contract has exceptions"


# contract id -> (module of the copy, line appended to it, what the report must name)
PLANTED = {
    "layers": ("graph/model.py", "from lumos.analysis import breakdown", "lumos.graph.model -> lumos.analysis"),
    "emulator": ("emulator/engine.py", "from ..graph.model import Graph",  # relative imports are resolved
                 "lumos.emulator.engine -> lumos.graph.model"),
    "predictor": ("analysis/breakdown.py", "import lumos.emulator.costs",
                  "lumos.analysis.breakdown -> lumos.emulator.costs"),
    "capture": ("capture/profile.py", "from lumos.sim import simulate", "lumos.capture.profile -> lumos.sim"),
}


@pytest.mark.parametrize("contract", sorted(PLANTED))
def test_a_forbidden_import_breaks_its_contract(tmp_path, contract):
    module, line, named = PLANTED[contract]
    shutil.copytree(ROOT / "lumos", tmp_path / "lumos", ignore=shutil.ignore_patterns("__pycache__"))
    with open(tmp_path / "lumos" / module, "a") as f:
        f.write(f"\n{line}\n")
    rc, report = lint_imports(tmp_path)
    assert rc != 0, report
    expected = {cid: "BROKEN" if cid == contract else "KEPT" for cid in CONTRACTS}
    assert verdicts(report) == expected, report
    assert named in report, report


def test_import_linter_sees_every_import():
    """import-linter reads import statements; a dynamic import would slip past it. Only the CLI
    imports by name, and only subcommand modules, which all live in lumos.commands."""
    dynamic = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "lumos").rglob("*.py")
                     if re.search(r"\bimport_module\(|__import__\(", p.read_text(encoding="utf-8")))
    assert dynamic == ["lumos/cli.py"]
    assert all(module.startswith("lumos.commands.") for module, _ in lumos.cli.COMMANDS.values())


# Modules small enough to read; one over it is split by what its parts do.
MAX_MODULE_LINES = 600


def test_no_module_of_the_package_is_over_600_lines():
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in (ROOT / "lumos").rglob("*.py")}
    assert len(sizes) > 100 and max(sizes.values()) > 400   # the walk found the package, large modules included
    over = {p: n for p, n in sizes.items() if n > MAX_MODULE_LINES}
    assert not over, f"modules over {MAX_MODULE_LINES} lines: {over}"
