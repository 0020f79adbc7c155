"""The telemetry socket: state on connect, then the live stream; control commands back.

Why these defaults: the stream shows what a machine is doing and the commands change it, so by
default it is a Unix socket in a fresh directory only the user can enter (0700, the socket
0600), and the path is printed. TCP is for a dashboard on another terminal of the same machine
only: loopback addresses, and a token (from a file, never the command line) that must come in
the first frame, compared in constant time.

Per connection: one thread reads framed commands and hands them to the engine. One thread for
every connection writes the subscriptions' events (``hello``, ``snapshot``, retained events,
live; ``lag`` when the client fell behind), without blocking on any one client: a connection
costs one thread start, not two, and the workers (GIL-bound) feel a connect/close storm less.
Bad framing closes only that connection; the engine keeps running.
"""

from __future__ import annotations

import errno
import fcntl
import hmac
import ipaddress
import os
import queue
import select
import socket
import stat
import struct
import tempfile
import termios
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Protocol

from provetop.base.errors import UsageError
from provetop.base.files import read_regular
from provetop.engine.settings.tuning import ACCEPT_BURST, ACCEPT_RATE
from provetop.engine.telemetry.bus import Bus, Subscription
from provetop.recordings.address import Address, AddressError, parse_address
from provetop.recordings.framing import HEADER_SIZE, FrameDecoder, FrameError, encode_frame

# The whole TCP handshake (connect to a valid auth frame) must fit in this many seconds, however
# the bytes trickle in: a deadline, not a timeout per recv, so a slot cannot be held for long.
AUTH_TIMEOUT_S = 10.0
# A connection that failed TCP authentication is closed this long after its failure (or at once
# when a new connection evicts it): a guesser on one connection gets one answer a second. It
# holds no lock meanwhile, so a right token on another connection is never delayed.
AUTH_FAIL_DELAY_S = 1.0
AUTH_REPORT_S = 1.0  # failed authentications are recorded as at most one event per this long
# Client frames are commands of a few hundred bytes. Decoded msgpack can take ~64x its size in
# Python objects, so the engine reads client frames with this limit, not the 16 MiB of the
# event stream: at most ~4 MiB of objects per connection, authenticated or not.
CLIENT_MAX_FRAME = 64 << 10
RECV_BYTES = 65536
MAX_CLIENTS = 64  # connections served at once; more are closed at accept
# Slots that connections still in the TCP handshake may never take: an authenticated client
# always finds one. When the handshake slots are full the oldest unauthenticated connection is
# closed to make room, so a crowd of silent or trickling connections cannot keep anyone out.
AUTH_RESERVE = 16
# accept() failures (EMFILE, ENFILE, ENOBUFS, ...) are waited out, doubling up to this pause; the
# first of a run of them, and the recovery, are reported as ``fault`` events.
ACCEPT_BACKOFF_MAX_S = 1.0
# Every command, refused or not, is a recorded event; a connection sending more than this many
# in one second is cut (with one refusal), so no client can flood the recording or the others.
MAX_COMMANDS_PER_S = 100
# ... and every connection together is served at most this many commands a second (a shared
# budget, taken in turn: a flood from many connections waits in their sockets, the engine
# handles, records and broadcasts no more than this, so no mix of clients costs the run much)
COMMANDS_PER_S_TOTAL = 20
COMMAND_BURST = 20
# A connection waiting for its turn is checked this often for a sender that has hung up: what
# such a sender left queued in its socket (a flood of commands stays there at the budget's
# pace, 20 connections at 95/s for 8 s left ~750 s of turns) is dropped with the connection
# instead of holding a slot and the budget's turns long after the client is gone
HANGUP_POLL_S = 0.2
# At the connection cap, a new connection closes the one idle longest (nothing read from it and
# none of its stream taken for at least this long), so idle clients cannot lock the operator out
IDLE_EVICT_S = 1.0
IDLE_PROBE_S = 0.05  # how long a candidate is watched for reading before it is closed
# Evictions of idle clients a second, after a burst: each one hands the newcomer the whole
# join (hello, snapshot, retained events), so a crowd of idle newcomers churning through the
# slots would cost the run more than it saves; beyond the pace a newcomer is refused as before
IDLE_EVICT_RATE = 2.0
IDLE_EVICT_BURST = 4
WRITE_BATCH_BYTES = 256 << 10  # events sent to a client in one write, at most about this much
WRITE_COALESCE_S = 0.01  # the writer thread's pause between two rounds of every client's writes
# Encoded events kept for the other clients: enough for the bus's retained history (20,000
# events) and its join snapshot, which every joining client is sent; with 4,096 a client
# joining re-encoded most of its history, and a connect/close storm spent the workers' GIL on it
ENCODE_CACHE = 32768
ENCODE_CACHE_BYTES = 16 << 20  # and at most this many bytes of them (snapshots are large)
INITIAL_SLICE = 1024  # initial events the writer takes from a subscription at once
# Encoded slices of initial events kept: clients joining from the same join snapshot are sent
# the same slices (the retained history only grows at its end between two turns), so a storm
# of connections costs one dict lookup per slice, not one per event
CHUNK_CACHE = 64
CHUNK_CACHE_BYTES = 32 << 20
# A connection's reader thread waits this long for the next connection before it ends: a
# thread started per connection cost a clone and a GIL hand-over with the accept thread
# (Thread.start waits for the new thread to run), taken from the workers in a storm. At most
# MAX_CLIENTS readers exist, idle ones included.
READER_IDLE_S = 30.0


MAX_TOKEN_FILE = 4096  # bytes of a token file (a token is 8 to a few hundred characters)


class ListenError(ValueError):
    """A --listen value the engine refuses (one line for the CLI)."""


class ClientDrops(Protocol):
    """The injected faults the listener asks about
    (``provetop.engine.partition.faults.FaultInjector``)."""

    def drop_client(self) -> bool:
        """Called once per accepted client; True when this one is to be dropped."""
        ...


def parse_listen(spec: str | None) -> tuple[str, str | None, int | None]:
    """``None``/"unix" -> ("unix", None, None); "unix:PATH" (or a bare path) -> ("unix", PATH,
    None); "tcp://127.0.0.1:PORT" -> ("tcp", host, port). The syntax is the clients' own
    (:func:`provetop.recordings.address.parse_address`); the policy is the server's: non-loopback
    hosts
    are refused, and ``localhost`` is 127.0.0.1."""
    try:
        address = parse_address(spec)
    except AddressError as exc:
        raise ListenError(f"--listen: {exc}") from None
    if address.kind == "unix":
        return ("unix", address.path or None, None)
    host = "127.0.0.1" if address.host == "localhost" else address.host
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ListenError(f"--listen {spec!r}: only loopback addresses are allowed")
    return ("tcp", host, address.port)


def read_token(path: str) -> str:
    """The token in ``path`` (surrounding whitespace ignored); ListenError when unusable.

    Like ssh with its keys, a token file that other users can read is refused: anyone who can
    read it can control the engine."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise ListenError(f"cannot read --token-file {path}: {exc.strerror or exc}") from None
    if mode & 0o077:
        raise ListenError(
            f"--token-file {path} can be read by other users (mode {mode & 0o777:o}); "
            f"run: chmod 600 {path}"
        )
    try:  # a regular file of at most 4 KiB: a FIFO would block start-up, a huge file fill memory
        raw = read_regular(path, MAX_TOKEN_FILE, "--token-file")
    except UsageError as exc:
        raise ListenError(str(exc)) from None
    try:
        token = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise ListenError(f"--token-file {path}: not UTF-8 text") from None
    if len(token) < 8:
        raise ListenError(f"--token-file {path}: the token must be at least 8 characters")
    return token


class TelemetryServer:
    """Serves ``bus`` subscriptions; ``on_command(frame, client)`` handles each decoded frame
    (``frame`` is None with an error string when framing broke: ``on_bad_frame``)."""

    def __init__(
        self,
        bus: Bus,
        on_command: Callable[[dict[str, Any], str], object],
        on_bad_frame: Callable[[str, str], None],
        *,
        listen: str | None = None,
        token: str | None = None,
    ) -> None:
        self.bus = bus
        self.on_command = on_command
        self.on_bad_frame = on_bad_frame
        self.kind, self._path, self._port = parse_listen(listen)
        if self.kind == "tcp" and not token:
            raise ListenError("--listen tcp:// needs --token-file")
        self.token = token
        self._sock: socket.socket | None = None
        self._dir: str | None = None
        self._conns: set[socket.socket] = set()
        # connections still in the TCP handshake, oldest first (AUTH_RESERVE)
        self._handshaking: OrderedDict[socket.socket, None] = OrderedDict()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self.address = ""
        self.socket_path: str | None  # the Unix socket (None on TCP), set by start()
        self._counter = 0
        # SO_SNDBUF for client connections (None: the kernel's default). Small buffers make a
        # slow client fall behind, and see ``lag``, after a few events instead of megabytes.
        self.send_buffer: int | None = None
        self.faults: ClientDrops | None = None  # drop:client:K, or None
        self._auth_lock = threading.Lock()  # the failure counters
        self._auth_unreported = 0
        self._auth_reported_at = float("-inf")
        self._cache: OrderedDict[int, tuple[dict[str, Any], bytes]] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._cache_bytes = 0
        self._chunks: OrderedDict[
            tuple[int, int, int], tuple[dict[str, Any], dict[str, Any], bytes]
        ] = OrderedDict()
        self._chunk_bytes = 0
        self._outs: dict[socket.socket, _Out] = {}  # connections the writer thread serves
        self._outs_lock = threading.Lock()
        # a pipe the writer thread polls beside its joining clients' sockets: a new connection
        # is served at once, not after the round's pause (made in start(), closed by the writer)
        self._wake_r = self._wake_w = -1
        self._wake_lock = threading.Lock()  # no write to the pipe once it is being closed
        self.auth_failures = 0
        self.refused_clients = 0  # connections closed at accept (over MAX_CLIENTS)
        self.evicted_handshakes = 0  # unauthenticated connections closed to make room
        self.accept_errors = 0
        self.accept_rate = ACCEPT_RATE  # PROVETOP_ACCEPT_RATE (0: unpaced)
        self.paced_accepts = 0  # accepts that waited for the pace
        self._tokens = float(ACCEPT_BURST)
        self._tokens_at = time.monotonic()
        self._readers = _Readers(self._serve, READER_IDLE_S, self._report)
        self.budget = Budget(COMMANDS_PER_S_TOTAL, COMMAND_BURST)
        self.evicted_idle = 0  # idle connections closed to make room at the cap
        self._evictions = Budget(IDLE_EVICT_RATE, IDLE_EVICT_BURST)
        add_counters = getattr(bus, "add_counters", None)
        if add_counters is not None:  # (a test's stand-in bus may have none)
            add_counters(self.listener_counters)

    def listener_counters(self) -> dict[str, int]:
        """The listener's own figures, carried by every ``counters`` event to the dashboard,
        the recording and /metrics: a storm of connections or of bad tokens shows there."""
        return {
            "refused_clients": self.refused_clients,
            "evicted_handshakes": self.evicted_handshakes,
            "auth_failures": self.auth_failures,
            "accept_errors": self.accept_errors,
            "paced_accepts": self.paced_accepts,
            "evicted_idle": self.evicted_idle,
            "paced_commands": self.budget.waited,
            "hung_up_dropped": self.budget.abandoned,
            "reader_threads": self._readers.alive,
        }

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> str:
        """Bind, listen, start accepting; return the address to print."""
        if self.kind == "unix":
            if self._path is None:
                base = os.environ.get("XDG_RUNTIME_DIR")
                if not base or not os.path.isdir(base):
                    base = None
                self._dir = tempfile.mkdtemp(prefix="provetop-", dir=base)  # mode 0700
                os.chmod(self._dir, 0o700)
                path = os.path.join(self._dir, "engine.sock")
            else:
                path = os.path.abspath(self._path)
                _clear_stale_socket(path)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            old = os.umask(0o177)
            try:
                sock.bind(path)
            except OSError as exc:
                sock.close()
                raise ListenError(f"cannot listen on {path}: {exc.strerror or exc}") from None
            finally:
                os.umask(old)
            os.chmod(path, 0o600)
            self.socket_path = path
            self.address = str(Address("unix", path=path))
        else:
            assert self._path is not None and self._port is not None  # parse_listen's tcp
            family = socket.AF_INET6 if ":" in self._path else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((self._path, self._port))
            except OSError as exc:
                sock.close()
                raise ListenError(f"cannot listen on {self._path}:{self._port}: {exc}") from None
            host, port = sock.getsockname()[:2]
            self.socket_path = None
            self.address = str(Address("tcp", host=host, port=port))
        sock.listen(16)
        self._sock = sock
        threading.Thread(target=self._accept_loop, name="telemetry-accept", daemon=True).start()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        threading.Thread(target=self._write_loop, name="telemetry-writer", daemon=True).start()
        return self.address

    def close(self) -> None:
        """Stop accepting, close every connection, remove the socket and its directory."""
        self._closed.set()
        self._wake()
        self._readers.close()
        if self._sock is not None:
            # On Linux close() alone leaves a thread blocked in accept() blocked for good (the
            # call holds its own reference to the socket); shutdown() wakes it with EINVAL,
            # which ends the accept loop, so a closed listener leaves no thread behind.
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                self._sock.close()
            except OSError:
                pass
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            _shutdown(conn)
        socket_path = getattr(self, "socket_path", None)  # (none before start())
        if self.kind == "unix" and socket_path:
            try:
                os.unlink(socket_path)
            except OSError:
                pass
            if self._dir:
                try:
                    os.rmdir(self._dir)
                except OSError:
                    pass

    # -- connections --------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        """Accept until closed. An accept() error never ends the loop: a process out of file
        descriptors would otherwise stop serving for the rest of the run, silently."""
        assert self._sock is not None
        backoff = 0.0
        while not self._closed.is_set():
            if not self._pace():
                return
            try:
                conn, _addr = self._sock.accept()
            except OSError as exc:
                if self._closed.is_set() or exc.errno in (errno.EBADF, errno.EINVAL):
                    return  # the listening socket was closed
                backoff = self._accept_failed(exc, backoff)
                continue
            if backoff:
                backoff = 0.0
                self._report(
                    f"telemetry listener accepts again after {self.accept_errors} "
                    "failed accept() calls"
                )
            self._admit(conn)

    def _pace(self) -> bool:
        """Wait until the next accept is within the pace (a token bucket of ACCEPT_BURST
        refilled at ``accept_rate`` a second) and take its token; False once closed."""
        if self.accept_rate <= 0:
            return True
        now = time.monotonic()
        self._tokens = min(ACCEPT_BURST, self._tokens + (now - self._tokens_at) * self.accept_rate)
        self._tokens_at = now
        if self._tokens < 1:
            self.paced_accepts += 1
            if self._closed.wait((1 - self._tokens) / self.accept_rate):
                return False
            self._tokens, self._tokens_at = 1.0, time.monotonic()
        self._tokens -= 1
        return True

    def _accept_failed(self, exc: OSError, backoff: float) -> float:
        """Count, report the first failure of a run, wait, and return the next pause."""
        self.accept_errors += 1
        if not backoff:
            self._report(
                f"telemetry listener: accept() failed ({exc.strerror or exc}); "
                "retrying with backoff, the socket keeps serving"
            )
        backoff = min(ACCEPT_BACKOFF_MAX_S, max(0.01, backoff * 2))
        self._closed.wait(backoff)
        return backoff

    def _report(self, message: str) -> None:
        try:
            self.bus.emit("fault", kind="exception", site="listener", message=message)
        except Exception:  # noqa: BLE001 (a closed bus: nobody left to tell)
            pass

    def _admit(self, conn: socket.socket) -> None:
        """Take a slot for ``conn`` (or refuse it) and start its handler thread."""
        evict = None
        with self._lock:
            full = len(self._conns) >= MAX_CLIENTS
            waiting = len(self._handshaking)
            if waiting and (full or waiting >= MAX_CLIENTS - AUTH_RESERVE):
                # the oldest unauthenticated connection makes room (its slot frees as soon as
                # its handler sees the shutdown)
                evict, _ = self._handshaking.popitem(last=False)
                self.evicted_handshakes += 1
                full = False
        if full and self._evictions.available():
            evict = self._idlest()
            if evict is not None:
                self._evictions.spend()
                self.evicted_idle += 1
                full = False
        if evict is not None:
            try:  # its handler's recv returns b"": it closes and frees the slot itself
                evict.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if full:
            self.refused_clients += 1
            _shutdown(conn)
            return
        self._counter += 1
        name = f"{self.kind}#{self._counter}"
        if self.send_buffer:
            try:
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer)
            except OSError:
                pass
        with self._lock:
            self._conns.add(conn)
            if self.kind == "tcp":
                self._handshaking[conn] = None
        # decided here, in accept order, so "the K-th client" is the one named #K (the
        # handler threads reach any later point in whatever order the scheduler picks)
        drop = self.faults is not None and self.faults.drop_client()
        self._readers.run((conn, name, drop))

    def _idlest(self) -> socket.socket | None:
        """At the cap: the connection idle longest, if one is idle. Idle: it has sent nothing
        for IDLE_EVICT_S and does not read its stream (bytes we sent wait unread in its socket
        and none of them are taken within IDLE_PROBE_S). A dashboard reads along (its unread
        bytes are none or shrinking), so it is never chosen while it watches."""
        now = time.monotonic()
        with self._outs_lock:
            outs = [o for o in self._outs.values() if not o.gone and now - o.active >= IDLE_EVICT_S]
        first = {id(o): _unread(o.conn) for o in outs}
        if not any(first.values()):
            return None
        self._closed.wait(IDLE_PROBE_S)
        idle = []
        for o in outs:
            before, after = first[id(o)], _unread(o.conn)
            if before and after and after >= before:
                idle.append((o.active, o.conn))
            else:
                o.active = now  # it reads: not idle
        return min(idle, key=lambda item: item[0])[1] if idle else None

    def _serve(self, conn: socket.socket, name: str, drop: bool = False) -> None:
        decoder = FrameDecoder(
            max_buffer=CLIENT_MAX_FRAME + HEADER_SIZE + RECV_BYTES, max_frame=CLIENT_MAX_FRAME
        )
        sub: Subscription | None = None
        try:
            if self.kind == "tcp" and not self._authenticate(conn, decoder, name):
                return
            sub = self.bus.subscribe(name)
            with self._outs_lock:
                self._outs[conn] = _Out(conn, sub)
            self._wake()
            if drop:
                self._drop(sub, name)
                return
            window, in_window = time.monotonic(), 0
            data = b""  # frames that came with the auth frame are in the decoder already
            out = self._outs.get(conn)
            while not self._closed.is_set():
                try:
                    decoder.feed(data)
                    # counted as they arrive (a connection's own cap), then served in turn
                    # within the budget every connection shares
                    frames = list(decoder.frames())
                    now = time.monotonic()
                    if now - window >= 1.0:
                        window, in_window = now, 0
                    in_window += len(frames)
                    over = in_window > MAX_COMMANDS_PER_S
                    if over:
                        frames = frames[: max(0, len(frames) - (in_window - MAX_COMMANDS_PER_S))]
                    for frame in frames:
                        if not self.budget.take(self._closed, lambda: _hung_up(conn)):
                            return
                        self.on_command(frame, name)
                    if over:
                        raise FrameError(f"more than {MAX_COMMANDS_PER_S} commands in one second")
                except FrameError as exc:
                    self.on_bad_frame(str(exc), name)
                    if not self._closed.is_set():  # a closing engine sends nothing more
                        self.bus.flush(2.0)  # let the refusal reach this client first
                        _wait_drained(sub, 2.0, self._closed)
                    return
                try:
                    data = conn.recv(RECV_BYTES)
                except OSError:
                    return
                if not data:
                    return
                if out is not None:
                    out.active = time.monotonic()
        finally:
            if sub is not None:
                sub.close()
            with self._outs_lock:
                out = self._outs.pop(conn, None)
            if out is not None:
                with out.lock:  # the writer is not inside a send on it: the fd can be closed
                    out.gone = True
            _shutdown(conn)
            with self._lock:
                self._conns.discard(conn)
                self._handshaking.pop(conn, None)

    def _drop(self, sub: Subscription, name: str) -> None:
        """Injected fault (drop:client:K): let the initial events go out, then disconnect.

        Waits until the writer has *sent* them (``initial_sent``, set once the kernel has them).
        It used to wait until they were taken from the queue and then sleep 50 ms for the send:
        on a loaded machine the send came later, the client got nothing (not even ``hello``),
        about one run in fourteen. Live events keep arriving, so an empty queue is never
        waited for: a short run would end before the client is dropped."""
        sub.initial_sent.wait(10.0)
        self.bus.dropped_clients += 1
        self.bus.emit(
            "fault",
            kind="client_dropped",
            message=f"client {name} disconnected by the engine (injected)",
            injected=True,
        )

    def _authenticate(self, conn: socket.socket, decoder: FrameDecoder, name: str) -> bool:
        """The first frame on TCP must be {"k": "auth", "token": ...} with the right token.

        A wrong token, a malformed or oversized first frame, or silence for AUTH_TIMEOUT_S
        fails: counted (and recorded, at most once a second), and the connection is closed
        AUTH_FAIL_DELAY_S later. A failure costs microseconds of engine time and delays no
        other connection, so a right token gets in at once during a flood of wrong ones."""
        deadline = time.monotonic() + AUTH_TIMEOUT_S
        frame: dict[str, Any] | None = None
        try:
            while True:
                frame = decoder.next_frame()
                if frame is not None:
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("the handshake's deadline passed")
                conn.settimeout(left)
                data = conn.recv(4096)
                if not data:
                    return False  # gone (or evicted) without trying: nothing to throttle
                decoder.feed(data)
        except (OSError, FrameError):
            frame = None
        finally:
            try:
                conn.settimeout(None)
            except OSError:
                pass
        token = frame.get("token") if frame is not None and frame.get("k") == "auth" else None
        ok = (
            isinstance(token, str)
            and self.token is not None
            and hmac.compare_digest(token.encode(), self.token.encode())
        )
        if ok:
            with self._lock:
                self._handshaking.pop(conn, None)
            return True
        self._auth_failed(name)
        # The penalty holds only this connection, still an evictable handshake: a right token
        # on another connection is never queued behind it (it was, behind a lock held 1 s per
        # failure: a flood of wrong tokens kept the operator out for as long as it lasted).
        # Waiting on the socket, not sleeping, so an eviction ends the wait at once.
        _wait_closed(conn, AUTH_FAIL_DELAY_S)
        return False

    def _auth_failed(self, name: str) -> None:
        """Count a failed authentication; record the first of each AUTH_REPORT_S window as a
        refused ``control`` event, with the number since the last one, so a flood of guesses
        costs the recording one event a second, not one per guess."""
        now = time.monotonic()
        with self._auth_lock:
            self.auth_failures += 1
            self._auth_unreported += 1
            if now - self._auth_reported_at < AUTH_REPORT_S:
                return
            self._auth_reported_at = now
            count, self._auth_unreported = self._auth_unreported, 0
        more = f"; {count} failures since the last report" if count > 1 else ""
        self.on_bad_frame(f"authentication failed (wrong, missing or late token){more}", name)

    def _encode(self, event: dict[str, Any]) -> bytes:
        """One encoding per event for all clients (they share the event objects); the cache
        holds the event itself, so its id cannot be reused while the entry lives."""
        return self._encode_many((event,))[0]

    def _encode_many(self, events: tuple[dict[str, Any], ...]) -> list[bytes]:
        """:meth:`_encode` of several events with one lock round for the cache hits."""
        cache = self._cache
        with self._cache_lock:
            frames: list[bytes | None] = []
            for event in events:
                hit = cache.get(id(event))
                frames.append(hit[1] if hit is not None and hit[0] is event else None)
        if None not in frames:
            return frames  # type: ignore[return-value]
        missing = [(i, encode_frame(events[i])) for i, f in enumerate(frames) if f is None]
        with self._cache_lock:
            for i, frame in missing:
                frames[i] = frame
                event = events[i]
                key = id(event)
                if key in cache:
                    self._cache_bytes -= len(cache.pop(key)[1])
                cache[key] = (event, frame)
                self._cache_bytes += len(frame)
            while cache and (len(cache) > ENCODE_CACHE or self._cache_bytes > ENCODE_CACHE_BYTES):
                self._cache_bytes -= len(cache.popitem(last=False)[1][1])
        return frames  # type: ignore[return-value]

    def _encode_chunk(self, events: tuple[dict[str, Any], ...]) -> bytes:
        """The frames of a slice of initial events, joined, once for every client sent the
        same slice. A slice of the bus's event sequence is named by its first and last
        events and its length (the entry keeps both alive, so their ids stay theirs)."""
        first, last = events[0], events[-1]
        key = (id(first), id(last), len(events))
        with self._cache_lock:
            hit = self._chunks.get(key)
            if hit is not None and hit[0] is first and hit[1] is last:
                self._chunks.move_to_end(key)
                return hit[2]
        data = b"".join(self._encode_many(events))
        with self._cache_lock:
            if key not in self._chunks:
                self._chunks[key] = (first, last, data)
                self._chunk_bytes += len(data)
            while self._chunks and (
                len(self._chunks) > CHUNK_CACHE or self._chunk_bytes > CHUNK_CACHE_BYTES
            ):
                self._chunk_bytes -= len(self._chunks.popitem(last=False)[1][2])
        return data

    def _write_loop(self) -> None:
        """Every WRITE_COALESCE_S, one batch for every connection, sent without blocking: a
        client costs the engine no thread and at most ~1/WRITE_COALESCE_S sends a second,
        whatever the event rate, and each event is encoded once for every client. A client's
        initial events (thousands for one joining a long run) go in encoded slices, as fast
        as its socket takes them; a client that stops reading only stops its own writes."""
        try:
            while not self._closed.is_set():
                with self._outs_lock:
                    outs = list(self._outs.values())
                # the next round comes after the pause, a new connection, or room in the
                # socket of a client whose initial events are still going out
                poller = select.poll()
                poller.register(self._wake_r, select.POLLIN)
                for out in outs:
                    if self._serve_out(out):
                        try:
                            poller.register(out.conn, select.POLLOUT)
                        except (OSError, ValueError):  # closed meanwhile: next round
                            pass
                poller.poll((WRITE_COALESCE_S if outs else 0.5) * 1000)
                try:
                    os.read(self._wake_r, 4096)
                except BlockingIOError:
                    pass
        finally:
            with self._wake_lock:
                fds, self._wake_r, self._wake_w = (self._wake_r, self._wake_w), -1, -1
            for fd in fds:
                os.close(fd)

    def _wake(self) -> None:
        """The writer thread starts its next round now (a connection came or the server
        is closing)."""
        with self._wake_lock:
            if self._wake_w < 0:  # not started, or the writer has stopped
                return
            try:
                os.write(self._wake_w, b"\0")
            except BlockingIOError:  # full: a round is due anyway
                pass

    def _serve_out(self, out: _Out) -> bool:
        """Send what ``out`` may send now; True while its initial events are still going out
        (the loop then waits for its socket rather than a full pause)."""
        with out.lock:
            if out.gone:
                return False
            sub = out.sub
            try:
                while True:
                    if out.buf:
                        n = out.conn.send(out.buf, socket.MSG_DONTWAIT)
                        out.buf = out.buf[n:]
                        if out.buf:
                            return not sub.initial_sent.is_set()
                    initial = sub.take_initial(INITIAL_SLICE)
                    if initial:
                        out.buf = memoryview(self._encode_chunk(initial))
                        continue
                    if not sub.initial_sent.is_set():
                        sub.initial_sent.set()
                    if out.sent_live:  # one live batch per client per round
                        out.sent_live = False
                        return False
                    frames, size = [], 0
                    while size < WRITE_BATCH_BYTES:
                        event = sub.get(0)
                        if event is None:
                            break
                        frames.append(self._encode(event))
                        size += len(frames[-1])
                    if not frames:
                        return False
                    out.buf = memoryview(b"".join(frames))
                    out.sent_live = True
            except (BlockingIOError, InterruptedError):
                return not sub.initial_sent.is_set()
            except (OSError, FrameError):
                out.gone = True
                try:  # the reader's recv returns: it closes the connection and frees the slot
                    out.conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                return False


class _Out:
    """One connection as the writer thread sees it: its subscription and the bytes taken from
    it that the socket has not accepted yet. ``lock`` is held while the writer sends, so the
    reader closes the socket only between two sends (its descriptor is never reused under
    a send in progress)."""

    __slots__ = ("conn", "sub", "buf", "sent_live", "gone", "lock", "active")

    def __init__(self, conn: socket.socket, sub: Subscription) -> None:
        self.conn = conn
        # when the client last sent something (or was seen reading its stream, by _idlest):
        # the idlest goes first when the connection cap is reached
        self.active = time.monotonic()
        self.sub = sub
        self.buf: memoryview | None = None
        self.sent_live = False
        self.gone = False
        self.lock = threading.Lock()


class Budget:
    """A token bucket shared by every connection: ``take`` waits (in arrival order, each
    connection's reader holding one place in the line) until the next command is within
    ``rate`` a second after a burst of ``burst``. A flood from any number of connections then
    costs the engine ``rate`` commands a second; the rest wait in their sockets."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate = float(rate)
        self.burst = float(burst)
        self._lock = threading.Lock()
        self._tat = 0.0  # theoretical arrival time of the next command (GCRA)
        self.waited = 0  # commands that had to wait for their turn
        self.abandoned = 0  # connections dropped while waiting: their sender had hung up

    def available(self) -> bool:
        """Whether one more would go now, without waiting (nothing is taken)."""
        with self._lock:
            now = time.monotonic()
            return max(self._tat, now) + 1 / self.rate - now - self.burst / self.rate <= 0

    def spend(self) -> None:
        """Take one without waiting (after :meth:`available`)."""
        with self._lock:
            self._tat = max(self._tat, time.monotonic()) + 1 / self.rate

    def take(self, closed: threading.Event, gone: Callable[[], bool] | None = None) -> bool:
        """Wait for this command's turn; False when ``closed`` is set meanwhile, or when
        ``gone`` (asked every HANGUP_POLL_S of the wait) says the sender has hung up: its turn
        is given back and the caller drops the connection with what it still had queued."""
        if self.rate <= 0:
            return True
        with self._lock:
            now = time.monotonic()
            self._tat = max(self._tat, now) + 1 / self.rate
            wait = self._tat - now - self.burst / self.rate
        if wait <= 0:
            return True
        self.waited += 1
        deadline = now + wait
        while (left := deadline - time.monotonic()) > 0:
            if closed.wait(min(left, HANGUP_POLL_S)):
                return False
            if gone is not None and gone():
                with self._lock:  # the turn goes to the next in line
                    self._tat = max(time.monotonic(), self._tat - 1 / self.rate)
                self.abandoned += 1
                return False
        return True


class _Readers:
    """Threads that each serve one connection at a time and then wait for the next, so a
    connection usually starts no thread. Never more threads than connections served at once
    plus the idle ones, and idle ones end after ``idle_s``."""

    def __init__(
        self, serve: Callable[..., None], idle_s: float, on_error: Callable[[str], None]
    ) -> None:
        self._serve = serve
        self._idle_s = idle_s
        self._on_error = on_error
        self._closed = False
        self._jobs: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0  # readers waiting on _jobs
        self.started = 0  # threads started over the server's life
        self.alive = 0  # threads not ended yet, busy or idle

    def run(self, job: tuple[Any, ...]) -> None:
        """Serve ``job`` on an idle reader, or on a new one when none waits."""
        with self._lock:
            if self._idle:
                self._idle -= 1
                self._jobs.put(job)
                return
            self.started += 1
            self.alive += 1
            n = self.started
        threading.Thread(
            target=self._loop, args=(job,), name=f"telemetry-reader-{n}", daemon=True
        ).start()

    def close(self) -> None:
        """Idle readers end now (busy ones end with their connection, which close() shuts)."""
        with self._lock:
            idle, self._idle, self._closed = self._idle, 0, True
        for _ in range(idle):
            self._jobs.put(None)

    def _loop(self, job: tuple[Any, ...] | None) -> None:
        try:
            self._serve_until_idle(job)
        finally:
            with self._lock:
                self.alive -= 1

    def _serve_until_idle(self, job: tuple[Any, ...] | None) -> None:
        me = threading.current_thread()
        base = me.name
        while job is not None:
            # named after the client it serves (a stack dump or py-spy then says whose
            # connection a reader is blocked on), back to its own name when idle
            me.name = f"{base}:{job[1]}" if len(job) > 1 else base
            try:
                self._serve(*job)
            except Exception as exc:  # noqa: BLE001 (a fault event; the engine keeps serving)
                self._on_error(f"telemetry connection handler failed: {exc!r}")
            me.name = base
            with self._lock:
                if self._closed:
                    return
                self._idle += 1
            while True:
                try:
                    job = self._jobs.get(timeout=self._idle_s)
                    break
                except queue.Empty:
                    with self._lock:  # a job put under the lock is taken, never stranded
                        if self._jobs.empty():
                            self._idle -= 1
                            return


def _clear_stale_socket(path: str) -> None:
    """Make way at ``path`` for a new socket, or say in one line why not.

    An engine killed with SIGKILL leaves its socket file behind; a restart on the same
    ``unix:PATH`` must not need someone to remove it by hand. A socket nothing answers on is
    stale and removed; one that answers belongs to a live engine, and anything that is not a
    socket is never touched."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ListenError(f"cannot listen on {path}: {exc.strerror or exc}") from None
    if not stat.S_ISSOCK(mode):
        raise ListenError(f"--listen {path}: the path already exists (and is not a socket)")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
    except (ConnectionRefusedError, FileNotFoundError):
        live = False
    except OSError as exc:  # a full backlog, a timeout: someone is there
        live = exc.errno not in (errno.ECONNREFUSED, errno.ENOENT)
    else:
        live = True
    finally:
        probe.close()
    if live:
        raise ListenError(f"--listen {path}: another engine is listening there")
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise ListenError(f"cannot remove the stale socket {path}: {exc.strerror or exc}") from None


def _wait_closed(conn: socket.socket, timeout: float) -> None:
    """Wait up to ``timeout`` for the peer (or an eviction's shutdown) to end ``conn``;
    whatever it sends meanwhile is discarded."""
    deadline = time.monotonic() + timeout
    try:
        while (left := deadline - time.monotonic()) > 0:
            conn.settimeout(left)
            if not conn.recv(4096):
                return
    except OSError:  # the timeout, or a reset
        return


def _wait_drained(sub: Subscription, timeout: float, closed: threading.Event) -> None:
    """Give the writer thread a moment to send what is queued (the refusal) before closing;
    not when the listener closes meanwhile: its writer has stopped, and the reader would
    otherwise outlive the engine's close by the whole timeout."""
    deadline = time.monotonic() + timeout
    while sub.pending() and time.monotonic() < deadline:
        if closed.wait(0.01):
            return
    closed.wait(0.05)


def _hung_up(conn: socket.socket) -> bool:
    """Whether the peer has closed ``conn`` (both ways: POLLHUP, or POLLERR once our writes
    to a closed TCP peer were reset), whatever it left unread. A client that only shut down
    its sending side (still reading the answers) has not hung up."""
    poller = select.poll()
    poller.register(conn, select.POLLIN)
    try:
        events = poller.poll(0)
    except OSError:
        return True
    return any(mask & (select.POLLHUP | select.POLLERR | select.POLLNVAL) for _, mask in events)


def _unread(conn: socket.socket) -> int:
    """Bytes sent on ``conn`` that its peer has not read yet (SIOCOUTQ); 0 when unknown."""
    try:
        raw = fcntl.ioctl(conn.fileno(), termios.TIOCOUTQ, b"\0" * 4)
    except (OSError, ValueError):
        return 0
    return int(struct.unpack("i", raw)[0])


def _shutdown(conn: socket.socket) -> None:
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        conn.close()
    except OSError:
        pass
