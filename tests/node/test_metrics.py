"""Each plugin pod's /metrics on the real node, scraped as Prometheus would.

The chart's pods serve /metrics on the pod network (metrics.port); the suite runs inside
the node's network namespace, so it reaches them by pod IP as a scraper in the cluster
would. Device plugins name each device's holder (namespace, pod, container) from the
kubelet's PodResources API (the chart mounts its socket); DRA drivers from the prepared
claims' pods (status.reservedFor; a claim names no container). Either way a running
consumer's pod is in its device's series.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from tests.node import dra, plugins
from tests.node.chart import Release
from tests.node.kubelet_state import allocations
from tests.node.metrics import await_holder, plugin_pod_ip, scrape
from tests.node.pods import NAMESPACE, pod, pod_log, seen_devices, seen_env, show_devices
from tests.support.metrics import Samples, series

if TYPE_CHECKING:
    from lightkube import Client


@pytest.mark.parametrize(
    ("backend", "resource"),
    [("generic", plugins.GENERIC_RESOURCE), ("nvidia", plugins.GPU_RESOURCE)],
)
def test_a_plugin_pods_metrics_name_the_pod_holding_its_device(
    kube: Client, device_plugins: Release, backend: str, resource: str
) -> None:
    ip = plugin_pod_ip(kube, device_plugins, backend)
    with pod(kube, "consumer", show_devices(), limits={resource: "1"}) as name:
        log = pod_log(kube, name)
        labels = await_holder(ip, "accel_plugins_device_healthy", name)
        samples = scrape(ip)
        (allocation,) = allocations(kube, name, NAMESPACE)
    # The series names the device the kubelet gave this pod.
    assert {labels["device"]} == allocation.device_ids
    assert labels["resource"] == resource
    assert (labels["namespace"], labels["container"]) == (NAMESPACE, "main")
    assert series(samples, "accel_plugins_pod_attribution_available") == {(): 1.0}
    if backend == "nvidia":
        gpu = _one_gpu_series(samples, name)
        assert gpu["uuid"] == seen_env(log)["NVIDIA_VISIBLE_DEVICES"]


@pytest.mark.parametrize(
    ("backend", "device_class", "resource"),
    [
        ("generic", dra.GENERIC_CLASS, plugins.GENERIC_RESOURCE),
        ("nvidia", dra.GPU_CLASS, plugins.GPU_RESOURCE),
    ],
)
def test_a_dra_drivers_metrics_name_the_pod_holding_its_device(
    kube: Client, dra_drivers: Release, backend: str, device_class: str, resource: str
) -> None:
    ip = plugin_pod_ip(kube, dra_drivers, backend)
    with (
        dra.claim_template(kube, f"metrics-{backend}", device_class) as template,
        pod(kube, "claimer", show_devices(), claim_template=template) as name,
    ):
        log = pod_log(kube, name)
        labels = await_holder(ip, "accel_plugins_device_healthy", name)
        samples = scrape(ip)
    assert labels["resource"] == resource
    assert (labels["namespace"], labels["container"]) == (NAMESPACE, "")
    if backend == "nvidia":  # the mock GPU whose device node the container got
        gpu = _one_gpu_series(samples, name)
        assert f"/dev/nvidia{gpu['index']}" in seen_devices(log)


def _one_gpu_series(samples: Samples, holder: str) -> dict[str, Any]:
    held = [
        dict(labels)
        for labels in series(samples, "accel_plugins_gpu_healthy")
        if ("pod", holder) in labels
    ]
    assert len(held) == 1, held
    return held[0]
