"""Logging setup: human text for terminals, one JSON object per line for collectors."""

from __future__ import annotations

import logging
import sys
import time
from typing import TextIO

LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("debug", "info", "warning", "error")


class JsonFormatter(logging.Formatter):
    """One object a line; ``node`` (the node's name, when known) is a field of each.

    Collectors that ship a DaemonSet's logs from many nodes to one place keep
    the node that way even where they add no Kubernetes metadata.
    """

    def __init__(self, node: str = "") -> None:
        super().__init__()
        self.node = node
        # Loaded with the format that needs it: not on a text-logging plugin's start.
        import json

        self._dumps = json.dumps

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if self.node:
            entry["node"] = self.node
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return self.dumps(entry)

    def dumps(self, entry: dict[str, object]) -> str:
        """One log line's text: ``entry`` as JSON, non-ASCII kept."""
        return self._dumps(entry, ensure_ascii=False)


def fatal(message: str, stream: TextIO | None = None) -> None:
    """Say why the process exits: a plain line, or one JSON object under --log-format json.

    Printed rather than logged so it appears whatever --log-level says; its
    shape follows the handler setup_logging installed, so a collector that
    parses every line as JSON gets this one too.
    """
    out = stream or sys.stderr
    handlers = logging.getLogger().handlers
    json_formatter = next(
        (h.formatter for h in handlers if isinstance(h.formatter, JsonFormatter)), None
    )
    if json_formatter is not None:
        entry = {"ts": round(time.time(), 3), "level": "fatal", "logger": "accel_plugins"}
        if json_formatter.node:
            entry["node"] = json_formatter.node
        print(json_formatter.dumps({**entry, "msg": message}), file=out, flush=True)
    else:
        print(message, file=out, flush=True)


def setup_logging(
    fmt: str = "text", level: str = "info", stream: TextIO | None = None, node: str = ""
) -> None:
    """Log to ``stream`` (stderr); ``node`` names the node in each line (--node-name)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter(node))
    else:
        # Text lines say the node after the level, where a reader of mixed logs looks.
        where = f"node={node.replace('%', '%%')} " if node else ""
        line = f"%(asctime)s %(levelname)-7s {where}%(name)s: %(message)s"
        handler.setFormatter(logging.Formatter(line))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # grpc's own loggers are chatty at debug and add nothing operators need.
    logging.getLogger("grpc").setLevel(max(root.level, logging.WARNING))
    # The API client logs each request at INFO (every slice write, every watch restart):
    # seen on a real node, a DRA driver's log was mostly these lines. Kept at debug.
    quiet = logging.DEBUG if root.level <= logging.DEBUG else logging.WARNING
    for client in ("httpx2", "httpx", "httpcore"):
        logging.getLogger(client).setLevel(quiet)
