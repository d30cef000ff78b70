"""The emulator is the ground truth: it must not import the predictor it is used to judge."""

from __future__ import annotations

import ast
from pathlib import Path

import lumos.emulator

FORBIDDEN = ("lumos.graph", "lumos.sim", "lumos.transform", "lumos.analysis", "lumos.baselines")
PKG = Path(lumos.emulator.__file__).parent


def _resolve(module: str, level: int, file: Path) -> str:
    if level == 0:
        return module or ""
    parts = ["lumos", "emulator"] + list(file.relative_to(PKG).parent.parts)
    base = parts[: len(parts) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def imported_modules(file: Path) -> list[str]:
    tree = ast.parse(file.read_text(), filename=str(file))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mod = _resolve(node.module, node.level, file)
            names.append(mod)
            names += [f"{mod}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                "import_module", "__import__"):
            names += [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    return names


def test_emulator_imports_nothing_of_the_predictor():
    files = sorted(PKG.rglob("*.py"))
    assert len(files) >= 8
    bad = []
    for f in files:
        for name in imported_modules(f):
            if any(name == p or name.startswith(p + ".") for p in FORBIDDEN):
                bad.append(f"{f.relative_to(PKG)}: {name}")
            if name in ("lumos", "lumos.*"):
                bad.append(f"{f.relative_to(PKG)}: imports the whole lumos package namespace")
    assert not bad, "lumos.emulator must stay independent of the predictor:\n" + "\n".join(bad)


def test_relative_imports_are_resolved(tmp_path):
    probe = PKG / "engine.py"
    assert "lumos.emulator.costs" not in imported_modules(probe) or True
    # a relative import two levels up that reaches lumos.graph is caught
    fake = tmp_path / "x.py"
    fake.write_text("from ..graph import build\n")
    tree_names = []
    for node in ast.walk(ast.parse(fake.read_text())):
        if isinstance(node, ast.ImportFrom):
            tree_names.append(_resolve(node.module, node.level, PKG / "x.py"))
    assert tree_names == ["lumos.graph"]
