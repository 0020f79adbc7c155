"""A stand-in for a traced CUDA program: it speaks the injection library's protocol itself.

Why: CI has no GPU and no driver, so no real program can be traced there. This one connects
to ``PROVETOP_TRACE_OUT=unix:PATH`` as the library does in every traced process and writes the
records the library would write for a scenario (values made up here, stated below), and it
answers the reader's commands (``OP_TRIM``, ``OP_HEAL_DONE``) as the library does, so the
trace command, its listener, lanes, heal broker, recording and telemetry run for real. The
GPU tests trace real programs through the real library.

Scenarios (``python -m tests.trace.standin_program SCENARIO``):

- ``oom``: one device; a sample with 8 GiB reserved and unused in the default pool, 2 GiB
  free; then a 6 GiB cuMemAlloc refused, with that state; exit 7.
- ``hold``: the same sample, then it serves commands until told to stop (a file named by
  ``STANDIN_STOP`` appears) or 30 s pass; a TRIM frees its reserve; exit 0.
- ``need``: a sample with nothing reserved, 2 GiB free; a HEAL_REQUEST for 6 GiB; it waits
  for HEAL_DONE (at most 5 s), then the 6 GiB cuMemAlloc succeeds if the answer came with
  enough bytes, else it is refused; exit 0 or 3.
- ``crash``: a sample, then ``os._exit(9)`` without the EXIT record.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

from provetop.sources.trace import records as R

GIB = 1 << 30
TOTAL = 80 * GIB
PCI = (0, 0x1E, 0)  # domain, bus, device: both stand-ins share this "GPU"
UUID = (0x1122334455667788, 0x99AABBCCDDEEFF00)
POOL = 0xD00D
RESERVE = 8 * GIB


def now() -> int:
    return time.monotonic_ns()


class Library:
    def __init__(self) -> None:
        spec = os.environ["PROVETOP_TRACE_OUT"]
        assert spec.startswith("unix:"), spec
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(spec[5:])
        self.free = 2 * GIB
        self.reserved = RESERVE
        self.used = 0
        t0 = now()
        header = R.Header(
            R.VERSION, os.getpid(), os.getppid(), t0, time.time_ns(), 100, 65536, 130001, 0
        )
        self.put(R.encode_header(header))
        self.rec(R.KIND_STATUS, v=(R.STATUS_SUBSCRIBED, 130001))
        self.rec(R.KIND_DEVICE, device=0, v=(*PCI, *UUID, TOTAL))
        self._buf = b""

    def put(self, data: bytes) -> None:
        self.sock.sendall(data)

    def rec(
        self,
        kind: int,
        *,
        api: int = 0,
        device: int = -1,
        flags: int = 0,
        result: int = 0,
        v: tuple[int, ...] = (),
    ) -> None:
        self.put(R.encode_record(R.Record(now(), kind, api, device, flags, result, 1, v)))

    def sample(self, kind: int = R.KIND_SAMPLE, api: int = 0) -> None:
        self.rec(kind, api=api, device=0, flags=1, v=(self.free, TOTAL, 70 * GIB, 0, 0, 0, 0))
        self.rec(
            R.KIND_POOL,
            device=0,
            flags=R.POOL_DEFAULT | R.POOL_CURRENT,
            v=(POOL, self.reserved, self.reserved, self.used, 0, (1 << 64) - 1),
        )

    def commands(self, timeout: float) -> list[tuple[int, int, int, int]]:
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(4096)
        except TimeoutError:
            return []
        if not data:
            return []
        self._buf += data
        out = []
        while len(self._buf) >= R.COMMAND_SIZE:
            op, device, cid, arg, _ = R.COMMAND.unpack_from(self._buf)
            self._buf = self._buf[R.COMMAND_SIZE :]
            out.append((op, device, cid, arg))
        return out

    def trim(self, cid: int) -> None:
        before, unused = self.free, self.reserved - self.used
        self.free += unused
        self.reserved = self.used
        self.rec(
            R.KIND_HEAL,
            device=0,
            flags=R.HEAL_COMMAND,
            v=(0, before, self.free, unused, 1_500_000, cid, 1),
        )
        self.sample()

    def alloc(self, bytes_: int) -> bool:
        ok = bytes_ <= self.free
        if ok:
            self.free -= bytes_
            self.rec(R.KIND_ALLOC, api=R.API_MEM_ALLOC, device=0, v=(0xAB000, bytes_))
        else:
            self.rec(
                R.KIND_ALLOC,
                api=R.API_MEM_ALLOC,
                device=0,
                result=R.CUDA_ERROR_OUT_OF_MEMORY,
                v=(0, bytes_),
            )
            self.sample(R.KIND_OOM_STATE, api=R.API_MEM_ALLOC)
        return ok

    def exit(self) -> None:
        self.rec(R.KIND_EXIT, v=(0, 0, 0, 0, 0, 0, 0))
        self.sock.close()


def main(scenario: str) -> int:
    lib = Library()
    if scenario == "oom":
        lib.sample()
        lib.alloc(6 * GIB)
        lib.exit()
        return 7
    if scenario == "hold":
        lib.sample()
        stop = os.environ.get("STANDIN_STOP")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (stop and Path(stop).exists()):
            for op, _, cid, _ in lib.commands(0.05):
                if op == R.OP_TRIM:
                    lib.trim(cid)
        lib.exit()
        return 0
    if scenario == "need":
        lib.reserved = 0
        lib.sample()
        lib.rec(
            R.KIND_HEAL_REQUEST, api=R.API_MEM_ALLOC, device=0, v=(1, 6 * GIB, lib.free, UUID[0])
        )
        answer = None
        deadline = time.monotonic() + 5
        while answer is None and time.monotonic() < deadline:
            for op, _, cid, arg in lib.commands(0.05):
                if op == R.OP_HEAL_DONE and cid == 1:
                    answer = arg
        if answer:
            lib.free += answer  # the holder's trim gave the card's memory back
        ok = lib.alloc(6 * GIB)
        lib.exit()
        return 0 if ok else 3
    if scenario == "crash":
        lib.sample()
        os._exit(9)
    raise SystemExit(f"unknown scenario {scenario!r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
