"""The one error type of recording files, shared by the writer and the reader."""

from __future__ import annotations


class RecordingError(ValueError):
    """A recording that cannot be read or written: missing, unreadable, corrupt or unwritable.

    The message is one line naming the file and, for corruption, the byte offset, so the CLI can
    print it as is (``provetop summary`` turns it into exit code 2)."""
