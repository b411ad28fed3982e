"""setup_logging: which libraries' lines an operator sees at each level."""

from __future__ import annotations

import io
import logging

import pytest

from accel_plugins.util.logs import setup_logging


@pytest.mark.parametrize(
    ("level", "shown"),
    [
        pytest.param("info", False, id="info: no line per API request"),
        pytest.param("debug", True, id="debug: every API request"),
    ],
)
def test_the_api_clients_request_lines_only_at_debug(level: str, shown: bool) -> None:
    out = io.StringIO()
    setup_logging("text", level, out)
    try:
        logging.getLogger("httpx2").info('HTTP Request: GET https://api/x "HTTP/1.1 200 OK"')
        logging.getLogger("accel_plugins.dra").info("slices published")
    finally:
        setup_logging("text", "info", io.StringIO())
    assert ("HTTP Request" in out.getvalue()) is shown
    assert "slices published" in out.getvalue()
