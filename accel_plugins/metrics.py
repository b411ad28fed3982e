"""Prometheus metrics and the health endpoint of a plugin process.

State is read at scrape time from the manager (a collector, not counters
updated on every change), into a registry that the caller passes in. The
HTTP side is a few lines of asyncio so the plugin needs no extra thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from accel_plugins import __version__
from accel_plugins.errors import ConfigError
from accel_plugins.plugin.lifecycle import PluginStatus

log = logging.getLogger(__name__)

PREFIX = "accel_plugins"
DEFAULT_METRICS_ADDRESS = ":9478"

StatusSource = Callable[[], Mapping[str, PluginStatus]]


class PluginCollector(Collector):
    def __init__(self, status: StatusSource) -> None:
        self._status = status

    def collect(self) -> Iterator[Metric]:
        status = self._status()
        devices = GaugeMetricFamily(
            f"{PREFIX}_devices", "Devices offered to the kubelet.", labels=["resource", "health"]
        )
        registered = GaugeMetricFamily(
            f"{PREFIX}_resource_registered",
            "1 while the resource is registered with the kubelet and served.",
            labels=["resource"],
        )
        streams = GaugeMetricFamily(
            f"{PREFIX}_list_and_watch_streams", "Open ListAndWatch streams.", labels=["resource"]
        )
        registrations = CounterMetricFamily(
            f"{PREFIX}_registrations",
            "Successful registrations with the kubelet.",
            labels=["resource"],
        )
        for resource, s in status.items():
            devices.add_metric([resource, "Healthy"], s.healthy)
            devices.add_metric([resource, "Unhealthy"], s.devices - s.healthy)
            registered.add_metric([resource], 1 if s.registered and s.serving else 0)
            streams.add_metric([resource], s.open_streams)
            registrations.add_metric([resource], s.registrations)
        info = GaugeMetricFamily(f"{PREFIX}_build_info", "Build information.", labels=["version"])
        info.add_metric([__version__], 1)
        yield from (devices, registered, streams, registrations, info)


def healthy(status: Mapping[str, PluginStatus]) -> bool:
    """True while every resource is served and registered with the kubelet."""
    return all(s.serving and s.registered for s in status.values())


def parse_address(text: str, source: str = "--metrics-address") -> tuple[str, int] | None:
    """`host:port`, `:port` (all interfaces) or empty (disabled)."""
    if not text:
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(source, "", f"{text!r} is not host:port (empty disables metrics)")
    return (host.strip("[]") or "0.0.0.0", int(port))


class MetricsServer:
    """Serves GET /metrics and /healthz on one TCP address."""

    def __init__(self, registry: CollectorRegistry, status: StatusSource) -> None:
        self._registry = registry
        self._status = status
        self._server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> tuple[str, int]:
        self._server = await asyncio.start_server(self._handle, host, port)
        bound: tuple[str, int] = self._server.sockets[0].getsockname()[:2]
        log.info("metrics on http://%s:%d/metrics", *bound)
        return bound

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readline(), timeout=10)
            while (await asyncio.wait_for(reader.readline(), timeout=10)) not in (b"\r\n", b""):
                pass  # headers are not needed
            parts = request.decode("latin-1").split()
            path = parts[1].split("?", 1)[0] if len(parts) >= 2 else ""
            if len(parts) < 2 or parts[0] not in ("GET", "HEAD"):
                code, ctype, body = 405, "text/plain", b"method not allowed\n"
            elif path == "/metrics":
                code, ctype, body = 200, CONTENT_TYPE_LATEST, generate_latest(self._registry)
            elif path == "/healthz":
                ok = healthy(self._status())
                code, ctype, body = (
                    (200 if ok else 503),
                    "text/plain",
                    b"ok\n" if ok else (b"not registered\n"),
                )
            else:
                code, ctype, body = 404, "text/plain", b"not found\n"
            reason = {200: "OK", 404: "Not Found", 405: "Method Not Allowed"}.get(
                code, "Service Unavailable"
            )
            head = (
                f"HTTP/1.1 {code} {reason}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            )
            writer.write(head.encode() + (b"" if parts[:1] == ["HEAD"] else body))
            await writer.drain()
        except (TimeoutError, ConnectionError, UnicodeError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()


def new_registry(status: StatusSource) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PluginCollector(status))
    return registry
