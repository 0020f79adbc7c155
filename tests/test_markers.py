"""A test that runs the real nvcc says so with the ``nvcc`` marker (it then runs only when
asked for: tests/conftest.py), and a GPU test says so with ``gpu``: a plain test run on a
laptop with the CUDA toolkit installed compiles nothing."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _marks(fn: ast.FunctionDef) -> set[str]:
    names = set()
    for dec in fn.decorator_list:
        node = dec.func if isinstance(dec, ast.Call) else dec
        if isinstance(node, ast.Attribute):
            names.add(node.attr)
    return names


def _runs_real_nvcc(fn: ast.FunctionDef) -> bool:
    """The test looks nvcc up on PATH (``shutil.which("nvcc")``): it means to run it."""
    for node in ast.walk(fn):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "which"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value == "nvcc"
        ):
            return True
    return False


def unmarked_nvcc_tests(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("test_*.py")):
        tree = ast.parse(path.read_text())
        for fn in tree.body:
            if not isinstance(fn, ast.FunctionDef) or not fn.name.startswith("test_"):
                continue
            if _runs_real_nvcc(fn) and not _marks(fn) & {"nvcc", "gpu"}:
                found.append(f"{path.relative_to(root)}::{fn.name}")
    return found


def test_every_test_that_runs_nvcc_is_marked():
    assert unmarked_nvcc_tests(ROOT / "tests") == []


def test_the_check_finds_an_unmarked_one(tmp_path):
    (tmp_path / "test_x.py").write_text(
        "import shutil\n\ndef test_compiles():\n    assert shutil.which('nvcc')\n"
    )
    assert unmarked_nvcc_tests(tmp_path) == ["test_x.py::test_compiles"]
