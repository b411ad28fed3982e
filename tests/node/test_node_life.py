"""Node-life scenarios on the real node: running pods keep their devices, new pods get theirs.

Each scenario starts pods that hold devices (device plugin: a generic device and a
simulated GPU; DRA: a generic device through a claim), does to the node what happens to
nodes, then checks the holders and starts new pods. The DRA side of the kubelet restart
is issue 25's first finding: the kubelet wipes the node's slices at start and the driver
puts them back. Not here yet: the reboot (the device-plugin side failed: a holder started
after the chart-upgrade scenario was rejected "no healthy devices"), the DRA side of the
other scenarios and a device unplugged under a pod (docs/node-tests.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from tests.node import chart, dra, plugins
from tests.node.chart import Release
from tests.node.cluster import Node
from tests.node.pods import (
    await_pod,
    delete_pod,
    pod,
    pod_log,
    run_pod,
    running,
    seen_devices,
    seen_env,
    show_devices,
)
from tests.node.watch import await_deleted

if TYPE_CHECKING:
    from lightkube import Client

NEW_POD_WITHIN = 90.0  # a new pod that gets no device never runs: the bound ends the wait


@dataclass(frozen=True)
class Holder:
    """A pod holding a device, and what it saw when it started."""

    name: str
    container_id: str
    seen: frozenset[str]  # device nodes, or the GPUs of NVIDIA_VISIBLE_DEVICES


def _container_id(kube: Client, name: str) -> str:
    got = await_pod(kube, name, running)
    return str(got.status.containerStatuses[0].containerID)


def _seen(log: str) -> frozenset[str]:
    gpus = seen_env(log).get("NVIDIA_VISIBLE_DEVICES", "")
    return frozenset(seen_devices(log) | {g for g in gpus.split(",") if g})


def hold(kube: Client, prefix: str, **request: Any) -> Holder:
    # restartPolicy Always: after a reboot the kubelet starts the pod's containers again.
    name = run_pod(kube, prefix, show_devices(), restart="Always", **request)
    seen = _seen(pod_log(kube, name))
    assert seen, f"{prefix} holds no device"
    return Holder(name, _container_id(kube, name), seen)


@pytest.fixture
def dp_holders(kube: Client, node: Node, device_plugins: Release) -> Iterator[list[Holder]]:
    # A scenario before may have rolled the plugins out: start from all of them serving.
    for name in device_plugins.daemonsets():
        plugins.await_rollout(kube, name)
    plugins.await_allocatable(kube, node, plugins.full_capacity())
    holders = [
        hold(kube, "hold-generic", limits={plugins.GENERIC_RESOURCE: "1"}),
        hold(kube, "hold-gpu", limits={plugins.GPU_RESOURCE: "1"}),
    ]
    yield holders
    for holder in holders:
        delete_pod(kube, holder.name)


@pytest.fixture
def dra_holder(kube: Client, dra_drivers: Release) -> Iterator[Holder]:
    for name in dra_drivers.daemonsets():
        plugins.await_rollout(kube, name)
    with dra.claim_template(kube, "hold", dra.GENERIC_CLASS) as template:
        holder = hold(kube, "hold-dra", claim_template=template)
        yield holder
        delete_pod(kube, holder.name)


def assert_kept(kube: Client, holder: Holder, same_container: bool = True) -> None:
    """Still running with the devices it had (after a reboot: a new container, same devices)."""
    if same_container:
        got = await_pod(kube, holder.name, running, within=NEW_POD_WITHIN)
        assert got.status.containerStatuses[0].containerID == holder.container_id
        assert got.status.containerStatuses[0].restartCount == 0
        return

    def restarted(got: Any) -> bool:
        return _container_id_of(got) not in (None, holder.container_id)

    await_pod(kube, holder.name, restarted, within=NEW_POD_WITHIN)
    assert _seen(pod_log(kube, holder.name)) == holder.seen


def _container_id_of(got: Any) -> str | None:
    statuses = got.status.containerStatuses if got.status else None
    return statuses[0].containerID if statuses and statuses[0].state.running else None


def assert_new_dp_pods_get_devices(kube: Client, node: Node) -> None:
    for resource in (plugins.GENERIC_RESOURCE, plugins.GPU_RESOURCE):
        with pod(
            kube, "new", show_devices(), limits={resource: "1"}, within=NEW_POD_WITHIN
        ) as name:
            assert len(_seen(pod_log(kube, name))) == 1, resource


def assert_new_dra_pod_gets_device(kube: Client) -> None:
    with (
        dra.claim_template(kube, "new", dra.GENERIC_CLASS) as template,
        pod(
            kube, "new-dra", show_devices(), claim_template=template, within=NEW_POD_WITHIN
        ) as name,
    ):
        assert len(seen_devices(pod_log(kube, name))) == 1


def restart_kubelet(kube: Client, node: Node, releases: list[Release]) -> None:
    node.restart_kubelet()


def delete_plugin_pods(kube: Client, node: Node, releases: list[Release]) -> None:
    from lightkube.resources.core_v1 import Pod

    for release in releases:
        daemonsets = set(release.daemonsets())
        deleted = []
        for got in kube.list(Pod, namespace=plugins.NAMESPACE):
            assert got.metadata is not None
            owners = {o.name for o in got.metadata.ownerReferences or []}
            if owners & daemonsets and got.metadata.name is not None:
                kube.delete(Pod, got.metadata.name, namespace=plugins.NAMESPACE)
                deleted.append(got.metadata.name)
        for name in deleted:  # gone (not only terminating) before the rollout counts again
            await_deleted(kube, Pod, name, namespace=plugins.NAMESPACE)
        for name in daemonsets:
            plugins.await_rollout(kube, name)


def upgrade_chart(kube: Client, node: Node, releases: list[Release]) -> None:
    # A changed pod template (log level and an annotation) rolls every DaemonSet out.
    for release in releases:
        api = "dra" if release.name == "dra" else "device-plugin"
        values = plugins.values(node, api)
        values["common"] |= {
            "logLevel": "debug",
            "podAnnotations": {"accel-plugins.io/upgrade": "1"},
        }
        chart.apply(kube, release, values)
        for name in release.daemonsets():
            plugins.await_rollout(kube, name)


Scenario = Callable[["Client", Node, list[Release]], None]
SCENARIOS: dict[str, tuple[Scenario, bool]] = {
    # name: (what happens, whether running containers survive it)
    "kubelet restart": (restart_kubelet, True),
    "plugin pods deleted": (delete_plugin_pods, True),
    "chart upgrade": (upgrade_chart, True),
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_device_plugin_pods_keep_and_get_devices(
    kube: Client, node: Node, device_plugins: Release, dp_holders: list[Holder], scenario: str
) -> None:
    happen, survive = SCENARIOS[scenario]
    happen(kube, node, [device_plugins])
    plugins.await_allocatable(kube, node, plugins.full_capacity())
    for holder in dp_holders:
        assert_kept(kube, holder, same_container=survive)
    assert_new_dp_pods_get_devices(kube, node)


@pytest.mark.parametrize(
    "scenario",
    [
        pytest.param("kubelet restart"),
    ],
)
def test_dra_pods_keep_and_get_devices(
    kube: Client, node: Node, dra_drivers: Release, dra_holder: Holder, scenario: str
) -> None:
    happen, survive = SCENARIOS[scenario]
    happen(kube, node, [dra_drivers])
    assert_kept(kube, dra_holder, same_container=survive)
    assert_new_dra_pod_gets_device(kube)
