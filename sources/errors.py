"""The one error a source raises to its reader: a command it cannot send.

Its own module so that every source (live, replay, cuzk) and the dashboard share it without
importing one another.
"""

from __future__ import annotations


class SourceError(Exception):
    """A command could not be sent (read-only source, not connected, replay)."""
