"""An API outage: KubeSlicePublisher never raises, counts each failure and backs off.

The client in front of the real API server fails its first calls as a
connection refused would; the backoff clock is fake, so the test reads the
delays instead of waiting them.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("lightkube", reason="the [dra] extra (lightkube) is not installed")

import httpx2
from lightkube import AsyncClient
from lightkube.resources.resource_v1 import ResourceSlice
from prometheus_client import CollectorRegistry

from accel_plugins.dra.kube import KubeSlicePublisher
from accel_plugins.plugin.device import Device, tree
from tests.support.jitter import within_jitter

FAILURES = "accel_plugins_dra_slice_publish_failures_total"


class Outage:
    """Fails the first ``calls`` API calls with a connection error, then passes through."""

    def __init__(self, client: AsyncClient, calls: int) -> None:
        self._client = client
        self.left = calls

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._client, name)
        if self.left <= 0:
            return target
        self.left -= 1
        raise httpx2.ConnectError("connection refused (simulated outage)")


@pytest.mark.parametrize(
    ("failed_calls", "delays"),
    [
        pytest.param(0, [], id="no-outage"),
        pytest.param(1, [1.0], id="one-failure"),
        pytest.param(7, [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0], id="capped-at-30s"),
    ],
)
async def test_outage_is_retried_with_backoff_and_counted(
    kube: AsyncClient, kube_node: str, failed_calls: int, delays: list[float]
) -> None:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        await asyncio.sleep(0)

    registry = CollectorRegistry()
    pub = KubeSlicePublisher(
        Outage(kube, failed_calls),  # type: ignore[arg-type]
        driver="outage.example.com",
        node=kube_node,
        registry=registry,
        sleep=sleep,
    )
    await pub.publish(tree({"example.com/dev": [Device(id="dev0")]}))  # never raises
    assert pub.in_sync == (failed_calls == 0)
    await pub.wait_in_sync()
    assert pub.in_sync
    assert within_jitter(slept, delays)
    assert registry.get_sample_value(FAILURES) == failed_calls
    written = await kube.get(ResourceSlice, f"{kube_node}-outage.example.com-0")
    assert [d.name for d in written.spec.devices or []] == ["dev0"]
    await pub.close()


async def test_close_stops_retrying(kube: AsyncClient, kube_node: str) -> None:
    never: asyncio.Event = asyncio.Event()

    async def sleep(seconds: float) -> None:
        await never.wait()

    pub = KubeSlicePublisher(
        Outage(kube, 1),  # type: ignore[arg-type]
        driver="outage.example.com",
        node=kube_node,
        registry=CollectorRegistry(),
        sleep=sleep,
    )
    await pub.publish(tree({"example.com/dev": [Device(id="dev0")]}))
    await pub.close()
    assert not pub.in_sync
