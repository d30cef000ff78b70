"""No import circle between modules of `lumos`, counting imports inside functions too.

import-linter's layers contract (tests/test_layers.py) orders the packages; it does not see two
modules of one package that import each other, least of all when one of them does it inside a
function to dodge the circle at import time (as `model/recover.py` and
`model/module_calls.py` once did). This test reads every `import` in the package with `ast`,
wherever it stands, and looks for a cycle among the modules. A package's `__init__` is left out:
re-exporting its submodules' names, which then import the package for a sibling's name, is the
facade every package here has, not a circle between modules.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent / "lumos"


def import_graph(root: Path) -> nx.DiGraph:
    """Module -> module it imports (any import statement, at any depth), `__init__` modules left out."""
    files = {}
    for f in root.rglob("*.py"):
        parts = list(f.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] != "__init__":
            files[".".join(parts)] = f
    packages = {".".join(p.relative_to(root.parent).parts) for p in [root, *root.rglob("*")] if p.is_dir()}
    g = nx.DiGraph()
    for mod, f in files.items():
        g.add_node(mod)
        here = mod.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(f.read_text(), filename=str(f))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = here.split(".")[:len(here.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([node.module] if node.module else []))
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for t in targets:
                if t in files and t != mod and t not in packages:
                    g.add_edge(mod, t)
    return g


def cycles(root: Path) -> list[list[str]]:
    return sorted(sorted(c) for c in nx.simple_cycles(import_graph(root)))


def test_no_module_imports_itself_through_others():
    assert cycles(ROOT) == []


def test_the_check_sees_a_circle_through_a_function_level_import(tmp_path):
    pkg = tmp_path / "lumos"
    (pkg / "transform").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "transform" / "__init__.py").write_text("from .a import f\n")
    (pkg / "transform" / "a.py").write_text("from .b import g\n\ndef f():\n    return g()\n")
    (pkg / "transform" / "b.py").write_text("def g():\n    from .a import f   # late, to dodge the circle\n    return f\n")
    assert cycles(pkg) == [["lumos.transform.a", "lumos.transform.b"]]
    # the layer finders of today, as a check that real module names resolve
    g = import_graph(ROOT)
    assert g.has_edge("lumos.model.recover", "lumos.model.module_calls")
    assert g.has_edge("lumos.model.module_calls", "lumos.model.layer_ranges")
    assert not g.has_edge("lumos.model.module_calls", "lumos.model.recover")
