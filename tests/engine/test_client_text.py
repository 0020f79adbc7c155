"""Client strings reach other clients and the recording clean: a marker name or a refused
command's arguments lose control, bidi and zero-width characters and markup (the ESC and BEL
of a refused name were copied into the refusal, broadcast and recorded)."""

from __future__ import annotations

from typing import Any

import pytest

from provetop.base.text import clean_text
from provetop.engine.telemetry.control import acknowledge

HOSTILE = [
    "\x1b]0;PWNED\x07\x1b[2J",
    "left\u202eright",
    "zero\u200bwidth\u2060joined\ufeff",
    "[@click=app.quit]quit[/]",
    "[bold red]loud[/bold red]",
    "\u2066isolate\u2069",
    "tab\there",
]


class _Bus:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def emit(self, kind: str, /, **fields: Any) -> dict[str, Any]:
        self.events.append({"k": kind, **fields})
        return self.events[-1]


def _bad(text: str) -> bool:
    import unicodedata

    return (
        any(unicodedata.category(c) in ("Cc", "Cf") for c in text) or "[@" in text or ("[/" in text)
    )


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


@pytest.mark.parametrize("name", HOSTILE)
def test_marker_names_are_cleaned_before_they_are_stored(name):
    bus = _Bus()
    answer = acknowledge(bus, {"k": "command", "id": 1, "cmd": "marker", "args": {"name": name}},
                         "unix#1", read_only=None, check=lambda c, a: None)  # fmt: skip
    assert isinstance(answer, tuple), answer
    ack, _cmd, args = answer
    assert args["name"] == clean_text(name).strip() and not _bad(args["name"])
    assert not any(_bad(s) for s in _strings(ack))


@pytest.mark.parametrize("name", HOSTILE)
def test_refusals_never_echo_a_clients_raw_text(name):
    bus = _Bus()
    frames = [
        {"k": "command", "id": 1, "cmd": "marker", "args": {"name": name, name: name}},
        {"k": "command", "id": 2, "cmd": "trim", "args": {"device": name}},
        {"k": "command", "id": 3, "cmd": name, "args": {"x": name}},
    ]
    for frame in frames:
        answer = acknowledge(bus, frame, "unix#1", read_only=None, check=lambda c, a: None)
        assert isinstance(answer, dict) and answer["ok"] is False
    for event in bus.events:
        bad = [s for s in _strings(event) if _bad(s)]
        assert not bad, (event, bad)


def test_a_name_of_nothing_printable_is_refused():
    bus = _Bus()
    frame = {"k": "command", "id": 1, "cmd": "marker", "args": {"name": "\u200b\x1b[@x]"}}
    answer = acknowledge(bus, frame, "unix#1", read_only=None, check=lambda c, a: None)
    assert isinstance(answer, dict) and answer["ok"] is False
    assert "nothing printable" in answer["error"]
