"""The product's shape rules (docs/architecture.md, "Sizes"): no product file over 1,000 lines,
no function in engine/ over 80 lines. Why a test: both limits are what keeps a file findable
and a function readable, and both grow one line at a time."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("engine", "kernels", "recordings", "sources", "tui", "provetop")
MAX_FILE_LINES = 1000
MAX_ENGINE_FUNCTION_LINES = 80
# Exceptions, each with its reason in docs/architecture.md ("Sizes"); none today.
EXCEPTIONS: dict[str, str] = {}


def _product_files() -> list[Path]:
    return sorted(p for package in PRODUCT for p in (ROOT / package).rglob("*.py"))


def test_no_product_file_over_the_limit() -> None:
    long = []
    for path in _product_files():
        lines = path.read_text().count("\n")
        name = str(path.relative_to(ROOT))
        if lines > MAX_FILE_LINES and name not in EXCEPTIONS:
            long.append(f"{name}: {lines} lines")
    assert long == []


def test_no_engine_function_over_the_limit() -> None:
    long = []
    for path in sorted((ROOT / "engine").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                length = node.end_lineno - node.lineno + 1
                name = f"{path.relative_to(ROOT)}:{node.name}"
                if length > MAX_ENGINE_FUNCTION_LINES and name not in EXCEPTIONS:
                    long.append(f"{name}: {length} lines")
    assert long == []


def test_the_rule_sees_a_long_function(tmp_path: Path) -> None:
    """The scan counts a function's whole body, decorators' lines aside."""
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_ENGINE_FUNCTION_LINES))
    tree = ast.parse(f"def f():\n{body}\n")
    node = tree.body[0]
    assert isinstance(node, ast.FunctionDef) and node.end_lineno is not None
    assert node.end_lineno - node.lineno + 1 == MAX_ENGINE_FUNCTION_LINES + 1
