"""Poll a cuzk daemon's ``GET /status`` (``cuzk-core/src/status.rs``, served on the address of
``daemon.status_listen`` in cuzk's config, for example ``127.0.0.1:9821``).

Every poll gives a :class:`StatusResult`: the decoded snapshot, or an error in words (refused,
timed out, HTTP error, not JSON, JSON that is not an object, too large, nested too deep, too
slow). Nothing here raises for a bad endpoint: a dashboard watching cuzk must keep running
while cuzk restarts. The whole body must arrive within the poll's timeout (a deadline, not a
timeout per read: a server trickling its body would otherwise hold the poller, and the
dashboard's quit, for as long as it liked).
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from provetop.sources.protocol import THREAD_PREFIX

MAX_REDIRECTS = 3  # on the same host and port only
MAX_BODY = 4 << 20  # a status body is a few KiB; refuse anything absurd
MAX_DEPTH = 32  # cuzk's status nests 3-4 levels; a deeper body is refused, not walked
CHUNK = 1 << 16


@dataclass(frozen=True)
class StatusResult:
    ok: bool
    snapshot: dict[str, Any] | None
    error: str | None
    wall_ns: int


def status_url(url: str) -> str:
    """``host:port`` or ``http://host:port`` -> ``http://host:port/status``; a URL that already
    has a path is kept as given."""
    if "://" not in url:
        url = "http://" + url
    scheme, _, rest = url.partition("://")
    if "/" not in rest:
        url = f"{scheme}://{rest}/status"
    return url


def fetch_status(url: str, timeout: float = 2.0) -> StatusResult:
    """One ``GET``; never raises. ``timeout`` bounds the whole exchange (connect, headers,
    body, redirects): a watchdog shuts the socket at the deadline, so a server trickling its
    headers cannot hold the poll past it. A redirect is followed only on the same host and
    port (at most MAX_REDIRECTS): a status endpoint has no business sending the poller to
    another machine."""
    now = time.time_ns()
    deadline = time.monotonic() + timeout
    try:
        body = _get(url, deadline, timeout)
    except _Refused as exc:
        return StatusResult(False, None, str(exc), now)
    except TimeoutError:
        return StatusResult(False, None, f"no complete response within {timeout:g} s", now)
    except (OSError, ValueError, http.client.HTTPException) as exc:  # refused, reset, bad URL
        if time.monotonic() >= deadline:
            return StatusResult(False, None, f"no complete response within {timeout:g} s", now)
        reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        return StatusResult(False, None, f"unreachable: {reason}", now)
    if len(body) > MAX_BODY:
        return StatusResult(False, None, f"body larger than {MAX_BODY} bytes", now)
    if bracket_depth(body) > MAX_DEPTH:  # before json.loads, whose C parser recurses
        return StatusResult(False, None, f"JSON nested deeper than {MAX_DEPTH} levels", now)
    try:
        snapshot = json.loads(body.decode("utf-8"))
    except RecursionError:
        return StatusResult(False, None, f"JSON nested deeper than {MAX_DEPTH} levels", now)
    except (UnicodeDecodeError, ValueError) as exc:
        return StatusResult(False, None, f"invalid JSON: {exc}", now)
    if _too_deep(snapshot):
        return StatusResult(False, None, f"JSON nested deeper than {MAX_DEPTH} levels", now)
    if not isinstance(snapshot, dict):
        return StatusResult(False, None, f"JSON {type(snapshot).__name__}, not an object", now)
    return StatusResult(True, snapshot, None, now)


class _Refused(Exception):
    """An answer the poller does not take (an HTTP error, a redirect off the host)."""


def _get(url: str, deadline: float, timeout: float) -> bytes:
    """The body of ``GET url``, following same-host redirects, all before ``deadline``."""
    origin: tuple[str, int] | None = None
    for _ in range(MAX_REDIRECTS + 1):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"not an http:// URL: {url[:200]}")
        where = (parts.hostname, parts.port or 80)
        if origin is None:
            origin = where
        elif where != origin:
            raise _Refused(f"redirected to another host ({where[0]}:{where[1]}); not followed")
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        conn = http.client.HTTPConnection(where[0], where[1], timeout=left)
        watchdog = threading.Timer(left, _cut, args=(conn,))
        watchdog.daemon = True
        watchdog.start()
        try:
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            conn.request("GET", path, headers={"Accept": "application/json"})
            resp = conn.getresponse()
            if resp.status in (301, 302, 303, 307, 308):
                location = resp.getheader("Location") or ""
                url = urllib.parse.urljoin(url, location)
                continue
            if resp.status >= 400:
                raise _Refused(f"HTTP {resp.status} {resp.reason}")
            body = _read_body(resp, deadline)
        finally:
            watchdog.cancel()
            conn.close()
        if time.monotonic() > deadline:
            raise TimeoutError
        return body
    raise _Refused(f"more than {MAX_REDIRECTS} redirects")


def _cut(conn: http.client.HTTPConnection) -> None:
    """The deadline passed: wake whatever read the exchange is blocked in."""
    sock = conn.sock
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _read_body(resp: Any, deadline: float) -> bytes:
    """The body, at most MAX_BODY + 1 bytes, read as it arrives; TimeoutError once the
    deadline passes (checked after each read, and each read waits at most the timeout)."""
    body = bytearray()
    while len(body) <= MAX_BODY:
        if time.monotonic() > deadline:
            raise TimeoutError
        chunk = resp.read1(min(CHUNK, MAX_BODY + 1 - len(body)))
        if not chunk:
            break
        body += chunk
    if time.monotonic() > deadline:
        raise TimeoutError
    return bytes(body)


_STRING = re.compile(rb'"(?:\\.|[^"\\])*"')
_OPEN_CLOSE = bytes(range(256)).translate(None, b"[]{}")  # every byte but the brackets


def bracket_depth(body: bytes) -> int:
    """The deepest nesting of ``[``/``{`` in ``body``, outside string literals, counted without
    parsing. Why not let ``json.loads`` find out: its C scanner recurses once per level and
    relies on the interpreter's recursion limit, which a program may have raised; 100,000
    levels then overflow the thread's C stack and kill the process instead of raising."""
    brackets = _STRING.sub(b"", body).translate(None, _OPEN_CLOSE)
    if not brackets:
        return 0
    steps = np.frombuffer(brackets, dtype=np.uint8)
    delta = np.where((steps == ord("[")) | (steps == ord("{")), 1, -1)
    return int(np.cumsum(delta).max())


def _too_deep(value: Any) -> bool:
    """True when ``value`` nests lists and maps deeper than MAX_DEPTH (walked without
    recursion, and no further than that depth)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > MAX_DEPTH:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return False


class StatusPoller:
    """Calls ``on_result`` with a :class:`StatusResult` every ``interval`` seconds, on a
    daemon thread, until :meth:`stop`."""

    def __init__(
        self,
        url: str,
        on_result: Callable[[StatusResult], None],
        *,
        interval: float = 1.0,
        timeout: float | None = None,
    ) -> None:
        self.url = status_url(url)
        self.interval = max(0.05, float(interval))
        self.timeout = timeout if timeout is not None else min(5.0, max(0.5, self.interval))
        self.on_result = on_result
        self.polls = 0
        self._stop = threading.Event()
        name = f"{THREAD_PREFIX}cuzk-status"
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> StatusPoller:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            result = fetch_status(self.url, self.timeout)
            self.polls += 1
            if self._stop.is_set():
                break
            self.on_result(result)
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            # a daemon thread: quitting never waits for a slow endpoint longer than this
            self._thread.join(timeout=0.5)
