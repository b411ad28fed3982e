"""Logging setup: human text for terminals, one JSON object per line for collectors."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import TextIO

LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("debug", "info", "warning", "error")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def fatal(message: str, stream: TextIO | None = None) -> None:
    """Say why the process exits: a plain line, or one JSON object under --log-format json.

    Printed rather than logged so it appears whatever --log-level says; its
    shape follows the handler setup_logging installed, so a collector that
    parses every line as JSON gets this one too.
    """
    out = stream or sys.stderr
    handlers = logging.getLogger().handlers
    if any(isinstance(h.formatter, JsonFormatter) for h in handlers):
        entry = {"ts": round(time.time(), 3), "level": "fatal", "logger": "accel_plugins"}
        print(json.dumps({**entry, "msg": message}, ensure_ascii=False), file=out, flush=True)
    else:
        print(message, file=out, flush=True)


def setup_logging(fmt: str = "text", level: str = "info", stream: TextIO | None = None) -> None:
    handler = logging.StreamHandler(stream or sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # grpc's own loggers are chatty at debug and add nothing operators need.
    logging.getLogger("grpc").setLevel(max(root.level, logging.WARNING))
