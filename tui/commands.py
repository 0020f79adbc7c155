"""Command palette (ctrl+p): every dashboard action by name, so nothing needs a memorised key.

Actions that do not apply right now (controls in replay or on a read-only engine, replay keys
while live) are left out, the same rule that greys them in the footer."""

from __future__ import annotations

from functools import partial

from textual.app import App
from textual.command import DiscoveryHit, Hit, Hits, Provider

# (action, title, help)
ACTIONS: tuple[tuple[str, str, str], ...] = (
    ("force_fallback", "Toggle forced pre-stage fallback", "on the selected device (engine)"),
    ("pause_intake", "Pause / resume intake", "stop or restart feeding partitions (engine)"),
    ("trim", "Trim pools now", "release cached pool memory on the selected device (engine)"),
    ("marker", "Add a marker", "a named point in the run and its recording (engine)"),
    ("save", "Save the run", "write what this dashboard received as a recording"),
    ("replay_toggle", "Play / pause replay", "replay"),
    ("replay_speed(2.0)", "Replay faster", "double the speed, up to 16x"),
    ("replay_speed(0.5)", "Replay slower", "halve the speed, down to 0.25x"),
    ("replay_seek(-5)", "Seek back 5 s", "replay"),
    ("replay_seek(5)", "Seek forward 5 s", "replay"),
    ("replay_seek(-60)", "Seek back 1 min", "replay"),
    ("replay_seek(60)", "Seek forward 1 min", "replay"),
    ("replay_jump('start')", "Jump to start", "replay"),
    ("replay_jump('end')", "Jump to end", "replay"),
    ("replay_point(1)", "Next fault or marker", "replay"),
    ("replay_point(-1)", "Previous fault or marker", "replay"),
    ("follow", "Follow live", "timeline: back to the newest events"),
    ("zoom(-1)", "Zoom in", "timeline: a narrower window"),
    ("zoom(1)", "Zoom out", "timeline: a wider window"),
    ("gpu_only", "GPU lanes only", "timeline: show or hide worker and upload lanes"),
    ("next_engine", "Next engine", "when watching several engines"),
    ("toggle_theme", "Toggle dark / light theme", "appearance"),
    ("toggle_maximize", "Maximise the focused panel", "or restore the layout"),
    ("help", "Help: keys", "every key binding"),
    ("quit", "Quit", "leave the dashboard"),
)


def _enabled(app: App[object], action: str) -> bool:
    name = action.split("(", 1)[0]
    check = getattr(app, "check_action", None)
    return check is None or bool(check(name, ()))


class DashboardCommands(Provider):
    """Palette entries for the dashboard's actions."""

    async def discover(self) -> Hits:
        for action, title, help_text in ACTIONS:
            if _enabled(self.app, action):
                yield DiscoveryHit(title, partial(self.app.run_action, action), help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for action, title, help_text in ACTIONS:
            if not _enabled(self.app, action):
                continue
            score = matcher.match(title)
            if score > 0:
                yield Hit(
                    score,
                    matcher.highlight(title),
                    partial(self.app.run_action, action),
                    help=help_text,
                )
