"""``provetop watch [ADDRESS ...]``: attach the dashboard to one or more running engines.

Without an address it finds the newest engine running on this machine for this user (the
private Unix socket ``provetop engine`` prints); where none runs it becomes ``provetop top``:
the local GPUs from NVML, and every engine that starts later attached as it appears. Its
sources are those of the ``sources`` package: live engines, a cuzk prover's log and status
endpoint, the local GPUs.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

from provetop.base.errors import UsageError
from provetop.base.files import read_regular
from provetop.recordings.address import AddressError, parse_address
from provetop.recordings.prometheus.fold import MetricsFold
from provetop.recordings.prometheus.http_server import MetricsAddressError, MetricsServer
from provetop.sources.cuzk.source import CuzkSource
from provetop.sources.discovery import default_address
from provetop.sources.headless import run_headless
from provetop.sources.live import LiveSource
from provetop.sources.nvml import NvmlSource
from provetop.sources.protocol import EventSource
from provetop.tui.app import ProvetopApp


def read_token(path: str | None) -> str | None:
    """The token in ``--token-file`` (None without one); one-line UsageError when unusable."""
    if path is None:
        return None
    raw = read_regular(path, 4096, "--token-file")  # a FIFO never blocks, a huge file is refused
    try:
        token = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise UsageError(f"--token-file {path}: not UTF-8 text") from None
    if not token:
        raise UsageError(f"--token-file {path} is empty")
    return token


def _readable_or_pending(path: str) -> bool:
    """A log that does not exist yet is fine (it is followed until it appears, like tail -F);
    one that exists must be a readable regular file."""
    if not os.path.exists(path):
        return True
    return os.path.isfile(path) and os.access(path, os.R_OK)


def cuzk_source(
    args: argparse.Namespace, on_events: Callable[[list[dict[str, Any]]], object] | None = None
) -> CuzkSource:
    """The cuzk prover's source from ``--cuzk-log``/``--cuzk-status`` (checked first)."""
    if args.cuzk_interval <= 0:
        raise UsageError("--cuzk-interval must be a positive number of seconds")
    if args.cuzk_log not in (None, "-") and not _readable_or_pending(args.cuzk_log):
        raise UsageError(f"--cuzk-log {args.cuzk_log}: not a readable file")
    return CuzkSource(
        args.cuzk_log, args.cuzk_status, status_interval=args.cuzk_interval, on_events=on_events
    )


def run_monitor(
    args: argparse.Namespace,
    sources: list[EventSource],
    interval: float,
    only: set[int] | None = None,
    pids: set[int] | None = None,
) -> int:
    """``provetop top``: the local GPUs (NVML, every ``interval`` seconds; ``only`` and
    ``pids`` choose the GPUs and processes shown), then ``sources`` (a cuzk prover's), and
    every local engine and traced process that starts later, attached as it appears."""
    monitor = NvmlSource(interval=interval)
    app = ProvetopApp(
        [monitor, *sources],
        save_dir=args.save_dir,
        light=args.light,
        discover=True,
        only=only,
        pids=pids,
    )
    return int(app.run() or 0)


def run(args: argparse.Namespace) -> int:
    addresses = list(args.addresses)
    token = read_token(args.token_file)
    sources: list[EventSource] = []
    cuzk = args.cuzk_log is not None or args.cuzk_status is not None
    metrics = getattr(args, "metrics", None)
    if metrics is not None and not cuzk:
        raise UsageError(
            "--metrics on watch serves a cuzk prover's metrics (with --cuzk-log/--cuzk-status); "
            "an engine serves its own: provetop engine --metrics HOST:PORT"
        )
    if getattr(args, "no_ui", False) and metrics is None:
        raise UsageError("--no-ui runs without a screen, so it needs --metrics HOST:PORT")
    fold = server = None
    if metrics is not None:
        fold = MetricsFold()
        try:
            server = MetricsServer(fold.render, metrics)
        except MetricsAddressError as exc:
            raise UsageError(str(exc)) from None
    if cuzk:
        sources.append(cuzk_source(args, fold.fold if fold is not None else None))
    if not addresses and not cuzk:
        if default_address() is None:  # nothing to watch yet: the GPU monitor, until one starts
            return run_monitor(args, sources, interval=1.0)
        sources.append(LiveSource(None))  # the local engine, found again on reconnect
    for text in addresses:
        try:
            address = parse_address(text)
        except AddressError as exc:
            raise UsageError(str(exc)) from None
        if address.kind == "tcp" and token is None:
            raise UsageError(f"{text}: a tcp:// engine needs --token-file")
        if address.kind == "unix" and address.path and not os.path.exists(address.path):
            # said before the screen opens (a socket that appears later is not waited for:
            # the dashboard would quit on it at once, with the screen's escapes on stderr)
            raise UsageError(f"cannot reach {address}: no such socket (is the engine running?)")
        sources.append(LiveSource(address, token=token))
    if server is not None:
        try:
            server.start()
        except OSError as exc:
            raise UsageError(f"--metrics {metrics}: {exc.strerror or exc}") from None
    try:
        code: int | None
        if getattr(args, "no_ui", False):
            assert server is not None  # --no-ui was refused above without --metrics
            print(f"metrics on {server.url}", flush=True)
            code = run_headless(sources)
        else:
            app = ProvetopApp(sources, save_dir=args.save_dir, light=args.light)
            code = app.run()
    finally:
        if server is not None:
            server.close()
    return int(code or 0)
