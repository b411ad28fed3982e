"""Why the process exits, as the log format asks: a plain line, or one JSON object per line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import run_cli


@pytest.mark.parametrize(
    ("argv", "code", "says"),
    [
        pytest.param(
            ["generic", "--config", "{missing}"],
            2,
            "accel-plugins generic: configuration error: ",
            id="generic: unreadable config",
        ),
        pytest.param(
            ["nvidia", "--config", "{bad}"],
            2,
            "accel-plugins nvidia: configuration error: ",
            id="nvidia: bad config",
        ),
    ],
)
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_fatal_error_follows_the_log_format(
    tmp_path: Path, argv: list[str], code: int, says: str, fmt: str
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: v1\nflags: {migStrategy: sideways}\n")
    paths = {"missing": str(tmp_path / "missing.yaml"), "bad": str(bad)}
    result = run_cli(*[a.format(**paths) for a in argv], "--log-format", fmt)
    assert result.returncode == code
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    if fmt == "json":
        entries = [json.loads(line) for line in lines]  # every line parses
        (fatal,) = [e for e in entries if e["level"] == "fatal"]
        assert fatal["msg"].startswith(says)
        assert fatal["logger"] == "accel_plugins"
        assert isinstance(fatal["ts"], float)
    else:
        assert lines[-1].startswith(says)
