"""Without torch, lumos.capture imports and `lumos capture` fails with one line; the core never imports torch."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import lumos

PKG = Path(lumos.__file__).parent


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_capture_without_torch_is_a_one_line_error(tmp_path):
    code = f"""
import sys
sys.modules["torch"] = None  # as if torch were not installed
import lumos.capture, lumos.capture.gpt, lumos.capture.profile, lumos.commands.capture
from lumos.cli import main
rc = main(["capture", "gpt", "--out", {str(tmp_path)!r}])
sys.exit(10 + rc)
"""
    res = _run(code)
    assert res.returncode == 12, res.stderr
    assert res.stderr.strip() == "lumos capture: error: lumos capture needs torch: pip install 'lumos[capture]'"


def test_building_the_cli_does_not_import_torch():
    res = _run("import sys, lumos.cli; lumos.cli.build_parser('capture'); "
               "import lumos.capture.gpt, lumos.capture.profile; "
               "sys.exit(int('torch' in sys.modules))")
    assert res.returncode == 0, res.stderr


def _module_level_imports(tree: ast.Module):
    """Import statements executed at import time (not inside a def)."""
    out, stack = [], list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.append(node.module)
        stack.extend(ast.iter_child_nodes(node))
    return out


def test_torch_is_imported_only_lazily_and_only_by_capture():
    for path in PKG.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        in_capture = path.parent.name == "capture" and path.parent.parent == PKG
        if in_capture:
            top = _module_level_imports(tree)
            assert not [m for m in top if m.split(".")[0] == "torch"], path
        else:
            mods = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
            mods += [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
            assert not [m for m in mods if m.split(".")[0] == "torch"], f"{path} imports torch"
