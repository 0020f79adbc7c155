"""``provetop --help`` and every ``provetop COMMAND --help`` answer without importing what a
command runs: the heavy modules are what made help take seconds on a loaded machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from provetop.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[2]

# what a command imports when it runs; none of it may be needed to describe the flags
HEAVY = ("textual", "numpy", "cupy", "gmpy2", "msgpack", "prometheus_client", "pynvml")
OURS = ("provetop.tui", "provetop.kernels", "provetop.sources", "provetop.recordings")

_PROBE = """
import contextlib, io, json, sys
from provetop.cli import COMMANDS, main
seen = {}
for argv in [["--help"]] + [[name, "--help"] for name in COMMANDS]:
    with contextlib.redirect_stdout(io.StringIO()) as out:
        try:
            main(argv)
        except SystemExit:
            pass
    seen[" ".join(argv)] = out.getvalue()
print(json.dumps({"modules": sorted(sys.modules), "help": seen}))
"""


def _probe() -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout)


def test_help_of_every_command_imports_nothing_a_command_runs():
    probe = _probe()
    modules = probe["modules"]
    loaded = [m for m in modules if m.split(".")[0] in HEAVY]
    loaded += [m for m in modules if m.startswith(OURS) or m.startswith("provetop.engine.")
               and m != "provetop.engine.run.flags" and m != "provetop.engine.run"]  # fmt: skip
    commands = [m for m in modules if m.startswith("provetop.commands.")]
    assert loaded == []
    assert all(m.startswith("provetop.commands.flags") for m in commands), commands
    helps = probe["help"]
    assert set(helps) == {"--help", *(f"{name} --help" for name in COMMANDS)}
    assert all(text.startswith("usage: provetop") for text in helps.values())


def test_help_speaks_to_users_and_each_command_opens_with_its_line():
    helps = _probe()["help"]
    top = helps["--help"]
    assert "``" not in top and "importlib" not in top and "subcommand" not in top
    assert "provetop run --preset demo" in " ".join(top.split())
    for name, line in COMMANDS.items():
        if name in ("trace", "import-cuzk"):  # their own longer description
            continue
        assert " ".join(line.split()) in " ".join(helps[f"{name} --help"].split()), name
