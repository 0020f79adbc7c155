"""Finding the engines running on this machine, so a reader needs no address.

``provetop engine`` listens by default in a fresh private directory ``provetop-*`` under
``$XDG_RUNTIME_DIR`` (or the temp directory, as :mod:`provetop.engine.telemetry.server` decides)
and prints
the
path; ``provetop watch`` without an address, or a :class:`provetop.sources.live.LiveSource` given
the
default address ``unix``, looks there.
"""

from __future__ import annotations

import glob
import os
import socket
import stat
import tempfile

__all__ = ["answers", "default_address", "local_engines", "new_engines"]

POLL_S = 2.0  # how often a monitor looks for engines that started after it


def local_engines() -> list[str]:
    """Sockets of engines running on this machine for this user, newest first.

    Only sockets this user owns count; whether one still answers is :func:`default_address`'s
    question."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")  # where the engine puts it, as it decides
    bases = [runtime if runtime and os.path.isdir(runtime) else tempfile.gettempdir()]
    found: list[tuple[float, str]] = []
    for base in bases:
        for path in glob.glob(os.path.join(base, "provetop-*", "engine.sock")):
            try:
                st = os.stat(path)
            except OSError:
                continue
            if stat.S_ISSOCK(st.st_mode) and st.st_uid == os.getuid():
                found.append((st.st_mtime, path))
    return [path for _, path in sorted(found, reverse=True)]


def answers(path: str) -> bool:
    """Whether the socket at ``path`` accepts a connection (a crashed engine leaves its socket
    file behind: that one refuses)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(0.5)
    try:
        probe.connect(path)
    except OSError:
        return False
    finally:
        probe.close()
    return True


def default_address() -> str | None:
    """The newest local engine socket that accepts a connection, or None."""
    return next((path for path in local_engines() if answers(path)), None)


def new_engines(known: set[str]) -> list[str]:
    """Local engines not in ``known`` that accept a connection, oldest first: what a monitor
    (``provetop top``) attaches to when it polls every :data:`POLL_S` seconds. Only unknown
    sockets are probed, so an engine already watched sees no extra connection."""
    return [path for path in reversed(local_engines()) if path not in known and answers(path)]
