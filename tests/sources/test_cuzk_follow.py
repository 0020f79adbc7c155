"""Following a growing cuzk log like ``tail -F``: partial lines, rotation, truncation, stdin."""

from __future__ import annotations

import io
import os
import random
import time

from provetop.sources.cuzk.follow import FileFollower, StreamFollower, iter_lines


def words(rng, n):
    return [f"line {i} {rng.getrandbits(40):x}" for i in range(n)]


def test_partial_lines_wait_for_their_newline(tmp_path):
    rng = random.Random()
    path = tmp_path / "cuzk.log"
    path.write_bytes(b"")
    f = FileFollower(path)
    expected = words(rng, 50)
    blob = "".join(x + "\n" for x in expected).encode()
    got = []
    pos = 0
    while pos < len(blob):  # append in random-sized pieces, splitting lines anywhere
        step = rng.randint(1, 40)
        with open(path, "ab") as out:
            out.write(blob[pos : pos + step])
        pos += step
        got += f.poll()
    assert got == expected
    with open(path, "ab") as out:
        out.write(b"TIMELINE,12,GPU_E")  # a last line cut short
    assert f.poll() == []
    assert f.close() == ["TIMELINE,12,GPU_E"]


def test_rotation_by_rename_reads_old_tail_then_new_file(tmp_path):
    rng = random.Random()
    path = tmp_path / "cuzk.log"
    a, b, c = words(rng, 5), words(rng, 7), words(rng, 3)
    path.write_text("\n".join(a[:3]) + "\n")
    f = FileFollower(path)
    got = f.poll()
    with open(path, "a") as out:  # more lines land in the old file just before rotation
        out.write("\n".join(a[3:]) + "\n" + "partial-old")
    os.rename(path, tmp_path / "cuzk.log.1")
    got += f.poll()  # the path is gone: drain the old file, wait for the new one
    path.write_text("\n".join(b) + "\n")
    got += f.poll()
    with open(path, "a") as out:
        out.write("\n".join(c) + "\n")
    got += f.poll()
    assert got == a + b + c
    assert f.rotations == 1
    assert f.take_partial() == ["partial-old"]


def test_copytruncate_restarts_at_the_start(tmp_path):
    rng = random.Random()
    path = tmp_path / "cuzk.log"
    a, b = words(rng, 20), words(rng, 2)
    path.write_text("\n".join(a) + "\n")
    f = FileFollower(path)
    assert f.poll() == a
    with open(path, "r+") as out:  # logrotate copytruncate: same inode, size 0, then new lines
        out.truncate(0)
    with open(path, "a") as out:
        out.write("\n".join(b) + "\n")
    assert f.poll() == b
    assert f.truncations == 1 and f.rotations == 0


def test_missing_file_is_waited_for_and_from_end_skips_history(tmp_path):
    path = tmp_path / "later.log"
    f = FileFollower(path)
    assert f.poll() == []
    path.write_text("first\nsecond\n")
    assert f.poll() == ["first", "second"]
    g = FileFollower(path, from_start=False)
    assert g.poll() == []
    with open(path, "a") as out:
        out.write("third\n")
    assert g.poll() == ["third"]


def test_invalid_utf8_and_crlf_are_tolerated(tmp_path):
    path = tmp_path / "cuzk.log"
    path.write_bytes(b"ok line\r\n\xff\xfe bad bytes\n")
    assert FileFollower(path).poll() == ["ok line", "\ufffd\ufffd bad bytes"]
    assert list(iter_lines(str(path))) == [("ok line", True), ("\ufffd\ufffd bad bytes", True)]


def test_stream_follower_reads_stdin_like_streams():
    rng = random.Random()
    lines = words(rng, 30)
    stream = io.BytesIO(("\n".join(lines) + "\ncut").encode())
    s = StreamFollower(stream)
    got = []
    deadline = time.monotonic() + 5
    while not s.eof and time.monotonic() < deadline:
        got += s.poll(timeout=0.05)
    assert got == lines and s.eof
    assert s.take_partial() == ["cut"]


def test_iter_lines_marks_the_cut_last_line(tmp_path):
    path = tmp_path / "cuzk.log"
    path.write_bytes(b"a\nb\nTIMELINE,5,SYN")
    assert list(iter_lines(str(path))) == [("a", True), ("b", True), ("TIMELINE,5,SYN", False)]


def test_claim_stdin_gives_the_terminal_back_to_fd0():
    """``... | provetop watch --cuzk-log -``: the log moves off fd 0, the terminal comes back."""
    import fcntl
    import pty
    import subprocess
    import sys
    import termios

    master, slave = pty.openpty()

    def controlling_tty():
        os.setsid()
        fcntl.ioctl(slave, termios.TIOCSCTTY, 0)

    script = (
        "import os, sys\n"
        "from provetop.sources.cuzk.follow import claim_stdin\n"
        "stream = claim_stdin()\n"
        "sys.stdout.write(f'{os.isatty(0)} {stream.read().decode()}')\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    payload = f"TIMELINE,{random.randrange(10**6)},SYNTH_START,j,partition=0\n"
    try:
        proc = subprocess.run(
            [sys.executable, "-c", script],
            input=payload.encode(),
            capture_output=True,
            timeout=60,
            cwd=root,
            preexec_fn=controlling_tty,
            pass_fds=(slave,),
        )
    finally:
        os.close(master)
        os.close(slave)
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout.decode() == f"True {payload}"
