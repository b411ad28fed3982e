"""The ``--metrics-address`` flag: where /metrics and /healthz are served."""

from __future__ import annotations

from accel_plugins.errors import ConfigError

DEFAULT_METRICS_PORT = 9478
DEFAULT_METRICS_ADDRESS = f":{DEFAULT_METRICS_PORT}"


def parse_address(text: str, source: str = "--metrics-address") -> tuple[str, int] | None:
    """`host:port`, `:port` (all interfaces) or empty (disabled)."""
    if not text:
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(source, "", f"{text!r} is not host:port (empty disables metrics)")
    return (host.strip("[]") or "0.0.0.0", int(port))
