"""Help wraps where argparse's own formatter would, without argparse importing shutil.

argparse makes a formatter for every flag it adds, and its formatter imports ``shutil``
(with bz2 and lzma) to read the terminal's width: on a starting plugin's path for nothing
(issue 34). Ours reads the width as ``shutil.get_terminal_size`` does.
"""

from __future__ import annotations

import argparse
import shutil

import pytest

from accel_plugins.cli import main as cli_main
from accel_plugins.cli.main import _terminal_columns, main


@pytest.mark.parametrize(
    "columns",
    [
        pytest.param("60", id="COLUMNS set"),
        pytest.param(None, id="COLUMNS unset, not a terminal"),
        pytest.param("abc", id="COLUMNS not a number"),
        pytest.param("0", id="COLUMNS zero"),
        pytest.param("-5", id="COLUMNS negative"),
    ],
)
def test_the_width_is_the_one_shutil_reads(
    columns: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    assert _terminal_columns() == shutil.get_terminal_size().columns


def help_text(capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit):
        main(["generic", "--help"])
    return capsys.readouterr().out


@pytest.mark.parametrize("columns", ["60", "120"])
def test_help_reads_as_with_argparses_own_formatter(
    columns: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", columns)
    ours = help_text(capsys)
    monkeypatch.setattr(cli_main, "HelpFormatter", argparse.HelpFormatter)
    assert ours == help_text(capsys)
    assert len(ours.splitlines()) > 20
