"""Modal screens: the help screen (every key, grouped), the marker prompt and the full events
behind a line of the event log."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Label, Static

from provetop.tui.logtext import Entry
from provetop.tui.style import clock, size

SIZE_KEYS = {"requested", "bytes", "nbytes", "budget", "chunk", "device_memory"}

KEYS: list[tuple[str, list[tuple[str, str]]]] = [
    (
        "Everywhere",
        [
            ("?  F1", "this help"),
            ("ctrl+p", "command palette: every action by name"),
            ("tab  shift+tab", "next / previous panel"),
            ("1 2 3 4 5", "focus timeline, memory, partitions, event log, device health"),
            ("x", "maximise the focused panel / restore"),
            ("e", "next engine (when watching several)"),
            ("t", "dark / light theme"),
            ("q", "quit"),
        ],
    ),
    (
        "Controls (live engines that accept control)",
        [
            ("F", "toggle the forced pre-stage fallback on the selected device"),
            ("P", "pause / resume the intake of partitions"),
            ("T", "trim the selected device's pools now"),
            ("M", "add a named marker"),
            ("S", "save what this dashboard received as a recording"),
        ],
    ),
    (
        "Event log",
        [
            ("↑ ↓", "select a line (stops following)"),
            ("enter  click", "the line's full events"),
            ("end  esc", "follow the newest line again"),
        ],
    ),
    (
        "Timeline",
        [
            ("← →", "move the cursor (pauses following)"),
            ("shift+← →", "scroll half a window"),
            ("↑ ↓", "select a lane (its device is the selected device)"),
            ("+ -", "zoom in / out (100 ms … 1 h)"),
            ("l", "follow live again"),
            ("g", "GPU lanes only / all lanes"),
        ],
    ),
    (
        "Partitions table",
        [("o", "cycle the sort column (or click a header)"), ("O", "reverse the sort")],
    ),
    (
        "Process table (provetop top; tab to it)",
        [("o", "cycle the sort column (GPU memory first)"), ("O", "reverse the sort")],
    ),
    (
        "Replay",
        [
            ("space", "play / pause"),
            ("[ ]", "slower / faster (0.25x … 16x)"),
            (", .", "seek back / forward 5 s"),
            ("< >", "seek back / forward 1 min"),
            ("home end", "jump to start / end"),
            ("n p", "next / previous fault or marker"),
        ],
    ),
]


def keys_table() -> Group:
    """Every section as a heading and a two-column table (keys, what they do)."""
    parts: list[RenderableType] = []
    for title, rows in KEYS:
        parts.append(Text(title, style="bold underline"))
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold #00afff", no_wrap=True, min_width=14)
        table.add_column()
        for key, what in rows:
            table.add_row(key, what)
        parts.append(table)
        parts.append(Text(""))
    return Group(*parts)


class HelpScreen(ModalScreen[None]):
    """Every key binding, grouped by panel."""

    BINDINGS = [
        Binding("escape,q,question_mark,f1", "dismiss", "close"),
    ]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 80; max-width: 95%; height: auto; max-height: 90%;
        border: round $accent; background: $surface; padding: 0 1;
    }
    """

    def compose(self) -> ComposeResult:
        with VerticalScroll() as box:
            box.border_title = "provetop keys"
            box.border_subtitle = "esc to close"
            yield Static(keys_table())

    # Textual's action_dismiss is a coroutine method; this one dismisses at once, so its
    # signature differs from the base class's on purpose
    def action_dismiss(self, result: None = None) -> None:  # type: ignore[override]
        self.dismiss(None)


class MarkerPrompt(ModalScreen[str | None]):
    """Ask for a marker's name; Enter sends it, Escape cancels."""

    BINDINGS = [Binding("escape", "cancel", "cancel")]
    DEFAULT_CSS = """
    MarkerPrompt { align: center middle; }
    MarkerPrompt > Vertical {
        width: 60; max-width: 95%; height: auto; border: round $accent;
        background: $surface; padding: 0 1;
    }
    """

    def __init__(self, default: str) -> None:
        super().__init__()
        self.default = default

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("Marker name (Enter to add, Esc to cancel)")
            yield Input(value=self.default, id="marker-name")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or self.default)

    def action_cancel(self) -> None:
        self.dismiss(None)


class ConfirmPrompt(ModalScreen[bool]):
    """Ask before a key that cannot be undone (``T`` trims a device's pools: what they cached
    is gone; in nvitop ``T`` terminates a process, so a habit must not act at once): ``y``
    goes ahead, ``n`` or Escape does nothing."""

    BINDINGS = [
        Binding("y", "answer(True)", "yes"),
        Binding("n,escape", "answer(False)", "no"),
    ]
    DEFAULT_CSS = """
    ConfirmPrompt { align: center middle; }
    ConfirmPrompt > Vertical {
        width: 64; max-width: 95%; height: auto; border: round $warning;
        background: $surface; padding: 0 1;
    }
    """

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(self.question)
            yield Label("y: yes   n or Esc: no", classes="dim")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


def event_text(event: dict[str, Any]) -> Text:
    """One event, field by field; sizes in bytes also as MiB/GiB."""
    text = Text()

    def field(key: str, value: object, indent: str, in_pools: bool) -> None:
        text.append(f"{indent}{key}", style="bold #00afff")
        if isinstance(value, dict):
            text.append("\n")
            for k, v in value.items():
                field(str(k), v, indent + "  ", in_pools or key in ("pools", "state"))
            return
        shown = str(value)
        if isinstance(value, int) and not isinstance(value, bool):
            if (in_pools or key in SIZE_KEYS) and value >= 1024:
                shown = f"{value} ({size(value)})"
            elif key == "t":
                shown = f"{value} ({clock(value)})"
        text.append(f" {shown}\n")

    for key, value in event.items():
        field(str(key), value, "", False)
    return text


class EventScreen(ModalScreen[None]):
    """A line of the event log in full: its text and every event folded into it."""

    BINDINGS = [Binding("escape,q", "dismiss", "close")]
    DEFAULT_CSS = """
    EventScreen { align: center middle; }
    EventScreen > VerticalScroll {
        width: 100; max-width: 95%; height: auto; max-height: 90%;
        border: round $accent; background: $surface; padding: 0 1;
    }
    """

    def __init__(self, entry: Entry) -> None:
        super().__init__()
        self.entry = entry

    def compose(self) -> ComposeResult:
        entry = self.entry
        parts: list[RenderableType] = [
            Text(f"{clock(entry.t)}  {entry.text}", style="bold"),
            Text(""),
        ]
        if not entry.events:
            parts.append(Text("(a line of the dashboard's own: no engine event)", style="dim"))
        for n, event in enumerate(entry.events):
            if len(entry.events) > 1:
                parts.append(Text(f"event {n + 1} of {len(entry.events)}", style="underline"))
            parts.append(event_text(event))
        with VerticalScroll() as box:
            box.border_title = "event"
            box.border_subtitle = "esc to close"
            yield Static(Group(*parts))

    # Textual's action_dismiss is a coroutine method; this one dismisses at once, so its
    # signature differs from the base class's on purpose
    def action_dismiss(self, result: None = None) -> None:  # type: ignore[override]
        self.dismiss(None)
