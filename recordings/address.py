"""The one parser of telemetry socket addresses, shared by the engine's server and its clients.

An address is written the same way on both ends of the socket (``docs/telemetry.md``, "Wire
protocol"): ``unix:PATH`` (or a bare path, as ``provetop engine`` prints it), ``unix`` alone
for the default, and ``tcp://HOST:PORT``. It lives beside the frame codec because both are the
wire protocol's: the engine (``provetop.engine.telemetry.server``) and the sources
(``provetop.sources.client``)
import it,
and neither imports the other. What each end does with the default, and which TCP hosts it
accepts, is its own policy: the server listens in a fresh private directory and only on
loopback; a client looks for the newest local engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["Address", "AddressError", "parse_address"]

EXPECTED = "expected unix, unix:PATH or tcp://HOST:PORT"


class AddressError(ValueError):
    """Text that is not a telemetry address (the message names what was expected)."""


@dataclass(frozen=True)
class Address:
    """A Unix socket path (``path == ""``: the default) or a TCP host and port."""

    kind: str  # "unix" or "tcp"
    path: str = ""
    host: str = ""
    port: int = 0

    def __str__(self) -> str:
        if self.kind == "tcp":
            return f"tcp://{self.host}:{self.port}"
        return f"unix:{self.path}" if self.path else "unix"

    @property
    def default(self) -> bool:
        """``unix`` without a path: whichever socket the end's policy picks."""
        return self.kind == "unix" and not self.path

    @property
    def short(self) -> str:
        """A label for a list of sources: the socket's file name, or HOST:PORT."""
        if self.kind == "tcp":
            return f"{self.host}:{self.port}"
        return Path(self.path).name if self.path else "unix"


def parse_address(text: str | None) -> Address:
    """``None`` or ``unix`` -> the default Unix socket; ``unix:PATH`` or a bare ``PATH`` -> that
    socket; ``tcp://HOST:PORT`` (``[::1]`` brackets allowed) -> TCP. Anything else, an empty
    path or a port outside 0..65535 raises :class:`AddressError`."""
    if text is None or text == "unix":
        return Address("unix")
    if text.startswith("tcp://"):
        host, sep, port = text[len("tcp://") :].rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not port.isdigit() or int(port) > 65535:
            raise AddressError(f"bad TCP address {text!r}: expected tcp://HOST:PORT")
        return Address("tcp", host=host, port=int(port))
    path = text.removeprefix("unix:")
    if not path:
        raise AddressError(f"empty address {text!r}: {EXPECTED}")
    if "://" in path:
        raise AddressError(f"unsupported address {text!r}: {EXPECTED}")
    return Address("unix", path=path)
