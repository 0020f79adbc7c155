"""The README's quick start and its screenshot are one command: ``tools/screenshot.py`` runs
:data:`QUICK_START` and names it in the SVG, and the README's first code block runs the same."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _quick_start() -> tuple[str, ...]:
    text = (ROOT / "tools" / "screenshot.py").read_text()
    found = re.search(r"^QUICK_START = \(([^)]*)\)", text, re.M)
    assert found, "tools/screenshot.py names no QUICK_START"
    return tuple(re.findall(r'"([^"]+)"', found[1]))


def test_the_readme_quick_start_is_the_screenshots_command():
    command = " ".join(_quick_start())
    readme = (ROOT / "README.md").read_text()
    first_block = re.search(r"```sh\n(.*?)```", readme, re.S)
    assert first_block and command in first_block[1].splitlines()


def test_the_screenshot_was_made_from_that_command():
    command = " ".join(_quick_start())
    svg = (ROOT / "docs" / "screenshot.svg").read_text()
    assert f"<!-- {command} -->" in svg[:2000]
