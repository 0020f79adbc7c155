"""The header: what is being watched and how it is doing, in two lines.

Title, engine(s) and host, GPU names, backend (cpu is marked modeled), allocator policy, state
(running, paused, replay at N x), the start-up steps still running (the SRS, pinning: done/total,
rate, ETA), proofs done, rolling s/proof, elapsed time and the connection state of every
source."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual.widget import Widget

from provetop.recordings.progress import progress_line
from provetop.recordings.state import State
from provetop.tui.style import FAILURE_COLOUR, clock

STATE_STYLE = {
    "running": "bold #5fd75f",
    "paused": "bold #d7af00",
    "starting": "bold #00afaf",
    "stopping": "bold #d7af00",
    "done": "bold #8a8a8a",
}
CONN_STYLE = {"connected": "#5fd75f", "replay": "#00afff", "loaded": "#00afff"}


@dataclass
class HeaderInfo:
    """What the header draws, prepared by the app from the selected engine's view."""

    state: State
    mode: str  # "live" or "replay"
    engines: list[tuple[str, str]]  # (label, connection state) for every source
    selected: int = 0
    speed: float = 1.0
    playing: bool = True
    elapsed_ns: int = 0
    read_only: bool = False
    stopping: bool = False  # the operator quit and the engine is being stopped
    monitors: frozenset[int] = frozenset()  # indices of ``engines`` that are the GPU monitor


def gpu_names(hello: dict[str, Any] | None) -> str:
    if not hello:
        return "?"
    names = Counter(str(d.get("name", "?")) for d in hello.get("devices", []))
    return ", ".join(f"{n}× {name}" if n > 1 else name for name, n in names.items()) or "none"


class Header(Widget):
    """Two lines of status; see the module docstring."""

    DEFAULT_CSS = """
    Header { height: 2; background: $panel; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.info: HeaderInfo | None = None

    def show(self, info: HeaderInfo) -> None:
        self.info = info
        self.refresh()

    def render(self) -> Text:
        info = self.info
        title = Text(" provetop ", style="bold reverse #00afff")
        if info is None:
            return title + Text(" starting…")
        width = max(20, self.size.width)
        first = [title, *self._engines(info), *self._setup(info)]
        second = self._progress(info)
        return pack(first, width) + Text("\n") + pack(second, width)

    def _engines(self, info: HeaderInfo) -> list[Text]:
        out = []
        for i, (label, conn) in enumerate(info.engines):
            mark = "▸" if i == info.selected and len(info.engines) > 1 else ""
            style = "bold" if i == info.selected else "dim"
            if i in info.monitors:  # the machine's GPUs: say so, and its state only when bad
                host = label.partition("@")[2] or label
                chunk = Text(f" {mark}GPUs of {host}", style=style)
                if conn != "connected":
                    chunk.append(f" [{conn}]", style=f"bold {FAILURE_COLOUR}")
                out.append(chunk + Text(" "))
                continue
            chunk = Text(f" {mark}{label} ", style=style)
            chunk.append(f"[{conn}]", style=CONN_STYLE.get(conn, f"bold {FAILURE_COLOUR}"))
            out.append(chunk)
        return out

    def _setup(self, info: HeaderInfo) -> list[Text]:
        hello = info.state.hello or {}
        out = []
        if hello.get("source") == "nvml":  # the GPU monitor: its GPUs and what reads them
            config = hello.get("config") or {}
            if hello.get("devices"):
                out.append(Text(" │ ", style="dim") + Text(gpu_names(hello)))
            if not config.get("nvml_error"):  # line 2 says why there is none
                driver = f", driver {config['driver']}" if config.get("driver") else ""
                out.append(Text(" │ ", style="dim") + Text(f"read from NVML{driver}"))
            return out
        if info.read_only:
            out.append(Text(" read-only", style="italic #d7af00"))
        out.append(Text(" │ ", style="dim") + Text(gpu_names(hello)))
        backend = Text(" │ ", style="dim") + Text(hello.get("backend", "?"), style="bold")
        if hello.get("modeled") or hello.get("backend") == "cpu":
            backend.append(" modeled", style="italic #d7af00")
        out.append(backend)
        alloc = (hello.get("config") or {}).get("allocator")
        if alloc:
            out.append(Text(" │ ", style="dim") + Text(f"allocator {alloc}"))
        host = hello.get("host")
        if host and len(info.engines) == 1 and host not in info.engines[0][0]:
            out.append(Text(" │ ", style="dim") + Text(f"host {host}"))
        return out

    def _progress(self, info: HeaderInfo) -> list[tuple[int, Text]]:
        state = info.state
        sep = Text(" │ ", style="dim")
        hello = state.hello or {}
        if hello.get("source") == "nvml":  # the machine's GPUs, not a run: no proofs to count
            config = hello.get("config") or {}
            chunks = [Text(" monitoring ", style=STATE_STYLE["running"])]
            if config.get("nvml_error"):
                chunks.append(sep + Text("no GPU visible to NVML", style="bold #d7af00"))
            else:
                chunks.append(sep + Text(f"{len(hello.get('devices', []))} GPUs", style="bold"))
                chunks.append(sep + Text(f"every {config.get('interval_s', 1):g} s"))
            chunks.append(Text(" · engines attach as they start", style="dim"))
            return list(enumerate(chunks))
        if info.mode == "replay":
            icon = "▶" if info.playing else "⏸"
            head = Text(f" {icon} replay at {info.speed:g}x ", style="bold reverse #00afff")
        elif info.stopping:
            head = Text(" stopping… ", style=f"bold reverse {STATE_STYLE['stopping'][5:]}")
        else:
            head = Text(
                f" {state.engine_state} ", style=STATE_STYLE.get(state.engine_state, "bold")
            )
        steps = [sep + Text(progress_line(e), style="#00afaf") for e in state.progress.values()]
        totals = state.totals()
        proofs = sep + Text(f"proofs {totals['proofs_done']}", style="bold")
        if totals["proofs_failed"]:
            proofs.append(f" ({totals['proofs_failed']} failed)", style=FAILURE_COLOUR)
        rolling = state.rolling_s_per_proof()
        rate = sep + Text(f"{rolling:.2f} s/proof" if rolling else "– s/proof", style="bold")
        # display order; the numbers say which go first on a narrow terminal (lowest stays):
        # the state, then the failure counts (an OOM storm must never drop off), then progress
        out: list[tuple[int, Text]] = [(0, head)]
        out += [(8, step) for step in steps]
        out += [(3, proofs), (6, rate), (5, sep + Text(f"elapsed {clock(info.elapsed_ns)}"))]
        out.append((4, Text(f" · partitions {totals['partitions_ok']}/{totals['partitions']}")))
        if totals["ooms"]:
            out.append((1, sep + Text(f"OOM {totals['ooms']}", style=f"bold {FAILURE_COLOUR}")))
        if totals["fallbacks"]:
            out.append((2, Text(f" · fallbacks {totals['fallbacks']}", style="#ff8700")))
        if info.mode == "replay":
            out.append((7, sep + Text(f"engine {state.engine_state}", style="dim")))
        if state.lagged:
            out.append((2, Text(f" · lagged {state.lagged}", style="#d7af00")))
        return out


def pack(chunks: Sequence[Text | tuple[int, Text]], width: int) -> Text:
    """Join chunks into one line of ``width``, in their order. Where they do not all fit, the
    least important go (a chunk's rank: lower stays longer; a bare chunk ranks by its
    position), so a narrow terminal loses the least important figures, never the layout."""
    ranked = [c if isinstance(c, tuple) else (i, c) for i, c in enumerate(chunks)]
    keep: set[int] = set()
    used = 0
    for i in sorted(range(len(ranked)), key=lambda i: (ranked[i][0], i)):
        n = ranked[i][1].cell_len
        if used + n <= width:
            keep.add(i)
            used += n
    line = Text(no_wrap=True, overflow="ellipsis")
    for i, (_, chunk) in enumerate(ranked):
        if i in keep:
            line.append_text(chunk)
    return line
