"""The sources load without the UI or the GPU: an exporter or a script reads an engine with
neither Textual nor CuPy in the process (lint-imports checks the imports as written; this
checks what actually gets loaded, indirect imports included)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_sources_load_neither_textual_nor_cupy():
    script = (
        "import sys\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "import sources.client, sources.live, sources.replay, sources.cuzk\n"
        "import sources.cuzk.source, sources.feed, sources.synthetic\n"
        "assert sources.client.__file__.startswith(sys.argv[1]), sources.client.__file__\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('textual', 'cupy', 'tui', 'engine', 'kernels'))\n"
        "print(' '.join(loaded))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(ROOT)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ""
