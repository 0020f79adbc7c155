"""Operator control: what a command may say, and what it changes.

Why separate from the server: the same commands arrive over a socket, from ``provetop run``
in-process, and from tests, and they must be checked and acknowledged the same way. Every
command, accepted or not, becomes one ``control`` event (broadcast and recorded), so a replay
shows who changed what and when.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any, Protocol

from provetop.base.text import clean_text
from provetop.recordings.schema import CONTROL_COMMANDS


class Controls:
    """The switches workers read: forced fallback per device."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._forced: dict[int, bool] = {}

    def is_forced(self, device: int) -> bool:
        with self._lock:
            return self._forced.get(device, False)

    def force(self, device: int, on: bool) -> None:
        with self._lock:
            self._forced[device] = on


class CommandError(ValueError):
    """A command that is malformed, unknown or refused; the message goes into ``error``."""


def parse_command(frame: object) -> tuple[int, str, dict[str, Any]]:
    """Check a client's command frame; return (id, cmd, args) or raise :class:`CommandError`.

    The id is recovered whenever it is an int, so even a refusal can be matched by the
    client (see :func:`frame_id`)."""
    if not isinstance(frame, dict):
        raise CommandError("a command is a map")
    if frame.get("k") != "command":
        raise CommandError(f"expected a frame with k='command', got k={_echo(frame.get('k'))}")
    cid = frame.get("id")
    if not isinstance(cid, int) or isinstance(cid, bool):
        raise CommandError("command 'id' must be an integer")
    cmd = frame.get("cmd")
    if not isinstance(cmd, str) or cmd not in CONTROL_COMMANDS:
        raise CommandError(
            f"unknown command {_echo(cmd)} (expected one of {', '.join(CONTROL_COMMANDS)})"
        )
    args = frame.get("args", {})
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise CommandError("command 'args' must be a map")
    return cid, cmd, _check_args(cmd, args)


ARGS: dict[str, tuple[str, ...]] = {
    "force_fallback": ("device", "on"),
    "trim": ("device",),
    "marker": ("name",),
}


def _check_args(cmd: str, args: dict[str, Any]) -> dict[str, Any]:
    allowed = ARGS.get(cmd, ())
    for key in args:
        if key not in allowed:
            takes = f"takes only {', '.join(allowed)}" if allowed else "takes no arguments"
            raise CommandError(f"{cmd} {takes}; got {_echo(key)}")

    def integer(name: str, required: bool) -> int | None:
        v = args.get(name)
        if v is None:
            if required:
                raise CommandError(f"{cmd} needs an integer '{name}'")
            return None
        if not isinstance(v, int) or isinstance(v, bool):
            raise CommandError(f"{cmd}: '{name}' must be an integer")
        return v

    if cmd == "force_fallback":
        device = integer("device", False)
        on = args.get("on", True)
        if not isinstance(on, bool):
            raise CommandError("force_fallback: 'on' must be true or false")
        return {"device": 0 if device is None else device, "on": on}
    if cmd == "trim":
        device = integer("device", False)
        return {} if device is None else {"device": device}
    if cmd == "marker":
        name = args.get("name")
        if not isinstance(name, str) or not name.strip() or len(name) > 200:
            raise CommandError("marker needs a 'name' string of 1 to 200 characters")
        # stored, broadcast and drawn: control, bidi and zero-width characters and markup
        # are stripped (provetop.base.text), and a name of nothing else is refused
        name = clean_text(name).strip()
        if not name:
            raise CommandError("marker: the name holds nothing printable")
        return {"name": name}
    return {}


def frame_id(frame: object) -> int:
    """The command id to acknowledge with, -1 when the frame has none."""
    if isinstance(frame, dict):
        cid = frame.get("id")
        if isinstance(cid, int) and not isinstance(cid, bool):
            return cid
    return -1


_PLAIN = re.compile(r"[A-Za-z0-9_.-]{1,32}")


def _echo(value: object) -> str:
    """A client's value as quoted in an error: plain short names verbatim, anything else
    described. Errors are shown by dashboards (some render markup), so a client's bytes never
    reach them through a refusal."""
    if isinstance(value, str):
        return repr(value) if _PLAIN.fullmatch(value) else f"(a string of {len(value)} characters)"
    if value is None or isinstance(value, bool | int | float):
        return repr(value)
    return f"(a {type(value).__name__})"


def frame_cmd(frame: object) -> str:
    """The refused command's name for the ``cmd`` field: a known command's name, else "?"
    (an unknown name is quoted in ``error`` only when it is a plain short word)."""
    cmd = frame.get("cmd") if isinstance(frame, dict) else None
    return cmd if isinstance(cmd, str) and cmd in CONTROL_COMMANDS else "?"


def frame_args(frame: object) -> dict[str, Any]:
    """A refused command's args as echoed in its ``control`` event: at most 16 keys, strings
    cut to 64 characters, containers summarised, so a client cannot make every refusal copy
    a large payload into the recording and to every other client."""
    if isinstance(frame, dict) and isinstance(frame.get("args"), dict):
        items = list(frame["args"].items())[:16]
        return {clean_text(k[:64]): _short(v) for k, v in items if isinstance(k, str)}
    return {}


def _short(v: object) -> object:
    if isinstance(v, str):
        return clean_text(v[:64])  # a refusal is broadcast and recorded: nothing raw
    if isinstance(v, bytes):
        return f"<{len(v)} bytes>"
    if isinstance(v, dict | list):
        return f"<{'map' if isinstance(v, dict) else 'array'} of {len(v)}>"
    return v


class Emits(Protocol):
    """The part of the bus a command's acknowledgement goes through."""

    def emit(self, kind: str, /, **fields: Any) -> dict[str, Any]: ...


Check = Callable[[str, dict[str, Any]], None]


def acknowledge(
    bus: Emits, frame: object, client: str, *, read_only: str | None, check: Check
) -> tuple[dict[str, Any], str, dict[str, Any]] | dict[str, Any]:
    """Check one client frame and send its ``control`` event: the refusal (returned alone)
    when it is malformed, the producer is read-only (``read_only``: the refusal's words) or
    ``check(cmd, args)`` raises :class:`CommandError`; else (the acknowledgement, cmd, args)
    for the caller to apply. Every producer that takes commands (the engine, a trace) answers
    them alike through this."""
    try:
        cid, cmd, args = parse_command(frame)
        if read_only is not None:
            raise CommandError(read_only)
        check(cmd, args)
    except CommandError as exc:
        return bus.emit(
            "control",
            id=frame_id(frame),
            cmd=frame_cmd(frame),
            args=frame_args(frame),
            ok=False,
            error=str(exc),
            client=client,
        )
    return bus.emit("control", id=cid, cmd=cmd, args=args, ok=True, client=client), cmd, args


def refuse_bad_frame(bus: Emits, error: str, client: str) -> None:
    """A frame the server could not decode: one refusal, the connection is the server's."""
    bus.emit(
        "control", id=-1, cmd="?", args={}, ok=False, error=f"bad frame: {error}", client=client
    )
