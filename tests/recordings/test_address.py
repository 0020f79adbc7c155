"""One address syntax on both ends of the socket: the engine's ``--listen`` and a client's
ADDRESS are parsed by the same function, and the server adds only its policy."""

from __future__ import annotations

import pytest

from provetop.engine.telemetry.server import ListenError, parse_listen
from provetop.recordings.address import Address, AddressError, parse_address


def test_parse_address():
    assert parse_address("/tmp/x.sock") == Address("unix", path="/tmp/x.sock")
    assert parse_address("unix:/tmp/x.sock") == Address("unix", path="/tmp/x.sock")
    assert parse_address("unix").default and parse_address(None).default
    tcp = parse_address("tcp://127.0.0.1:7001")
    assert (tcp.kind, tcp.host, tcp.port) == ("tcp", "127.0.0.1", 7001)
    assert parse_address("tcp://[::1]:9").host == "::1"
    for bad in ("tcp://host", "tcp://:5", "tcp://h:99999", "http://x:1", "", "unix:"):
        with pytest.raises(AddressError):
            parse_address(bad)


@pytest.mark.parametrize(
    "text", ["unix:/tmp/e.sock", "/tmp/e.sock", "tcp://127.0.0.1:7001", "tcp://[::1]:7001"]
)
def test_printed_addresses_parse_back(text):
    address = parse_address(text)
    assert parse_address(str(address)) == address


@pytest.mark.parametrize(
    "spec", [None, "unix", "unix:/tmp/e.sock", "/tmp/e.sock", "tcp://127.0.0.1:0", "tcp://[::1]:9"]
)
def test_the_server_parses_as_the_client(spec):
    kind, where, port = parse_listen(spec)
    address = parse_address(spec)
    assert kind == address.kind
    if kind == "unix":
        assert (where or "") == address.path
    else:
        assert (where, port) == (address.host, address.port)


@pytest.mark.parametrize(
    "spec, message",
    [("udp://x", "unsupported address"), ("tcp://127.0.0.1", "expected tcp://HOST:PORT")],
)
def test_the_server_refuses_what_the_client_refuses(spec, message):
    with pytest.raises(AddressError, match=message):
        parse_address(spec)
    with pytest.raises(ListenError, match=message):
        parse_listen(spec)
