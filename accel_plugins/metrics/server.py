"""GET /metrics, /healthz and /readyz on one TCP address, in a few lines of asyncio.

A scrape first runs the ``before_scrape`` hooks on the event loop (they may
only schedule work, e.g. a PodResources refresh, never wait for it), then
renders the registry in a worker thread: collectors may read hardware (NVML)
and a 10,000-device node takes tens of milliseconds to format, neither of
which should hold up Allocate on the loop. /healthz asks the health check
(the manager probes every resource's server) with a time limit: the liveness
probe's question, "is this process stuck?". /readyz adds what the plugin is
waiting for (the other mode's handover, say): the readiness probe's question,
"does it serve yet?". A plugin that waits is alive, and must not be restarted
for waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable, Sequence

from prometheus_client.registry import Collector

from accel_plugins.metrics.collectors import StatusSource
from accel_plugins.metrics.exposition import CONTENT_TYPE, render

log = logging.getLogger(__name__)

HealthCheck = Callable[[], Awaitable[Sequence[str]]]
"""Returns what is wrong now, one line per problem; empty means healthy."""

HealthNotes = Callable[[], Sequence[str]]
"""What an operator should know but that is no reason to restart the plugin (a bad
configuration file while the previous one serves): listed by /healthz, still 200."""

HEALTH_TIMEOUT = 5.0
_REASONS = {
    200: "OK",
    404: "Not Found",
    405: "Method Not Allowed",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


def status_health(status: StatusSource) -> HealthCheck:
    """A health check from status alone: every resource served and registered."""

    async def problems() -> list[str]:
        return [
            f"{name}: {'not serving' if not s.serving else 'not registered with the kubelet'}"
            for name, s in status().items()
            if not (s.serving and s.registered)
        ]

    return problems


class MetricsServer:
    """Serves GET (and HEAD) /metrics, /healthz and /readyz."""

    def __init__(
        self,
        registry: Collector,
        health: HealthCheck,
        *,
        before_scrape: Sequence[Callable[[], None]] = (),
        health_timeout: float = HEALTH_TIMEOUT,
        notes: HealthNotes = tuple,
        readiness: HealthCheck | None = None,
    ) -> None:
        self._registry = registry
        self._health = health
        self._readiness = readiness
        self._notes = notes
        self._before_scrape = tuple(before_scrape)
        self._health_timeout = health_timeout
        self._server: asyncio.Server | None = None

    async def start(
        self, host: str = "", port: int = 0, *, sock: socket.socket | None = None
    ) -> tuple[str, int]:
        """Serve on ``host:port``, or on ``sock``, a listening socket bound earlier."""
        if sock is not None:
            self._server = await asyncio.start_server(self._handle, sock=sock)
        else:
            self._server = await asyncio.start_server(self._handle, host, port)
        bound: tuple[str, int] = self._server.sockets[0].getsockname()[:2]
        log.info("metrics on http://%s:%d/metrics", *bound)
        return bound

    @property
    def stopped(self) -> bool:
        return self._server is None

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def scrape(self) -> bytes:
        """The /metrics body, as a request would get it."""
        for hook in self._before_scrape:
            hook()
        return await asyncio.to_thread(render, self._registry)

    async def health(self) -> list[str]:
        """The /healthz problems; a check that overruns its time is one itself."""
        return await self._checked(self._health, "health check")

    async def readiness(self) -> list[str]:
        """The /readyz problems: /healthz's and what the plugin is still waiting for."""
        waiting = await self._checked(self._readiness, "readiness check") if self._readiness else []
        return [*await self.health(), *waiting]

    async def _checked(self, check: HealthCheck, what: str) -> list[str]:
        try:
            async with asyncio.timeout(self._health_timeout):
                return list(await check())
        except TimeoutError:
            return [f"{what} took longer than {self._health_timeout:g}s"]

    async def _respond(self, method: str, path: str) -> tuple[int, str, bytes]:
        if method not in ("GET", "HEAD"):
            return 405, "text/plain", b"method not allowed\n"
        if path == "/metrics":
            try:
                return 200, CONTENT_TYPE, await self.scrape()
            except Exception:
                log.exception("scrape failed")
                return 500, "text/plain", b"scrape failed; see the plugin's log\n"
        if path == "/healthz":
            problems = await self.health()
            # Notes never fail the probe: a liveness probe restarting the plugin over a
            # bad config file would stop the previous config serving and crash-loop.
            notes = "".join(f"{n}\n" for n in self._notes())
            if not problems:
                return 200, "text/plain", f"ok\n{notes}".encode()
            return 503, "text/plain", ("".join(f"{p}\n" for p in problems) + notes).encode()
        if path == "/readyz":
            problems = await self.readiness()
            if not problems:
                return 200, "text/plain", b"ready\n"
            return 503, "text/plain", "".join(f"{p}\n" for p in problems).encode()
        return 404, "text/plain", b"not found\n"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readline(), timeout=10)
            while (await asyncio.wait_for(reader.readline(), timeout=10)) not in (b"\r\n", b""):
                pass  # headers are not needed
            parts = request.decode("latin-1").split()
            method = parts[0] if parts else ""
            path = parts[1].split("?", 1)[0] if len(parts) >= 2 else ""
            code, ctype, body = await self._respond(method, path)
            head = (
                f"HTTP/1.1 {code} {_REASONS[code]}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            )
            writer.write(head.encode() + (b"" if method == "HEAD" else body))
            await writer.drain()
        except (TimeoutError, ConnectionError, UnicodeError):
            pass
        except Exception:
            log.exception("metrics request failed")
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
