"""What the memory and health panels share: a per-device panel fed the reduced state and the
timeline's window, sized by its own content.

Why a base: both panels draw one selected device in full and the others briefly, re-layout
only when their height may change, and tell the grid how many rows they need; only what they
draw differs (:meth:`DevicePanel._content`, :meth:`DevicePanel._device_count`).
"""

from __future__ import annotations

from rich.console import Group
from rich.text import Text
from textual.geometry import Size
from textual.widget import Widget

from provetop.recordings.state import State


def rows_of(group: Group) -> int:
    """The rows a group of texts takes (each is flowed to the width already)."""
    return sum(r.plain.count("\n") + 1 for r in group.renderables if isinstance(r, Text))


class DevicePanel(Widget, can_focus=True):
    """A panel of per-device figures; subclasses draw them."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.state: State | None = None
        self.device: int | None = None
        self.window: tuple[int, int] = (0, 1)
        self._shape: tuple[object, ...] = ()

    def show(self, state: State, device: int | None, window: tuple[int, int]) -> None:
        """Draw ``state`` for ``device``; ``window`` is the timeline's (start, end)."""
        self.state, self.device, self.window = state, device, window
        shape = (self._device_count(state), device, self.size.width)
        self.refresh(layout=shape != self._shape)  # a layout pass only when the height may change
        self._shape = shape

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        """The rows the panel needs at ``width`` (the app sizes the grid's top row by it)."""
        content = self._content(width)
        console = self.app.console
        return len(console.render_lines(content, console.options.update_width(width), pad=False))

    def render(self) -> Group | Text:
        return self._content(max(20, self.size.width))

    def _device_count(self, state: State) -> int:
        """How many devices the panel draws (a change may change its height)."""
        raise NotImplementedError

    def _budget(self) -> int | None:
        """The rows the panel has in the compact layout (the box below the timeline), None in
        the wide one, where the app grows the grid's row to the panel's height instead."""
        box = self.parent
        if not getattr(self.app, "compact", False) or box is None:
            return None
        height = getattr(box, "size", None)
        return height.height if height is not None and height.height > 0 else None

    def _content(self, width: int) -> Group | Text:
        raise NotImplementedError
