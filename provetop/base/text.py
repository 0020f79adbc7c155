"""Client text made safe to store, broadcast and draw: the one cleaner of every string a
client sends (marker names, command arguments, the echo of a refused command).

Why: such a string is recorded and sent to every other client, whose terminals and dashboards
draw it. Raw, it carried terminal escapes (``ESC ]0;...BEL`` retitles a terminal, ``ESC [2J``
clears it), bidi overrides and zero-width characters (text that reads differently from what it
is) and Rich markup (``[@click=app.quit]`` is a clickable action in a Textual notification).
What is removed: every control character (Unicode category Cc: C0, DEL, C1), every format
character (Cf: the bidi embeddings, overrides and isolates, zero-width spaces and joiners, the
BOM, soft hyphens), line and paragraph separators, private-use and unassigned code points,
surrogates, and anything shaped like a markup tag (``[name...]``, ``[/...]``, ``[@...]``,
``[#...]``). Letters, digits, punctuation, spaces and ordinary brackets (``[2]``) stay.

A leaf module (it imports nothing of ours).
"""

from __future__ import annotations

import re
import unicodedata

_DROP = frozenset(("Cc", "Cf", "Co", "Cn", "Cs", "Zl", "Zp"))
# what Rich (and Textual) read as a tag: an opening bracket, an optional slash, then a letter,
# @ or # (or nothing before the closing bracket: "[/]"), up to the next closing bracket
_MARKUP = re.compile(r"\[/?(?:[A-Za-z@#][^\[\]]*)?\]")


def clean_text(text: str) -> str:
    """``text`` without control, format (bidi, zero-width), separator, private-use or
    unassigned characters and without markup tags; tabs become spaces."""
    kept = "".join(
        " " if ch == "\t" else ch
        for ch in text
        if ch == "\t" or unicodedata.category(ch) not in _DROP
    )
    while True:  # "[[b]b]" leaves "[b]" after one pass
        stripped = _MARKUP.sub("", kept)
        if stripped == kept:
            return stripped
        kept = stripped


def is_clean(text: str) -> bool:
    """Whether :func:`clean_text` would leave ``text`` as it is."""
    return clean_text(text) == text
