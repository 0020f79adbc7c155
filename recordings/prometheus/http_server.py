"""A small HTTP server for ``GET /metrics`` that a bad client cannot turn against its producer.

Why our own server and not prometheus-client's: the endpoint lives inside a proving engine
(and a cuzk watcher), so what a scraper or a stray client does must never stall the
run. Here that means:

- only ``GET /metrics`` is served, and ``HEAD /metrics`` (its headers, no body: HTTP asks every
  server to answer HEAD wherever it answers GET); any other path: 404; any other method: 405
  with ``Allow: GET, HEAD``; one request per connection;
- the request line and the headers together are capped (:data:`MAX_REQUEST_BYTES`; beyond:
  414 or 431);
- every connection has a socket timeout and a total deadline: a reaper shuts down a connection
  still open after :data:`DEADLINE_S`, so a client sending one byte at a time cannot pin a
  thread;
- at most :data:`MAX_THREADS` connections are served at once; one more is closed at once;
- a request only calls ``render()``, which copies the fold's numbers under a short lock
  (:mod:`provetop.recordings.prometheus.fold`); the fold itself runs elsewhere.

Addresses: ``HOST:PORT``, ``:PORT`` or ``PORT`` (host 127.0.0.1), ``[::1]:PORT`` for IPv6. A
host other than loopback is served only when named; port 0 picks a free port (the bound address
is :attr:`MetricsServer.url`).
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import BufferedIOBase
from typing import Any

from provetop.recordings.prometheus.exposition import CONTENT_TYPE

DEFAULT_HOST = "127.0.0.1"
MAX_REQUEST_BYTES = 8192  # request line and headers together
MAX_THREADS = 8
TIMEOUT_S = 2.0  # per socket operation
DEADLINE_S = 5.0  # per connection, from accept to close
METHODS = ("GET", "HEAD")  # what /metrics answers; any other method: 405 with Allow
REQUEST_DEADLINE_S = 1.0  # the request line and headers must be in by then (slow loris)
# Requests served a second, all connections together, after a burst: the rest wait in the
# listen backlog, so back-to-back scrapes cost the producer this many renders a second at most
REQUESTS_PER_S = 20
REQUEST_BURST = 20


class MetricsAddressError(ValueError):
    """A ``--metrics`` value that is not ``HOST:PORT``, ``:PORT`` or ``PORT``."""


def parse_metrics_address(text: str) -> tuple[str, int]:
    """``"9400"`` / ``":9400"`` -> ("127.0.0.1", 9400); ``"0.0.0.0:9400"`` as given;
    ``"[::1]:9400"`` -> ("::1", 9400)."""
    raw = (text or "").strip()
    if raw.startswith("http://"):
        raw = raw[len("http://") :].rstrip("/")
    host, port_text = DEFAULT_HOST, raw
    if raw.startswith("["):
        end = raw.find("]")
        if end < 0 or not raw[end + 1 :].startswith(":"):
            raise MetricsAddressError(f"--metrics {text!r}: expected [IPV6]:PORT")
        host, port_text = raw[1:end], raw[end + 2 :]
    elif ":" in raw:
        head, _, port_text = raw.rpartition(":")
        host = head or DEFAULT_HOST
    try:
        port = int(port_text)
    except ValueError:
        raise MetricsAddressError(
            f"--metrics {text!r}: expected HOST:PORT, :PORT or PORT (port a number)"
        ) from None
    if not 0 <= port <= 65535:
        raise MetricsAddressError(f"--metrics {text!r}: port {port} is not in 0-65535")
    if not host or any(c.isspace() for c in host):
        raise MetricsAddressError(f"--metrics {text!r}: empty or malformed host")
    return host, port


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (or ``localhost``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _CappedReader:
    """The request's reader, refusing more than ``limit`` bytes of request line and headers
    (``http.client.LineTooLong`` makes the handler answer 431)."""

    def __init__(self, raw: BufferedIOBase, limit: int) -> None:
        self.raw = raw
        self.left = limit

    def readline(self, size: int = -1) -> bytes:
        if self.left <= 0:
            raise http.client.LineTooLong("request headers")
        cap = self.left + 1 if size is None or size < 0 else min(size, self.left + 1)
        line = self.raw.readline(cap)
        self.left -= len(line)
        if self.left < 0:
            raise http.client.LineTooLong("request headers")
        return line

    def read(self, size: int = -1) -> bytes:
        return b""  # a GET has no body worth reading

    def close(self) -> None:
        self.raw.close()


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = TIMEOUT_S
    server_version = "provetop-metrics"
    sys_version = ""
    error_message_format = "%(code)d %(message)s\n"
    error_content_type = "text/plain; charset=utf-8"

    def setup(self) -> None:
        super().setup()
        # typeshed declares rfile a BufferedIOBase; the capped reader has only what the
        # handler calls on it (readline, read, close), so it is not one and is not typed as one
        self.rfile = _CappedReader(self.rfile, MAX_REQUEST_BYTES)  # type: ignore[assignment]

    def handle_one_request(self) -> None:
        self.close_connection = True
        try:
            try:
                self.raw_requestline = self.rfile.readline(MAX_REQUEST_BYTES + 1)
            except http.client.LineTooLong:
                self.requestline, self.request_version, self.command = "", "", ""
                self.send_error(HTTPStatus.REQUEST_URI_TOO_LONG)
                return
            if not self.raw_requestline:
                return
            if not self.parse_request():  # sends 400/431 itself
                return
            self.server.request_read(self.request)
            if self.command not in METHODS:
                self._not_allowed()
                return
            self._get(head=self.command == "HEAD")
            self.wfile.flush()
        except (TimeoutError, OSError):
            return

    def _get(self, head: bool) -> None:
        if self.path.split("?", 1)[0] != "/metrics":
            self.send_error(HTTPStatus.NOT_FOUND, "only /metrics is served here")
            return
        try:
            body = self.server.render()
        except Exception as exc:  # a bug in the fold must not take the server down
            self.send_error(HTTPStatus.INTERNAL_SERVER_ERROR, type(exc).__name__)
            return
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)
        self.server.scrapes += 1

    def _not_allowed(self) -> None:
        """405 with the ``Allow`` header HTTP requires of it."""
        body = f"405 {self.command} is not served here: only GET and HEAD\n".encode()
        self.send_response(HTTPStatus.METHOD_NOT_ALLOWED)
        self.send_header("Allow", ", ".join(METHODS))
        self.send_header("Content-Type", self.error_content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a client must not be able to fill the producer's terminal."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 16

    def __init__(self, address: tuple[str, int], render: Callable[[], bytes], family: int):
        self.address_family = family
        self.render = render
        self.scrapes = 0
        self.refused = 0
        self._slots = threading.BoundedSemaphore(MAX_THREADS)
        self._open: dict[Any, float] = {}  # connection -> deadline
        self._reading: dict[Any, float] = {}  # connections still sending their request -> since
        self._open_lock = threading.Lock()
        self._tat = 0.0  # the request pace (GCRA, as the telemetry socket's command budget)
        self.evicted = 0  # connections still sending their request, closed to make room
        self.paced = 0
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        self._pace()
        if not self._slots.acquire(blocking=False):
            # every slot taken: the connection that has been sending its request longest
            # (a slow loris) makes room, so real scrapes are served however many trickle
            victim = self._oldest_reading()
            if victim is None or not self._evict(victim):
                self.refused += 1
                self.shutdown_request(request)
                return
        now = time.monotonic()
        with self._open_lock:
            self._open[request] = now + DEADLINE_S
            self._reading[request] = now
        try:
            super().process_request(request, client_address)
        except Exception:
            self._forget(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._forget(request)

    def _pace(self) -> None:
        """Wait (in the accepting thread: the next connections wait in the backlog) until
        this request is within REQUESTS_PER_S after a burst of REQUEST_BURST."""
        now = time.monotonic()
        self._tat = max(self._tat, now) + 1 / REQUESTS_PER_S
        wait = self._tat - now - REQUEST_BURST / REQUESTS_PER_S
        if wait > 0:
            self.paced += 1
            time.sleep(wait)

    def request_read(self, request: Any) -> None:
        """The handler has the whole request: from now on it is a scrape, not evictable."""
        with self._open_lock:
            self._reading.pop(request, None)

    def _oldest_reading(self) -> Any:
        with self._open_lock:
            if not self._reading:
                return None
            return min(self._reading.items(), key=lambda item: item[1])[0]

    def _evict(self, victim: Any) -> bool:
        """Close ``victim`` and take its slot once its thread lets go (True), within 1 s."""
        try:
            victim.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.evicted += 1
        return self._slots.acquire(timeout=1.0)

    def _forget(self, request: Any) -> None:
        with self._open_lock:
            self._reading.pop(request, None)
            if self._open.pop(request, None) is None:
                return
        self._slots.release()

    def reap(self) -> int:
        """Shut down connections past their deadline (their thread then ends); how many."""
        now = time.monotonic()
        with self._open_lock:
            late = [r for r, deadline in self._open.items() if deadline <= now]
            late += [r for r, since in self._reading.items() if now - since >= REQUEST_DEADLINE_S]
        for request in late:
            try:
                request.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        return len(late)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Quiet, as :meth:`_Handler.log_message`."""


class MetricsServer:
    """``GET /metrics`` on ``address`` (see :func:`parse_metrics_address`), answering with
    ``render()``. :meth:`start` returns the URL; :meth:`close` stops it."""

    def __init__(self, render: Callable[[], bytes], address: str) -> None:
        self.host, self.port = parse_metrics_address(address)
        self.render = render
        self._server: _Server | None = None
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    @property
    def scrapes(self) -> int:
        return self._server.scrapes if self._server is not None else 0

    def start(self) -> str:
        """Bind and serve on background threads; the bound URL (port 0 resolved). OSError when
        the address cannot be bound."""
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        self._server = _Server((self.host, self.port), self.render, family)
        self.port = self._server.server_address[1]
        serve = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
            name="metrics-http", daemon=True,
        )  # fmt: skip
        reaper = threading.Thread(target=self._reap, name="metrics-reaper", daemon=True)
        self._threads = [serve, reaper]
        for thread in self._threads:
            thread.start()
        return self.url

    def _reap(self) -> None:
        while not self._stop.wait(0.25):
            if self._server is not None:
                self._server.reap()

    def close(self) -> None:
        """Stop serving and release the port. Idempotent."""
        self._stop.set()
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
        self._threads = []
