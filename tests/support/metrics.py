"""Helpers of the metrics tests: a plugin process's metrics wiring, scraped over real HTTP.

``MetricsNode`` runs a Manager with the Prometheus recorder and every
scrape-time collector in a registry of its own, plus the HTTP server on an
ephemeral port, exactly as ``accel_plugins.cli.main.serve`` wires them.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from accel_plugins.deviceplugin.manager import Manager, ManagerSettings
from accel_plugins.metrics import MetricsServer, PrometheusMetrics, watch_manager
from accel_plugins.plugin.backend import Backend
from accel_plugins.runtime.podresources import PodResourcesCache

Labels = tuple[tuple[str, str], ...]
Samples = dict[tuple[str, Labels], float]


def get(url: str) -> tuple[int, str]:
    """GET ``url``: (status, body), also for error statuses."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def parse(text: str) -> Samples:
    """Every sample of a scrape: (name, sorted labels) -> value."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def series(samples: Samples, name: str) -> dict[Labels, float]:
    """The samples of one name, by their labels."""
    return {labels: value for (n, labels), value in samples.items() if n == name}


def promtool_check(text: str) -> None:
    """Fail on anything ``promtool check metrics`` reports; skip where promtool is missing."""
    import pytest

    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian package prometheus)")
    done = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, f"promtool check metrics:\n{done.stdout}{done.stderr}"


class MetricsNode:
    """A Manager, its metrics registry and the HTTP server, started and stopped together."""

    def __init__(
        self,
        factory: Callable[[], Backend],
        plugin_dir: Path,
        *,
        pod_resources_socket: Path | None = None,
        probe_timeout: float = 1.0,
        **settings: Any,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.recorder = PrometheusMetrics(self.registry)
        options: dict[str, Any] = {"backoff_max": 0.5, **settings}
        self.manager = Manager(
            factory, ManagerSettings(plugin_dir=plugin_dir, **options), metrics=self.recorder
        )
        self.pod_resources = (
            PodResourcesCache(pod_resources_socket, max_age=0)
            if pod_resources_socket is not None
            else None
        )
        watch_manager(self.registry, self.manager, self.pod_resources)
        self.server = MetricsServer(
            self.registry,
            lambda: self.manager.problems(probe_timeout),
            before_scrape=[self.pod_resources.touch] if self.pod_resources else [],
        )
        self.url = ""
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Self:
        self._task = asyncio.create_task(self.manager.run())
        host, port = await self.server.start("127.0.0.1", 0)
        self.url = f"http://{host}:{port}"
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.server.stop()
        await self.manager.stop()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def get(self, path: str) -> tuple[int, str]:
        return await asyncio.to_thread(get, self.url + path)

    async def scrape(self) -> Samples:
        status, text = await self.get("/metrics")
        assert status == 200, text
        return parse(text)

    async def attribution(self) -> None:
        """Refresh the PodResources cache now (scrapes only schedule refreshes)."""
        assert self.pod_resources is not None
        await self.pod_resources.refresh()
