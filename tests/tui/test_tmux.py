"""The dashboard in a real terminal: tmux runs ``python -m provetop run`` on the cpu backend,
we wait for partitions to show, press keys (help, a forced fallback, zoom), read the screen
with capture-pane, and quit; the process must exit 0 and leave the terminal usable. Then
``provetop top`` (NVML replaced by the tests' recorded-style fake) and the README's replay at
a fault, at 80x24 and 160x48. Every session runs on this module's own tmux server (``-L``),
never the user's default one, and that server is ended at the end."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
SOCKET = os.environ.get("PROVETOP_TMUX_SOCKET", f"provetop-tests-{os.getpid()}")
NAIVE16 = ROOT / "recordings" / "samples" / "h200-porep32g-naive16.pvtrec"
FAKE_TOP = (  # provetop top with the tests' recorded-style NVML (not a card)
    "import sys; from tests.sources.fake_pynvml import FakeNvml; "
    "sys.modules['pynvml'] = FakeNvml(); from provetop.cli import main; "
    "sys.exit(main(['top', '--interval', '0.5']))"
)


@pytest.fixture(autouse=True, scope="module")
def _own_server():
    yield
    subprocess.run(["tmux", "-L", SOCKET, "kill-server"], capture_output=True, timeout=10)


def _tmux(*args: str) -> str:
    return subprocess.run(
        ["tmux", "-L", SOCKET, *args], check=True, capture_output=True, text=True, timeout=10
    ).stdout


def _screen(session: str) -> str:
    return _tmux("capture-pane", "-p", "-t", session)


def _wait_for(session: str, predicate, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    screen = ""
    while time.monotonic() < deadline:
        screen = _screen(session)
        if predicate(screen):
            return screen
        time.sleep(0.3)
    raise AssertionError(f"timed out; the screen was:\n{screen}")


def test_provetop_run_in_a_real_terminal(tmp_path):
    session = f"pt-{uuid.uuid4().hex[:8]}"
    status = tmp_path / "status"
    record = tmp_path / "run.pvtrec"
    command = (
        # the ci preset's 2^5 partitions: the engine at its highest event rate. It runs in its
        # own process (provetop run starts a child), so it cannot starve the dashboard's key
        # handling of the GIL; in one process this froze the screen on a loaded 2-core machine.
        f"cd {ROOT} && {sys.executable} -m provetop run --backend cpu --preset ci "
        f"--proofs 100000 --record {record} --save-dir {tmp_path}; "
        f"echo $? > {status}"
    )
    env = {**os.environ, "TERM": "xterm-256color"}
    subprocess.run(
        [
            "tmux",
            "-L",
            SOCKET,
            "new-session",
            "-d",
            "-s",
            session,
            "-x",
            "120",
            "-y",
            "36",
            command,
        ],
        check=True,
        env=env,
        timeout=10,
    )
    try:
        # partitions arrive: the header counts them and the table lists them. The header's
        # repaint can land a frame after the table's (seen: ~0.2 s on a loaded 2-core machine),
        # so the wait is for both, not for the table alone.
        screen = _wait_for(
            session, lambda s: "partitions" in s and " ok " in s and "[connected]" in s
        )
        assert "provetop" in screen and "[connected]" in screen
        assert "gpu0 w0" in screen and "gpu0 GPU" in screen
        assert "modeled" in screen
        # the help screen opens and closes
        _tmux("send-keys", "-t", session, "?")
        _wait_for(session, lambda s: "provetop keys" in s)
        _tmux("send-keys", "-t", session, "Escape")
        _wait_for(session, lambda s: "provetop keys" not in s)
        # a forced fallback, acknowledged by the engine and shown on later partitions (the
        # event log's line; the table's pre-stage column is narrow at 120 columns)
        _tmux("send-keys", "-t", session, "F")
        _wait_for(session, lambda s: "forced" in s and "fallback" in s, timeout=30)
        # zoom in: the detail row names the new, narrower window
        before = re.search(r"window ([0-9.]+ m?s)", _screen(session)).group(1)
        _tmux("send-keys", "-t", session, "+")
        _wait_for(session, lambda s: f"window {before}" not in s and "window " in s)
        _tmux("send-keys", "-t", session, "q")
        deadline = time.monotonic() + 60
        while not status.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert status.exists(), f"provetop run did not exit; screen:\n{_screen(session)}"
        assert status.read_text().strip() == "0"
        # the engine closed its recording cleanly on the way out
        from provetop.recordings.reader import open_recording

        rec = open_recording(record)
        assert rec.complete and not rec.truncated
        assert any(e["k"] == "control" and e["cmd"] == "force_fallback" for e in rec.events)
    finally:
        subprocess.run(
            ["tmux", "-L", SOCKET, "kill-session", "-t", session], capture_output=True, timeout=10
        )


def test_run_resized_both_ways_then_quit_fast(tmp_path):
    """As a new user: provetop run at 160x48, shrink to 80x24 and grow back; the layout
    follows, the memory legend is on screen, event lines are whole words, q quits in 2 s."""
    session = f"pt-{uuid.uuid4().hex[:8]}"
    status = tmp_path / "status"
    command = (
        f"cd {ROOT} && {sys.executable} -m provetop run --backend cpu --preset phantom "
        f"--proofs 100000 --no-record --save-dir {tmp_path}; echo $? > {status}"
    )
    env = {**os.environ, "TERM": "xterm-256color"}
    subprocess.run(
        [
            "tmux",
            "-L",
            SOCKET,
            "new-session",
            "-d",
            "-s",
            session,
            "-x",
            "160",
            "-y",
            "48",
            command,
        ],
        check=True,
        env=env,
        timeout=10,
    )
    try:
        screen = _wait_for(session, lambda s: "╭─ events" in s and "OOM gpu0" in s)
        assert "phantom = " in screen  # the legend
        # event lines wrap on words: the reason of a fallback reads whole across its rows
        log = " ".join(
            line.split("││")[-1].strip("│ ").strip() for line in screen.splitlines() if "││" in line
        )
        assert "retry on the fallback path after a failure" in " ".join(log.split())
        _tmux("resize-window", "-t", session, "-x", "80", "-y", "24")
        screen = _wait_for(session, lambda s: "─timeline" in s and "╭─" not in s)
        assert "phantom = " in screen and "PHANTOM" in screen
        _tmux("resize-window", "-t", session, "-x", "160", "-y", "48")
        _wait_for(session, lambda s: "╭─ partitions" in s and "╭─ events" in s)
        _tmux("send-keys", "-t", session, "q")
        started = time.monotonic()
        while not status.exists() and time.monotonic() - started < 10:
            time.sleep(0.05)
        took = time.monotonic() - started
        assert status.exists() and status.read_text().strip() == "0"
        assert took < 2.0, f"q took {took:.1f} s"
    finally:
        subprocess.run(
            ["tmux", "-L", SOCKET, "kill-session", "-t", session], capture_output=True, timeout=10
        )


def _start(session: str, command: str, size: tuple[int, int], tmp_path: Path) -> None:
    env = {**os.environ, "TERM": "xterm-256color", "XDG_RUNTIME_DIR": str(tmp_path)}
    x, y = (str(n) for n in size)
    subprocess.run(
        ["tmux", "-L", SOCKET, "new-session", "-d", "-s", session, "-x", x, "-y", y, command],
        check=True, env=env, timeout=10,
    )  # fmt: skip


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_top_fills_the_screen_with_the_gpus(tmp_path, size):
    session = f"pt-{uuid.uuid4().hex[:8]}"
    command = f'cd {ROOT} && PYTHONPATH={ROOT} {sys.executable} -c "{FAKE_TOP}"; sleep 30'
    _start(session, command, size, tmp_path)
    try:
        screen = _wait_for(session, lambda s: "gpu1 NVIDIA H200" in s or "%CPU" in s)
        assert "GPUs of " in screen and "gpu0 NVIDIA H200" in screen
        assert "SM util" in screen
        assert "fallback" not in screen and "trim" not in screen  # no pipeline keys
        assert "timeline" not in screen and "partitions" not in screen
        if size == (160, 48):
            assert "%CPU" in screen and "%MEM" in screen and "4242" in screen
    finally:
        subprocess.run(
            ["tmux", "-L", SOCKET, "kill-session", "-t", session], capture_output=True, timeout=10
        )


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_the_readme_replay_at_a_fault_says_what_the_fault_says(tmp_path, size):
    session = f"pt-{uuid.uuid4().hex[:8]}"
    command = (
        f"cd {ROOT} && PYTHONPATH={ROOT} {sys.executable} -m provetop replay {NAIVE16} "
        "--paused; sleep 30"
    )
    _start(session, command, size, tmp_path)
    try:
        _wait_for(session, lambda s: "replay at 1x" in s)
        if size == (80, 24):
            _tmux("send-keys", "-t", session, "2")  # the memory panel under the timeline
        _tmux("send-keys", "-t", session, "n")
        screen = _wait_for(session, lambda s: "OOM gpu0 w1's pools" in s)
        flat = " ".join(screen.split())
        assert "at 0:17.1: OOM gpu0 w1's pools" in flat
        assert "PHANTOM 9.22 GiB" in flat  # as the fault's log line says
        assert "✖ OOM at 0:17.1" in flat  # the cursor on the fault names it
        header = "\n".join(screen.splitlines()[:2])
        assert re.search(r"│ OOM \d+ · fallbacks \d+", header), header  # at 80 columns too
    finally:
        subprocess.run(
            ["tmux", "-L", SOCKET, "kill-session", "-t", session], capture_output=True, timeout=10
        )
