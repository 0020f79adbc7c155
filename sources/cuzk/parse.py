"""One line of a cuzk daemon log in, one typed record out.

cuzk (``filecoin-project/curio``, ``extern/cuzk``) has no structured telemetry: what an operator
has is its stderr. Three kinds of lines matter there, and ``docs/cuzk.md`` says where in cuzk's
source each format is printed:

- ``CUZK_TIMING: key=value ...`` (and ``CUZK_TIMING: prestage_vram key=value ...``), printed with
  ``fprintf(stderr, ...)`` by supraseal-c2's ``groth16_cuda.cu``: per-call timings and the
  pre-staging decisions. These lines carry no job, partition or worker, and no timestamp.
- ``TIMELINE,<offset_ms>,<event>,<job_id>,<detail>``, printed with ``eprintln!`` by
  ``cuzk-core/src/engine.rs``: pipeline events with milliseconds since the engine started.
- ``tracing`` lines (``<rfc3339> <LEVEL> spans: target: message key=value ...`` or the JSON
  format): the only place failures are reported.

The parser is pure and total: any string gives a record, :class:`Malformed` (a known prefix whose
body does not follow the format, for example a line cut short) or ``None`` (not a cuzk line). It
never raises, so a garbage line can only ever be counted, never stop a dashboard.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

Value = int | float | str | None

TIMING_TAG = "CUZK_TIMING:"
TIMELINE_TAG = "TIMELINE,"

MAX_OFFSET_MS = ((1 << 63) - 1) // 1_000_000  # a TIMELINE offset whose ns fit in an int64
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_EVENT = re.compile(r"^[A-Z][A-Z0-9_]*$")
_KEY = re.compile(r"^[A-Za-z_][\w.]*$")
_TRACE_HEAD = re.compile(
    r"^\s*(?P<ts>\d{4}-\d\d-\d\d[T ][\d:.]+(?:Z|[+-]\d\d:?\d\d)?)?\s*"
    r"(?P<level>TRACE|DEBUG|INFO|WARN|ERROR)\s+(?P<rest>.*)$"
)
_FIELD_START = re.compile(r"(?:^|(?<=\s))([A-Za-z_][\w.]*)=")
_TARGET = re.compile(r"^[A-Za-z_]\w*(?:::\w+)*$")
_PANIC = re.compile(r"thread '(?P<thread>[^']*)' panicked at (?P<where>.*)")


@dataclass(frozen=True)
class TimingLine:
    """``CUZK_TIMING:`` body: ``fields`` from ``key=value`` tokens, ``tags`` the bare words
    (``prestage_vram``)."""

    fields: dict[str, Value]
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class TimelineLine:
    """``TIMELINE,<offset_ms>,<event>,<job_id>,<detail>``; ``detail`` split into ``key=value``
    pairs (bare words such as ``monolithic`` map to "")."""

    offset_ms: int
    event: str
    job_id: str
    detail: dict[str, str] = field(default_factory=dict)

    def int_detail(self, key: str) -> int | None:
        """A detail value as an integer, or None when absent or not a number."""
        value = self.detail.get(key)
        try:
            return int(value) if value is not None else None
        except ValueError:
            return None


@dataclass(frozen=True)
class TraceLine:
    """A ``tracing`` record: level, message, event fields and the fields of its spans."""

    level: str
    message: str
    fields: dict[str, Value]
    spans: dict[str, Value] = field(default_factory=dict)
    target: str | None = None
    wall_ns: int | None = None

    def get(self, key: str) -> Value:
        """A field of the event, else of its spans (the innermost span wins)."""
        if key in self.fields:
            return self.fields[key]
        return self.spans.get(key)


@dataclass(frozen=True)
class PanicLine:
    """A Rust panic message (``thread 'x' panicked at ...``)."""

    thread: str
    where: str


@dataclass(frozen=True)
class Malformed:
    """A line with a cuzk prefix whose body does not follow the format (cut short, garbled)."""

    kind: str  # "timing" or "timeline"
    reason: str


Parsed = TimingLine | TimelineLine | TraceLine | PanicLine | Malformed


def parse_line(line: str) -> Parsed | None:
    """Classify and parse one log line (without its newline). ``None``: not a cuzk line."""
    if not isinstance(line, str):
        return None
    text = _ANSI.sub("", line).strip()
    if not text:
        return None
    at = _find_tag(text, TIMELINE_TAG)
    if at >= 0:
        return _timeline(text[at + len(TIMELINE_TAG) :])
    at = text.find(TIMING_TAG)
    if at >= 0:
        return _timing(text[at + len(TIMING_TAG) :])
    if text.startswith("{"):
        return _json_trace(text)
    match = _TRACE_HEAD.match(text)
    if match:
        return _trace(match)
    panic = _PANIC.search(text)
    if panic:
        return PanicLine(panic.group("thread"), panic.group("where").strip())
    return None


def _find_tag(text: str, tag: str) -> int:
    """Where ``tag`` starts a token: at the line start or after a prefix (journald, docker)."""
    start = 0
    while True:
        at = text.find(tag, start)
        if at <= 0:
            return at
        if text[at - 1] in " \t:]|":
            return at
        start = at + 1


def parse_value(raw: str) -> Value:
    """``12`` -> 12, ``1.5`` -> 1.5, ``Some(3)`` -> 3, ``None`` -> None, else the string."""
    s = raw.strip()
    if len(s) >= 2 and s[0] == s[-1] == '"':
        return s[1:-1].replace('\\"', '"')
    if s.startswith("Some(") and s.endswith(")"):
        return parse_value(s[5:-1])
    if s == "None":
        return None
    try:
        return int(s)
    except ValueError:
        pass
    try:
        value = float(s)
    except ValueError:
        return s
    return value if value == value and abs(value) != float("inf") else s


def _timing(body: str) -> Parsed:
    fields: dict[str, Value] = {}
    tags: list[str] = []
    for token in body.split():
        key, eq, value = token.partition("=")
        if eq:
            if not _KEY.match(key) or value == "":
                return Malformed("timing", f"bad token {token!r}")
            fields[key] = parse_value(value)
        elif _KEY.match(token):
            tags.append(token)
        else:
            return Malformed("timing", f"bad token {token!r}")
    if not fields and not tags:
        return Malformed("timing", "empty CUZK_TIMING line")
    return TimingLine(fields, tuple(tags))


def _timeline(body: str) -> Parsed:
    parts = body.split(",", 3)
    if len(parts) < 4:
        return Malformed("timeline", f"{len(parts)} of 4 fields (line cut short?)")
    offset, event, job_id, detail_raw = parts
    try:
        offset_ms = int(offset)
    except ValueError:
        return Malformed("timeline", f"offset {offset!r} is not an integer")
    if offset_ms > MAX_OFFSET_MS:  # as a time in ns it would not fit in 64 bits
        return Malformed("timeline", f"offset {offset_ms} ms is out of range")
    if offset_ms < 0 or not _EVENT.match(event) or not job_id.strip():
        return Malformed("timeline", f"bad event {event!r} or job id {job_id!r}")
    detail: dict[str, str] = {}
    for item in detail_raw.split(","):
        item = item.strip()
        if item:
            key, _, value = item.partition("=")
            detail[key.strip()] = value.strip()
    return TimelineLine(offset_ms, event, job_id.strip(), detail)


def _split_top(text: str) -> list[str]:
    """Split ``span{a=b}: target: message`` at ``": "`` outside braces."""
    parts: list[str] = []
    depth = start = 0
    i = 0
    while i < len(text):
        c = text[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth = max(0, depth - 1)
        elif c == ":" and depth == 0 and text.startswith(": ", i):
            parts.append(text[start:i])
            start = i + 2
            i += 1
        i += 1
    parts.append(text[start:])
    return parts


def parse_fields(text: str) -> tuple[str, dict[str, Value]]:
    """``message k=v k2=some text k3=v`` -> (message, fields). A value runs to the next
    ``key=`` token, so unquoted Display values with spaces (error texts) survive."""
    starts = list(_FIELD_START.finditer(text))
    if not starts:
        return text.strip(), {}
    message = text[: starts[0].start()].strip()
    fields: dict[str, Value] = {}
    for i, m in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(text)
        fields[m.group(1)] = parse_value(text[m.end() : end])
    return message, fields


def _trace(match: re.Match[str]) -> TraceLine:
    parts = _split_top(match.group("rest"))
    spans: dict[str, Value] = {}
    i = 0
    while i < len(parts) - 1 and "{" in parts[i]:
        for span in re.finditer(r"\{([^{}]*)\}", parts[i]):
            spans.update(parse_fields(span.group(1))[1])
        i += 1
    target = None
    if i < len(parts) - 1 and _TARGET.match(parts[i].strip()):
        target = parts[i].strip()
        i += 1
    message, fields = parse_fields(": ".join(parts[i:]))
    return TraceLine(
        match.group("level"), message, fields, spans, target, _wall_ns(match.group("ts"))
    )


def _json_trace(text: str) -> TraceLine | None:
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("level"), str):
        return None
    raw = obj.get("fields")
    raw_fields: dict[Any, Any] = raw if isinstance(raw, dict) else {}
    fields = {str(k): _json_value(v) for k, v in raw_fields.items() if k != "message"}
    spans: dict[str, Value] = {}
    for span in obj.get("spans") or []:
        if isinstance(span, dict):
            spans.update({str(k): _json_value(v) for k, v in span.items() if k != "name"})
    if isinstance(obj.get("span"), dict):
        spans.update({str(k): _json_value(v) for k, v in obj["span"].items() if k != "name"})
    message = raw_fields.get("message", "")
    return TraceLine(
        obj["level"].upper(),
        str(message),
        fields,
        spans,
        obj.get("target") if isinstance(obj.get("target"), str) else None,
        _wall_ns(obj.get("timestamp")) if isinstance(obj.get("timestamp"), str) else None,
    )


def _json_value(v: object) -> Value:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int | float):
        return v
    if v is None:
        return None
    return parse_value(str(v))


def _wall_ns(ts: str | None) -> int | None:
    if not ts:
        return None
    try:
        frac = re.search(r"\.(\d+)", ts)
        base = re.sub(r"\.\d+", "", ts).replace("Z", "+00:00")
        dt = datetime.fromisoformat(base)
        if dt.tzinfo is None:
            return None
        ns = int(dt.timestamp()) * 1_000_000_000
        if frac:
            ns += int(frac.group(1)[:9].ljust(9, "0"))
        return ns
    except (ValueError, OverflowError):
        return None
