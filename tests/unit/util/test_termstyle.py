"""When the demo colours its output: https://no-color.org and the --color flag."""

from __future__ import annotations

import io

import pytest

from accel_plugins.cli.main import DEMO_COLORS
from accel_plugins.util.termstyle import COLOR_CHOICES, PLAIN, Style, wants_color


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("choice", "tty", "environ", "expected"),
    [
        pytest.param("auto", True, {}, True, id="terminal"),
        pytest.param("auto", False, {}, False, id="pipe-or-file"),
        pytest.param("auto", True, {"NO_COLOR": "1"}, False, id="no-color-set"),
        # no-color.org: "when present and not an empty string".
        pytest.param("auto", True, {"NO_COLOR": ""}, True, id="no-color-empty"),
        pytest.param("always", False, {"NO_COLOR": "1"}, True, id="always-wins"),
        pytest.param("never", True, {}, False, id="never"),
    ],
)
def test_wants_color(choice: str, tty: bool, environ: dict[str, str], expected: bool) -> None:
    stream = Terminal() if tty else io.StringIO()
    assert wants_color(choice, stream, environ) is expected


def test_plain_text_is_unchanged_and_colour_only_wraps_it() -> None:
    assert PLAIN.good("ok") == "ok"
    assert Style(True).good("ok") == "\033[1;32mok\033[0m"
    assert Style(True).title("== x") == "\033[1;36m== x\033[0m"


def test_the_cli_offers_the_same_choices() -> None:
    assert DEMO_COLORS == COLOR_CHOICES
