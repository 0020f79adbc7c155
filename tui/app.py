"""The provetop dashboard: one Textual app for live engines and recordings.

Sources feed events; each engine's events fold into its own
:class:`provetop.recordings.state.State`;
a timer redraws the panels from the selected engine's state a few times a second. Nothing here
computes a figure the reducer does not: the panels only draw. Controls go back to the engine as
commands and come back as ``control`` events, which is how the log proves they arrived.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Grid, VerticalScroll
from textual.events import DescendantFocus
from textual.geometry import Size
from textual.widget import Widget
from textual.widgets import Footer

from provetop.recordings.state import LogLine, State
from provetop.recordings.writer import (
    RecordingWriter,
    default_recording_dir,
    default_recording_path,
)
from provetop.sources.discovery import POLL_S, new_engines
from provetop.sources.errors import SourceError
from provetop.sources.live import LiveSource
from provetop.sources.protocol import (
    Connects,
    EventSource,
    KeepsEvents,
    Prepares,
)
from provetop.sources.replay import FileReplaySource, open_replay
from provetop.sources.replay_memory import ReplaySource
from provetop.tui.commands import DashboardCommands
from provetop.tui.logtext import place_of
from provetop.tui.screens import ConfirmPrompt, EventScreen, HelpScreen, MarkerPrompt
from provetop.tui.views import (
    EngineView,
    ReplayState,
    conn_text,
    is_monitor,
    reason_of,
    retry_waiting,
)
from provetop.tui.widgets.eventlog import EventLog
from provetop.tui.widgets.gpu_monitor import GpuMonitor
from provetop.tui.widgets.header import Header, HeaderInfo
from provetop.tui.widgets.health import HealthPanel
from provetop.tui.widgets.memory import MemoryPanel, Pinned
from provetop.tui.widgets.partitions import PartitionsTable
from provetop.tui.widgets.processes import ProcessTable
from provetop.tui.widgets.replaybar import ReplayBar
from provetop.tui.widgets.timeline import Timeline

REFRESH_HZ = 5.0
REPLAY_TICK_S = 0.1
SPEEDS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
CONTROL_ACTIONS = {"force_fallback", "pause_intake", "trim", "marker", "save"}
REPLAY_ACTIONS = {"replay_toggle", "replay_speed", "replay_seek", "replay_jump", "replay_point"}
COMPACT_WIDTH, COMPACT_HEIGHT = 120, 36
MEMORY_MIN_COLUMN = 52  # cells for the memory panel in the 2x2 grid (its figures and legend)


# An engine attached by discovery stays listed this long after it ended, for a last look
# (or ``S`` to save what the dashboard received), then goes off the list.
ENDED_KEEP_S = 60.0
_ENDED = ("disconnected", "closed", "unreachable")  # a discovered source's last states


class ProvetopApp(App[int]):
    """The dashboard. Give it live sources, or a replay (a source or a file to load)."""

    CSS_PATH = str(Path(__file__).with_name("app.tcss"))
    TITLE = "provetop"
    COMMANDS = App.COMMANDS | {DashboardCommands}
    BINDINGS = [
        Binding("q", "quit", "quit"),
        Binding("ctrl+c", "quit", "quit", show=False, priority=True),
        Binding("question_mark,f1", "help", "help"),
        Binding("F", "force_fallback", "fallback"),
        Binding("P", "pause_intake", "pause"),
        Binding("T", "trim", "trim"),
        Binding("M", "marker", "marker"),
        Binding("S", "save", "save"),
        Binding("space", "replay_toggle", "play/pause"),
        Binding("left_square_bracket", "replay_speed(0.5)", "slower"),
        Binding("right_square_bracket", "replay_speed(2.0)", "faster"),
        Binding("comma", "replay_seek(-5)", "-5s", show=False),
        Binding("full_stop", "replay_seek(5)", "+5s", show=False),
        Binding("less_than_sign", "replay_seek(-60)", "-1m", show=False),
        Binding("greater_than_sign", "replay_seek(60)", "+1m", show=False),
        Binding("home", "replay_jump('start')", "start", show=False),
        Binding("end", "replay_jump('end')", "end", show=False),
        Binding("n", "replay_point(1)", "next fault", show=False),
        Binding("p", "replay_point(-1)", "prev fault", show=False),
        Binding("e", "next_engine", "engine", show=False),
        Binding("t", "toggle_theme", "theme", show=False),
        Binding("x", "toggle_maximize", "maximise", show=False),
        Binding("1", "focus_panel('timeline')", show=False),
        Binding("2", "focus_panel('memory')", show=False),
        Binding("3", "focus_panel('partitions')", show=False),
        Binding("4", "focus_panel('log')", show=False),
        Binding("5", "focus_panel('health')", show=False),
    ]

    def __init__(
        self,
        sources: list[EventSource] | None = None,
        *,
        replay: FileReplaySource | ReplaySource | None = None,
        replay_path: str | None = None,
        save_dir: str | Path | None = None,
        refresh_hz: float = REFRESH_HZ,
        autoplay: bool = True,
        speed: float = 1.0,
        start_at: int | None = None,
        live_clock: bool = True,
        light: bool = False,
        stop: Callable[[], object] | None = None,
        discover: bool = False,
        panel: str | None = None,
        only: set[int] | None = None,
        pids: set[int] | None = None,
    ) -> None:
        """``stop``: called in a thread when the operator quits (``provetop run`` stops its
        engine there); the screen says "stopping…" until it returns. ``discover``: look for
        local engines every ``POLL_S`` seconds and attach each new one (``provetop top``).
        ``panel``: the panel shown first beside the timeline (``memory`` or ``health``).
        ``only``/``pids``: the GPUs and processes the machine's monitor shows (``top``)."""
        super().__init__()
        self.only, self.pids = only, pids
        self._engine_seen = False  # the first engine attached under top shows its memory
        self.discover = discover
        self._known: set[str] = set()  # engine sockets already attached (discovery)
        self._discovery_stop = threading.Event()
        self.stop = stop
        self.stopping = False
        if light:
            self.theme = "textual-light"
        self.initial_speed = speed
        self.start_at = start_at
        self.views = [EngineView(s) for s in sources or []]
        self.selected = 0
        self.replay: ReplayState | None = None
        self._replay_source = replay
        self._replay_path = replay_path
        self.mode = "replay" if (replay is not None or replay_path) else "live"
        self.save_dir = Path(save_dir) if save_dir is not None else default_recording_dir()
        self.refresh_hz = refresh_hz
        self.autoplay = autoplay
        self.live_clock = live_clock
        self._dirty = True
        self._ticks = 0
        self._ui_thread = threading.get_ident()
        self._sources_closed = False
        self.saved: list[Path] = []
        self._device: int | None = None
        first = f"{panel}-box" if panel in ("memory", "health") else "memory-box"
        self.compact_panel = first
        self.top_right = first  # the wide grid's top-right cell: memory or device health
        self._enabled: tuple[bool | None, ...] = ()
        self._grid_rows: tuple[str, ...] = ()
        self._grid_columns: tuple[str, ...] = ()
        # the event in focus (n/p at a fault, a selected log line): the memory panel shows
        # the pools it carried, the timeline is centred on it; and which view it belongs to
        self.pinned: Pinned | None = None
        self._pinned_view: EngineView | None = None
        self._point_t: int | None = None  # the fault or marker n/p went to last
        self._window_key: tuple[object, ...] = ()  # the timeline's window at the last redraw

    # -- layout -------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header(id="header")
        with Grid(id="main"):
            yield Timeline(id="timeline")
            with VerticalScroll(id="memory-box"):
                yield MemoryPanel(id="memory")
            with VerticalScroll(id="health-box"):
                yield HealthPanel(id="health")
            yield PartitionsTable(id="partitions")
            yield EventLog(id="log")
        with VerticalScroll(id="monitor"):
            yield GpuMonitor(id="gpus")
            yield ProcessTable(id="processes")
        yield ReplayBar(id="replaybar")
        yield Footer()

    def on_mount(self) -> None:
        # widgets of the main screen, kept so drawing works while a modal screen is on top
        self.timeline = self.query_one(Timeline)
        self.memory = self.query_one(MemoryPanel)
        self.health = self.query_one(HealthPanel)
        self.table = self.query_one(PartitionsTable)
        self.eventlog = self.query_one(EventLog)
        self.header = self.query_one(Header)
        self.replaybar = self.query_one(ReplayBar)
        self.grid = self.query_one("#main")
        self.monitor_box = self.query_one("#monitor")
        self.gpus = self.query_one(GpuMonitor)
        self.processes = self.query_one(ProcessTable)
        self.gpus.only = self.processes.only = self.only
        self.processes.pids = self.pids
        self.monitor_box.display = False
        self.monitoring = False  # the machine's monitor is the view shown
        self.panels = {
            name: self.query_one(f"#{name}")
            for name in ("memory-box", "health-box", "partitions", "log")
        }
        self.query_one("#timeline").border_title = "timeline"
        self.query_one("#memory-box").border_title = "memory"
        self.query_one("#health-box").border_title = "device health"
        self.query_one("#partitions").border_title = "partitions"
        self.query_one("#log").border_title = "events"
        self.replaybar.display = self.mode == "replay"
        self.timeline.follow_label = "replay" if self.mode == "replay" else "live"
        self._apply_size_class()
        self.timeline.focus()
        if self.view is not None and self.mode == "live":  # top: the GPUs from the first frame
            self._show_monitor(is_monitor(self.view.source))
        for view in self.views:
            self._start_source(view)
        if self.discover:
            self.run_worker(self._discover_loop, thread=True, name="discovery", exit_on_error=False)
        if self.mode == "replay":
            if self._replay_source is not None:
                self._replay_loaded(self._replay_source)
            else:
                self.run_worker(self._load_replay, thread=True, name="replay-load")
        self.set_interval(1 / self.refresh_hz, self._tick)
        if self.mode == "replay":
            self.set_interval(REPLAY_TICK_S, self._replay_tick)

    def on_resize(self, event: events.Resize) -> None:
        # this handler runs before App's own, which updates self.size: use the event's size
        self._apply_size_class(event.size)

    def _apply_size_class(self, size: Size | None = None) -> None:
        """Choose the layout for ``size`` (the terminal's): called at start and on every
        resize, in both directions."""
        size = size or self.size
        compact = size.width < COMPACT_WIDTH or size.height < COMPACT_HEIGHT
        self.default_screen_compact = compact
        if hasattr(self, "grid"):
            self.grid.screen.set_class(compact, "-compact")
        self._grid_rows = self._grid_columns = ()  # the other layout's no longer apply
        self._layout_panels(size)

    @property
    def compact(self) -> bool:
        return self.default_screen_compact

    default_screen_compact = False

    def _layout_panels(self, size: Size | None = None) -> None:
        """Wide: timeline beside memory over table beside log, the top row as tall as the
        timeline needs. Compact: the timeline over one panel at a time (2, 3, 4 or tab)."""
        if not hasattr(self, "panels"):  # not mounted yet
            return
        size = size or self.size
        timeline, grid = self.timeline, self.grid
        for name, panel in self.panels.items():
            panel.set_class(self.compact and name != self.compact_panel, "-hidden")
        for name in ("memory-box", "health-box"):  # one of the two shares the wide grid's cell
            self.panels[name].set_class(not self.compact and name != self.top_right, "-off")
        if self.compact:
            rows: tuple[str, ...] = ("auto", "1fr")
            if self._grid_columns != ("1fr",):  # inline styles win over the stylesheet's
                self._grid_columns = ("1fr",)
                grid.styles.grid_columns = ("1fr",)
        else:
            # the memory column: two fifths, and never so narrow that its figures stack up
            memory_col = max(MEMORY_MIN_COLUMN, size.width * 2 // 5)
            columns = (f"{size.width - memory_col}", f"{memory_col}")
            if columns != self._grid_columns:
                self._grid_columns = columns
                grid.styles.grid_columns = columns
            want = timeline.get_content_height(size, size, size.width - memory_col - 2)
            # the memory panel beside it shows every figure without scrolling where it can
            beside = self.health if self.top_right == "health-box" else self.memory
            want = max(want, beside.get_content_height(size, size, memory_col - 2))
            limit = max(10, int(size.height * 0.6))
            rows = (f"{min(limit, max(12, want + 2))}", "1fr")
        if rows != self._grid_rows:  # a style change costs a layout pass: only on change
            self._grid_rows = rows
            grid.styles.grid_rows = rows

    # -- sources (Sink protocol; called from source threads) ----------------------------------

    def _start_source(self, view: EngineView) -> None:
        source = view.source
        self.run_worker(
            lambda: source.run(self),
            thread=True,
            name=f"source {source.label}",
            exit_on_error=False,
        )

    def _discover_loop(self) -> None:
        """Attach every local engine that starts while the dashboard runs (thread worker)."""
        while not self._discovery_stop.is_set() and not self._sources_closed:
            try:
                found = new_engines(self._known)
            except OSError:  # the runtime directory went away: look again next time
                found = []
            for path in found:
                self._known.add(path)
                self._call(self._add_discovered, path)
            self._discovery_stop.wait(POLL_S)

    def _add_discovered(self, path: str) -> None:
        self.add_source(LiveSource(path, reconnect=False)).discovered = path

    def _forget_ended(self, view: EngineView) -> None:
        """Take an engine found by discovery off the list once it has ended (as a monitor
        drops a process that exited): the list shows what runs on this machine, and its
        events are in its recording. Its path is forgotten too, so an engine started again
        there is attached again."""
        if view not in self.views or view.conn not in _ENDED or len(self.views) == 1:
            return
        index = self.views.index(view)
        self.views.remove(view)
        if self.selected > index or self.selected >= len(self.views):
            self.selected = max(0, self.selected - 1)
        self._known.discard(view.discovered or "")
        self.notify(
            f"{view.source.label} ended: off the list (its recording has the run)",
            timeout=4,
            markup=False,
        )
        self._dirty = True

    def add_source(self, source: EventSource) -> EngineView:
        """Watch one more source in the running app (an engine found after the start)."""
        view = EngineView(source)
        self.views.append(view)
        self._start_source(view)
        self._dirty = True
        return view

    def _call(self, fn: Callable[..., object], *args: object) -> None:
        if self._sources_closed:
            return
        if threading.get_ident() == self._ui_thread:
            fn(*args)
            return
        try:
            self.call_from_thread(fn, *args)
        except RuntimeError:  # the app is shutting down
            pass

    def events(self, source: EventSource, batch: list[dict[str, Any]]) -> None:
        self._call(self._ingest, source, batch)

    def status(self, source: EventSource, text: str, level: str = "info") -> None:
        self._call(self._on_status, source, text, level)

    def _view_of(self, source: EventSource) -> EngineView | None:
        return next((v for v in self.views if v.source is source), None)

    def _ingest(self, source: EventSource, batch: list[dict[str, Any]]) -> None:
        view = self._view_of(source)
        if view is None:
            return
        state = view.state
        for event in batch:
            kind = event.get("k")
            if kind == "hello":
                view.sessions += 1
                self._select_new_engine(view)
                if state.hello is not None or state.events:
                    old = state
                    state = view.state = State()
                    for line in list(old.log)[-50:]:
                        state.log.append(line)
            state.apply(event)
            if kind == "control":
                self._acknowledge(view, event)
        view.last_event_at = time.monotonic()
        self._dirty = True

    def _select_new_engine(self, view: EngineView) -> None:
        """An engine's first session while the machine's GPU monitor is shown: show the
        engine (the monitor stays a key ``e`` away)."""
        current = self.view
        if view.sessions != 1 or current is None or current is view or self.mode != "live":
            return
        if is_monitor(view.source) or not is_monitor(current.source):
            return
        self.selected = self.views.index(view)
        if not self._engine_seen:  # once: its memory beside the timeline, not device health
            self._engine_seen = True
            self.compact_panel = self.top_right = "memory-box"
            self._layout_panels()
        self.notify(f"attached {view.source.label} (e: next source)", timeout=4, markup=False)

    def _acknowledge(self, view: EngineView, event: dict[str, Any]) -> None:
        pending = view.pending.pop(int(event.get("id", -1)), None)
        if pending is None:
            return
        if event.get("ok"):
            self.notify(f"engine acknowledged {event['cmd']}", timeout=2, markup=False)
        else:
            self.notify(
                f"engine refused {event['cmd']}: {event.get('error')}",
                severity="error",
                markup=False,
            )

    def _on_status(self, source: EventSource, text: str, level: str) -> None:
        view = self._view_of(source)
        if view is None:
            return
        conn = text.split(" (")[0]
        if conn == "unreachable" and len(self.views) == 1 and self.mode == "live":
            # the only source cannot be reached: say so in one line and quit (exit 2)
            self.close_sources()
            where = source.address if isinstance(source, Connects) else source.label
            message = f"provetop: error: cannot reach {where}: {reason_of(text)}"
            self.exit(2, return_code=2, message=message)
            return
        if conn == view.conn and conn != "unreachable" and level != "error":
            return
        repeated = conn == view.conn
        view.conn = conn
        if repeated:  # the header counts the attempts; the log has the first failure
            self._dirty = True
            return
        view.state.log.append(LogLine(view.state.t, level, f"{source.label}: {text}"))
        if conn in _ENDED and view.discovered:  # discovered sources do not reconnect
            view.state.log.append(
                LogLine(
                    view.state.t,
                    "info",
                    f"{source.label}: off the list in {ENDED_KEEP_S:g} s (S saves it first)",
                )
            )
            self.set_timer(ENDED_KEEP_S, lambda: self._forget_ended(view))
        self._dirty = True

    # -- drawing ------------------------------------------------------------------------------

    @property
    def view(self) -> EngineView | None:
        if self.mode == "replay":
            return self.views[0] if self.views else None
        return self.views[self.selected] if self.views else None

    def _now(self, view: EngineView) -> int:
        if self.replay is not None:
            return self.replay.position
        state = view.state
        if (
            self.live_clock
            and view.conn == "connected"
            and state.engine_state == "running"
            and view.last_event_at
        ):
            return state.t + int(min(1.0, time.monotonic() - view.last_event_at) * 1e9)
        return state.t

    def _tick(self) -> None:
        self._ticks += 1
        view = self.view
        if view is None:
            return
        r = self.replay
        if r is not None and not r.playing and self.timeline.span + int(2e9) > r.window:
            self.seek(r.position, force=True)  # zoomed out: fold the history now in view
        timeline = self.timeline
        live_moving = (
            self.live_clock
            and self.replay is None
            and timeline.follow
            and view.conn == "connected"
            and view.state.engine_state == "running"
        )
        waiting = any(retry_waiting(v.source) for v in self.views)  # countdown
        # the operator zoomed, scrolled or moved the cursor (the timeline's own keys): every
        # panel drawn over the window follows, even where no event arrives (a run that is done)
        moved = self._window() != self._window_key
        if not (
            self._dirty
            or live_moving
            or waiting
            or moved
            or self.replay is not None
            and self.replay.playing
        ):
            return
        self.redraw()

    def _window(self) -> tuple[object, ...]:
        timeline = self.timeline
        return (timeline.window_end, timeline.span, timeline.selected_device, timeline.cursor_t)

    def redraw(self) -> None:
        """Draw every panel from the selected view's state (also used by tests)."""
        view = self.view
        if view is None:
            return
        state = view.state
        now = self._now(view)
        self._show_monitor(is_monitor(view.source))
        if self.monitoring:
            self.header.show(self._header_info(view, now))
            self.gpus.show(state, now)
            self.processes.show(state, self.own_pids())
            self._dirty = False
            self._refresh_footer()
            return
        timeline = self.timeline
        timeline.show(state, now)
        device = timeline.selected_device
        end = timeline.window_end
        self._window_key = self._window()
        self.memory.pinned = self.pinned if self._pinned_view is view else None
        self.memory.show(state, device, (end - timeline.span, end))
        self.health.show(state, device, (end - timeline.span, end))
        self.header.show(self._header_info(view, now))
        self.eventlog.show(state)
        if self._dirty or self._ticks % 2 == 0:
            self.table.show(state)
        if self.replay is not None:
            r = self.replay
            self.replaybar.show(
                position=r.position,
                start=r.source.start,
                end=r.source.end,
                speed=r.speed,
                playing=r.playing,
                faults=r.source.faults,
                markers=r.source.markers,
                truncated=r.source.truncated,
            )
        if not self.compact:
            self._layout_panels()
        self._dirty = False
        self._refresh_footer()

    def _refresh_footer(self) -> None:
        actions = sorted(CONTROL_ACTIONS | REPLAY_ACTIONS)
        enabled = (self.monitoring, *(self.check_action(a, ()) for a in actions))
        if enabled != self._enabled:  # the footer recomposes on refresh: only when it changes
            self._enabled = enabled
            self.refresh_bindings()

    def _show_monitor(self, on: bool) -> None:
        """The machine's monitor fills the screen (its GPUs, their processes); an engine's
        view brings the pipeline's panels back. Focus goes with the view."""
        if on == self.monitoring and self.monitor_box.display == on:
            return
        self.monitoring = on
        self.grid.display = not on
        self.monitor_box.display = on
        (self.gpus if on else self.timeline).focus()

    def own_pids(self) -> dict[int, str]:
        """pid -> which provetop process it is: this monitor, every attached engine or
        trace (its ``hello.pid``) and every process a trace follows (its lanes' pids)."""
        own = {os.getpid(): "provetop top"}
        for v in self.views:
            hello = v.state.hello or {}
            source = hello.get("source")
            if is_monitor(v.source):
                continue
            if isinstance(hello.get("pid"), int):
                own[hello["pid"]] = f"provetop {source if source == 'trace' else 'engine'}"
            for sample in v.state.memory.values():
                if isinstance(sample.get("pid"), int):
                    own.setdefault(sample["pid"], "traced by provetop")
        return own

    def _header_info(self, view: EngineView, now: int) -> HeaderInfo:
        engines = [(v.source.label, conn_text(v)) for v in self.views]
        r = self.replay
        return HeaderInfo(
            state=view.state,
            mode=self.mode,
            engines=engines,
            selected=self.selected,
            speed=r.speed if r else 1.0,
            playing=r.playing if r else True,
            elapsed_ns=now,  # since the engine started, as the timeline's axis
            read_only=view.source.read_only and self.mode == "live",
            stopping=self.stopping,
            monitors=frozenset(i for i, v in enumerate(self.views) if is_monitor(v.source)),
        )

    def on_event_log_opened(self, message: EventLog.Opened) -> None:
        self.push_screen(EventScreen(message.entry))

    def on_event_log_selected(self, message: EventLog.Selected) -> None:
        """A log line selected: at an event that carried the pools (an OOM), show them and
        centre the timeline on it; back to following: the newest sample again."""
        entry = message.entry
        carried = None
        if entry is not None:
            carried = next((e for e in entry.events if e.get("pools")), None)
        if carried is None:
            if self.pinned is not None:
                self._unpin()
            return
        if self.replay is not None:
            self.replay.playing = False
        self.focus_event(carried)

    def focus_event(self, event: dict[str, Any]) -> None:
        """Show ``event`` (a fault, with the pools it carried): the memory panel shows those
        pools at the event's time, the timeline is centred on it with the cursor on its lane.
        In replay the recording is folded half a window past it, so both sides show."""
        t = int(event["t"])
        device, worker = event.get("device"), event.get("worker")
        if isinstance(device, int) and event.get("pools"):
            hello = (self.view.state.hello if self.view is not None else None) or {}
            stride = (hello.get("config") or {}).get("lane_stride")
            lane = {k: event.get(k) for k in ("device", "worker", "pid")}  # the lane, as the log
            where = place_of(lane, stride if isinstance(stride, int) else 0)  # names it
            what = f"{str(event.get('kind', 'event')).upper()} {where}"
            self.pinned = Pinned(t, device, dict(event["pools"]), what)
            self._pinned_view = self.view
        self.timeline.auto_zoom = False  # the window stays the one being looked at
        if self.replay is not None:
            self.seek(min(self.replay.source.end, t + self.timeline.span // 2), keep_pin=True)
        self.timeline.centre_on(t, device, worker)
        self._dirty = True
        self.redraw()

    def _unpin(self) -> None:
        """Back from an event in focus: the newest sample, the timeline following."""
        self.pinned = self._pinned_view = None
        self._point_t = None
        self.timeline.action_follow()
        self._dirty = True

    def on_timeline_selected(self, message: Timeline.Selected) -> None:
        self._device = message.device
        self._dirty = True

    # -- controls -----------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if getattr(self, "monitoring", False) and (
            action in CONTROL_ACTIONS or action in REPLAY_ACTIONS or action == "focus_panel"
        ):
            return False  # the machine's GPUs: no pipeline to control (not even greyed out)
        if action in CONTROL_ACTIONS:
            view = self.view
            if self.mode == "replay" or view is None:
                return None
            if action == "save":
                return True if isinstance(view.source, KeepsEvents) else None
            if view.source.read_only or view.conn != "connected":
                return None
            return True
        if action in REPLAY_ACTIONS:
            return self.mode == "replay" and self.replay is not None
        if action == "next_engine":
            return len(self.views) > 1
        return True

    def _selected_device(self) -> int:
        device = self.timeline.selected_device
        return 0 if device is None else int(device)

    def send_command(self, cmd: str, args: dict[str, Any]) -> int | None:
        """Send a control command to the selected engine; log it; None when it cannot go."""
        view = self.view
        if view is None:
            return None
        try:
            cid = view.source.send(cmd, args)
        except SourceError as exc:
            self.notify(f"{cmd}: {exc}", severity="error", markup=False)
            view.state.log.append(LogLine(view.state.t, "warn", f"control {cmd} not sent: {exc}"))
            self._dirty = True
            return None
        view.pending[cid] = (cmd, args)
        view.state.log.append(
            LogLine(self._engine_now(view), "info", f"sent {cmd} {args} (#{cid})")
        )
        self._dirty = True
        return cid

    def action_force_fallback(self) -> None:
        view = self.view
        if view is None:
            return
        device = self._selected_device()
        on = not view.state.forced_fallback.get(device, False)
        self.send_command("force_fallback", {"device": device, "on": on})

    def _engine_now(self, view: EngineView) -> int:
        """The engine's clock now, as near as this side knows it: its newest event's time plus
        the time since that batch arrived (for lines the dashboard adds itself)."""
        if not view.last_event_at:
            return view.state.t
        return view.state.t + int((time.monotonic() - view.last_event_at) * 1e9)

    def action_pause_intake(self) -> None:
        view = self.view
        if view is None:
            return
        if view.state.engine_state in ("done", "stopping"):
            why = f"the run is {view.state.engine_state}: there is no intake to pause"
            self.notify(why, severity="warning", timeout=3, markup=False)
            view.state.log.append(LogLine(self._engine_now(view), "warn", f"P refused: {why}"))
            self._dirty = True
            return
        paused = view.state.engine_state == "paused"
        self.send_command("resume" if paused else "pause", {})

    def action_trim(self) -> None:
        """Trim the selected device's pools, once the operator says yes (it cannot be
        undone, and ``T`` terminates a process in nvitop)."""
        device = self._selected_device()

        def answered(yes: bool | None) -> None:
            if yes:
                self.send_command("trim", {"device": device})

        question = f"Trim gpu{device}'s pools now? What they cached is released."
        self.push_screen(ConfirmPrompt(question), answered)

    def action_marker(self) -> None:
        view = self.view
        if view is None:
            return
        default = f"mark {len(view.state.markers) + 1}"

        def done(name: str | None) -> None:
            if name:
                self.send_command("marker", {"name": name})

        self.push_screen(MarkerPrompt(default), done)

    def action_save(self) -> None:
        view = self.view
        if view is None:
            return
        try:
            path = self.save_view(view)
        except (OSError, ImportError, ValueError) as exc:
            self.notify(f"save failed: {exc}", severity="error", markup=False)
            return
        self.notify(f"saved {path}", timeout=4, markup=False)

    def save_view(self, view: EngineView, path: Path | None = None) -> Path:
        """Write every event this dashboard received from ``view`` as a recording."""
        source = view.source
        if not isinstance(source, KeepsEvents):
            raise ValueError("this source keeps no events")
        hello = view.state.hello or {}
        engine_id = f"{hello.get('engine_id', 'engine')}-saved"
        path = path or default_recording_path(engine_id, self.save_dir)
        path.parent.mkdir(parents=True, exist_ok=True)
        writer = RecordingWriter(path)
        count = 0
        try:
            for event in source.received_events():
                writer.write(event)
                count += 1
        finally:
            writer.close()
        view.state.log.append(LogLine(view.state.t, "info", f"saved {count} events to {path}"))
        self.saved.append(path)
        self._dirty = True
        return path

    # -- replay -------------------------------------------------------------------------------

    def _load_replay(self) -> None:
        assert self._replay_path is not None
        try:
            source = open_replay(self._replay_path)
        except Exception as exc:  # shown to the operator, then quit with an error
            self._call(self._replay_failed, str(exc))
            return
        self._call(self._replay_loaded, source)

    def _replay_failed(self, message: str) -> None:
        self.notify(
            f"cannot open the recording: {message}", severity="error", timeout=8, markup=False
        )
        self.exit(2, message=f"provetop: error: {message}")

    def _replay_loaded(self, source: FileReplaySource | ReplaySource) -> None:
        view = EngineView(source, conn="replay")
        self.views = [view]
        self.replay = ReplayState(
            source, position=source.start, playing=self.autoplay, speed=self.initial_speed
        )
        if isinstance(source, Prepares):  # a file: find its faults and markers in the background
            self.run_worker(source.prepare, thread=True, name="replay-prepare")
        elif not source.checkpoints:
            self.run_worker(source.build_checkpoints, thread=True, name="checkpoints")
        self.seek(source.start if self.start_at is None else source.start + self.start_at)
        if source.truncated:
            view.state.log.append(LogLine(source.end, "warn", "the recording's tail is truncated"))

    def seek(self, position: int, force: bool = False, keep_pin: bool = False) -> None:
        """Show the recording at ``position`` (engine nanoseconds); ``force`` rebuilds the
        state even for a short step forward (the window grew: more history is needed);
        ``keep_pin``: an event stays in focus (any other seek leaves it)."""
        r = self.replay
        if r is None or self.view is None:
            return
        if not keep_pin and not force and (self.pinned is not None or self._point_t is not None):
            self._unpin()
        position = max(r.source.start, min(r.source.end, int(position)))
        window = self.timeline.span + int(2e9)
        try:
            if not force and r.index and position >= r.position and position - r.position < window:
                r.index = r.source.advance(self.view.state, r.index, position)
            else:
                state, r.index = r.source.state_at(position, window)
                self.view.state = state
                r.window = window
        except Exception as exc:  # a damaged recording: say where, keep what is shown
            r.playing = False
            self.notify(
                f"cannot read the recording here: {exc}", severity="error", timeout=6, markup=False
            )
            return
        r.position = position
        self._dirty = True
        self.redraw()

    def _replay_tick(self) -> None:
        r = self.replay
        if r is None or not r.playing or self.view is None:
            return
        position = r.position + int(REPLAY_TICK_S * r.speed * 1e9)
        if position >= r.source.end:
            position, r.playing = r.source.end, False
        try:
            r.index = r.source.advance(self.view.state, r.index, position)
        except Exception as exc:  # a damaged recording: stop there and say so
            r.playing = False
            self.notify(f"replay stopped: {exc}", severity="error", timeout=6, markup=False)
            return
        r.position = position
        self._dirty = True

    def action_replay_toggle(self) -> None:
        if self.replay:
            if not self.replay.playing and self.replay.position >= self.replay.source.end:
                self.seek(self.replay.source.start)
            self.replay.playing = not self.replay.playing
            if self.replay.playing and (self.pinned is not None or self._point_t is not None):
                self._unpin()
            self.redraw()

    def action_replay_speed(self, factor: float) -> None:
        if self.replay:
            wanted = self.replay.speed * factor
            self.replay.speed = min(SPEEDS, key=lambda s: abs(s - wanted))
            self.redraw()

    def action_replay_seek(self, seconds: float) -> None:
        if self.replay:
            self.seek(self.replay.position + int(seconds * 1e9))

    def action_replay_jump(self, where: str) -> None:
        if self.replay:
            src = self.replay.source
            self.seek(src.start if where == "start" else src.end)

    def action_replay_point(self, direction: int) -> None:
        if not self.replay:
            return
        base = self._point_t if self._point_t is not None else self.replay.position
        t = self.replay.source.next_point(base, direction > 0)
        if t is None:
            self.notify("no further fault or marker", timeout=1.5, markup=False)
            return
        self.replay.playing = False
        self.pinned = self._pinned_view = None
        self.timeline.auto_zoom = False  # the window stays the one being looked at
        self.seek(min(self.replay.source.end, t + self.timeline.span // 2), keep_pin=True)
        self._point_t = t
        state = self.view.state if self.view is not None else None
        fault = next((f for f in state.faults if f["t"] == t), None) if state else None
        if fault is not None:
            self.focus_event(fault)
        else:  # a marker: centred, nothing to pin
            self.timeline.centre_on(t, None, None)
            self.redraw()

    # -- everything else ----------------------------------------------------------------------

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_next_engine(self) -> None:
        if len(self.views) > 1:
            self.selected = (self.selected + 1) % len(self.views)
            self._dirty = True
            self.redraw()

    def action_toggle_theme(self) -> None:
        self.theme = "textual-light" if self.theme == "textual-dark" else "textual-dark"

    def action_toggle_maximize(self) -> None:
        screen = self.screen
        if screen.maximized is not None:
            screen.minimize()
            return
        focused = self.focused or self.timeline
        target: Widget = self.timeline
        for panel in self.panels.values():
            if focused is panel or panel in focused.ancestors:
                target = panel
        # set directly: the memory box is a scroll container, which Screen.maximize refuses
        screen.maximized = target

    def action_focus_panel(self, name: str) -> None:
        box = f"{name}-box" if name in ("memory", "health") else name
        if box != "timeline":
            self.compact_panel = box
            if box in ("memory-box", "health-box"):
                self.top_right = box
            self._layout_panels()
        self.query_one(f"#{name}").focus()

    def on_descendant_focus(self, event: DescendantFocus) -> None:
        widget = event.widget
        for name, node in self.panels.items():
            if widget is node or node in widget.ancestors:
                if self.compact_panel != name:
                    self.compact_panel = name
                    self._layout_panels()
                return

    def action_follow(self) -> None:
        self.timeline.action_follow()

    def action_zoom(self, step: int) -> None:
        self.timeline.action_zoom(step)
        self._dirty = True

    def action_gpu_only(self) -> None:
        self.timeline.action_gpu_only()

    async def action_quit(self) -> None:
        if self.stop is None:
            self.close_sources()
            self.exit(0)
            return
        if self.stopping:  # asked again: leave now, the caller ends what is left
            self.close_sources()
            self.exit(0)
            return
        self.stopping = True
        self.notify("stopping… (q again to leave at once)", timeout=30, markup=False)
        self._dirty = True
        self.redraw()
        self.run_worker(self._stop_then_exit, thread=True, name="stop", exit_on_error=False)

    def _stop_then_exit(self) -> None:
        try:
            assert self.stop is not None
            self.stop()
        finally:
            self._call_anyway(self._stopped)

    def _call_anyway(self, fn: Callable[[], object]) -> None:
        try:
            self.call_from_thread(fn)
        except RuntimeError:  # the app is already gone
            pass

    def _stopped(self) -> None:
        self.close_sources()
        self.exit(0)

    def close_sources(self) -> None:
        self._sources_closed = True
        self._discovery_stop.set()
        for view in self.views:
            try:
                view.source.close()
            except Exception:  # a source failing to close must not block quitting
                pass

    def on_unmount(self) -> None:
        self.close_sources()
