"""The plugin pods' /metrics on the test node, scraped by pod IP as Prometheus would."""

from __future__ import annotations

import time
import urllib.request
from typing import TYPE_CHECKING

from tests.node import plugins
from tests.node.chart import Release
from tests.support.metrics import Samples, parse, series

if TYPE_CHECKING:
    from lightkube import Client

METRICS_PORT = 9478  # the chart's metrics.port
# The plugin refreshes what the kubelet says at most every 2 s, on a scrape: a few
# scrapes, never an event to wait on, so a bound that only a broken attribution reaches.
ATTRIBUTED_WITHIN = 30.0


def plugin_pod_ip(kube: Client, release: Release, backend: str) -> str:
    from lightkube.resources.core_v1 import Pod

    (daemonset,) = (d for d in release.daemonsets() if d.endswith(f"-{backend}"))
    for got in kube.list(Pod, namespace=plugins.NAMESPACE):
        owners = {o.name for o in got.metadata.ownerReferences or []} if got.metadata else set()
        if daemonset in owners and got.status and got.status.podIP:
            return str(got.status.podIP)
    raise AssertionError(f"no running pod of {daemonset}")


def scrape(ip: str) -> Samples:
    # Never through a proxy of the environment: the pod network is inside the namespace.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"http://{ip}:{METRICS_PORT}/metrics", timeout=10) as answer:
        return parse(answer.read().decode())


def await_holder(ip: str, name: str, holder: str) -> dict[str, str]:
    """The labels of the one ``name`` series that names the pod ``holder``."""
    deadline = time.monotonic() + ATTRIBUTED_WITHIN
    while True:
        held = [dict(labels) for labels in series(scrape(ip), name) if ("pod", holder) in labels]
        if held or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert len(held) == 1, f"{name} series naming pod {holder}: {held}"
    return held[0]


def await_health_reason(ip: str, resource: str, kind: str) -> list[dict[str, str]]:
    """The labels of ``resource``'s health-reason series of ``kind``, once there are any
    (accel_plugins_device_health_reason is 1 while a device is Unhealthy for a reason)."""
    deadline = time.monotonic() + ATTRIBUTED_WITHIN
    while True:
        found = [
            dict(labels)
            for labels, value in series(scrape(ip), "accel_plugins_device_health_reason").items()
            if value == 1 and ("resource", resource) in labels and ("kind", kind) in labels
        ]
        if found or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert found, f"no {kind} health reason for {resource} at {ip}"
    return found
