"""ANSI colour for the text a person reads: on a terminal only, never in a pipe or with NO_COLOR set.

The rule is ``diff``'s (``clusterkit.diff.text.use_color`` with ``auto``: a TTY, no NO_COLOR, TERM not dumb),
so every command colours under the same conditions; the words stay the same, only the escapes are added.
"""
from __future__ import annotations

from typing import TextIO

from clusterkit.diff.text import use_color

ERROR = "1;31"
WARNING = "33"
OK = "32"


def paint(text: str, code: str, stream: TextIO) -> str:
    """``text`` in colour ``code`` when ``stream`` is a terminal that wants colour, else unchanged."""
    return f"\x1b[{code}m{text}\x1b[0m" if use_color("auto", stream) else text
