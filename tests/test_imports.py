"""Imports of our own modules stand at the top of each module, where the import graph (and
``lint-imports``, which CI runs with the contracts in pyproject.toml) can see them."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("engine", "kernels", "provetop", "recordings", "sources", "tui")


def _own_imports_inside_functions(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    found = []
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            if any(n.split(".")[0] in PACKAGES for n in names):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_imports_our_modules_inside_a_function():
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found += _own_imports_inside_functions(path)
    assert found == []


def test_the_check_finds_an_import_inside_a_function(tmp_path):
    sample = tmp_path / "m.py"
    sample.write_text(
        "def f():\n    from provetop.engine.run.runner import Engine\n    return Engine\n"
    )
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert _own_imports_inside_functions(sample) == [
            "m.py:2: from provetop.engine.run.runner import Engine"
        ]
    finally:
        ROOT = saved
