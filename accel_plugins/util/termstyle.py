"""ANSI colour for terminal output, and when to use it.

``--color auto`` colours only a terminal, and never when ``NO_COLOR`` is set
to a non-empty value (https://no-color.org: "when present and not an empty
string (regardless of its value), prevents the addition of ANSI color");
``always`` and ``never`` decide regardless, as a flag the user typed should.
Plain output is exactly the text without the escape codes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TextIO

COLOR_CHOICES = ("auto", "always", "never")

_RESET = "\033[0m"
_CODES = {
    "bold": "1",
    "dim": "2",
    "red": "31",
    "green": "32",
    "yellow": "33",
    "cyan": "36",
}


def wants_color(choice: str, stream: TextIO, environ: Mapping[str, str]) -> bool:
    if choice == "always":
        return True
    if choice == "never" or environ.get("NO_COLOR"):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty is not None and isatty())


@dataclass(frozen=True, slots=True)
class Style:
    """Wraps text in SGR codes when ``enabled``; returns it unchanged otherwise."""

    enabled: bool = False

    def paint(self, text: str, *styles: str) -> str:
        if not self.enabled or not styles:
            return text
        return f"\033[{';'.join(_CODES[s] for s in styles)}m{text}{_RESET}"

    def bold(self, text: str) -> str:
        return self.paint(text, "bold")

    def dim(self, text: str) -> str:
        return self.paint(text, "dim")

    def good(self, text: str) -> str:
        return self.paint(text, "bold", "green")

    def bad(self, text: str) -> str:
        return self.paint(text, "bold", "red")

    def note(self, text: str) -> str:
        return self.paint(text, "yellow")

    def title(self, text: str) -> str:
        return self.paint(text, "bold", "cyan")


PLAIN = Style(False)
