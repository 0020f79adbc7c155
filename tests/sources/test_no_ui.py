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
        "import provetop.sources.client, provetop.sources.live, provetop.sources.replay\n"
        "import provetop.sources.cuzk\n"
        "import provetop.sources.cuzk.source, provetop.sources.feed, provetop.sources.synthetic\n"
        "c = provetop.sources.client\n"
        "assert c.__file__.startswith(sys.argv[1]), c.__file__\n"
        "bad = ('textual', 'cupy', 'provetop.tui', 'provetop.engine', 'provetop.kernels')\n"
        "bare = ('tui', 'engine', 'kernels', 'sources', 'recordings')\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in bare\n"
        "                or any(m == b or m.startswith(b + '.') for b in bad))\n"
        "print(' '.join(loaded))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(ROOT)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ""
