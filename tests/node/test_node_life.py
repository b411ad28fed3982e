"""Node-life scenarios on the real node: running pods keep their devices, new pods get theirs.

Each scenario starts workloads that hold devices (ReplicaSets of one pod; device plugin:
a generic device and a simulated GPU; DRA: a generic device through a claim), does to
the node what happens to nodes, then checks the holders and starts new pods:

- kubelet restart: the holders run on; in DRA the kubelet wipes the node's slices at
  start and the driver puts them back (issue 25);
- the plugin pods deleted (their DaemonSets recreate them), a chart upgrade with a changed
  pod template (a rollout): the holders run on;
- a reboot (every container, mount and /run file gone, /var/run/cdi emptied): a DRA holder
  restarts in the same pod with the same device, its CDI spec rewritten by our driver; the
  kubelet rejects a device-plugin holder before any plugin is back (see Outcome.REPLACED)
  and its ReplicaSet replaces it;
- a device unplugged under its holder: it leaves allocatable (the slices, in DRA), the
  holder runs on, a new pod gets another device, and it comes back when plugged in.
"""

from __future__ import annotations

import datetime
import enum
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from tests.node import chart, dra, plugins
from tests.node.chart import Release
from tests.node.cluster import DEVICES, Node, unplugged
from tests.node.kubelet_state import allocations
from tests.node.metrics import await_health_reason, plugin_pod_ip
from tests.node.pods import (
    NAMESPACE,
    await_pod,
    await_replica,
    delete_replica_set,
    pod,
    pod_log,
    run_replica_set,
    running,
    seen_devices,
    seen_env,
    show_devices,
)
from tests.node.watch import await_deleted, watch_until

if TYPE_CHECKING:
    from lightkube import Client

NEW_POD_WITHIN = 90.0  # a new pod that gets no device never runs: the bound ends the wait


class Outcome(enum.Enum):
    """What a running holder goes through in a scenario."""

    KEPT = "the same container runs on"
    RESTARTED = "the same pod, a new container, the same devices"
    # The kubelet's device manager re-admits every pod after a reboot, before any device
    # plugin (itself a pod) can register, and rejects those asking for its resources:
    # "node reboot", the third case in kubernetes pkg/kubelet/cm/devicemanager/manager.go
    # devicesToAllocate. Their controller replaces them; DRA claims wait for the driver.
    REPLACED = "rejected by the kubelet, replaced by its ReplicaSet with as many devices"


@dataclass(frozen=True)
class Holder:
    """A workload's pod holding devices (kept by a ReplicaSet), and what it saw."""

    owner: str  # the ReplicaSet
    pod: str
    container_id: str
    seen: frozenset[str]  # device nodes, or the GPUs of NVIDIA_VISIBLE_DEVICES


def _seen(log: str) -> frozenset[str]:
    gpus = seen_env(log).get("NVIDIA_VISIBLE_DEVICES", "")
    return frozenset(seen_devices(log) | {g for g in gpus.split(",") if g})


def _container(got: Any) -> tuple[str | None, int]:
    statuses = got.status.containerStatuses if got.status else None
    if not statuses or not statuses[0].state.running:
        return None, 0
    return statuses[0].containerID, statuses[0].restartCount


def hold(kube: Client, prefix: str, **request: Any) -> Holder:
    owner = run_replica_set(kube, prefix, show_devices(), **request)
    got = await_replica(kube, owner, lambda got: _container(got)[0] is not None)
    name = got.metadata.name
    seen = _seen(pod_log(kube, name))
    assert seen, f"{prefix} holds no device"
    return Holder(owner, name, str(_container(got)[0]), seen)


@pytest.fixture
def dp_holders(kube: Client, node: Node, device_plugins: Release) -> Iterator[list[Holder]]:
    # A scenario before may have rolled the plugins out: start from all of them serving.
    plugins.await_release(kube, device_plugins)
    plugins.await_allocatable(kube, node, plugins.full_capacity())
    holders = [
        hold(kube, "hold-generic", limits={plugins.GENERIC_RESOURCE: "1"}),
        hold(kube, "hold-gpu", limits={plugins.GPU_RESOURCE: "1"}),
    ]
    yield holders
    for holder in holders:
        delete_replica_set(kube, holder.owner)


@pytest.fixture
def dra_holder(kube: Client, dra_drivers: Release) -> Iterator[Holder]:
    plugins.await_release(kube, dra_drivers)
    with dra.claim_template(kube, "hold", dra.GENERIC_CLASS) as template:
        holder = hold(kube, "hold-dra", claim_template=template)
        yield holder
        (claim,) = dra.pod_claims(kube, holder.pod)
        delete_replica_set(kube, holder.owner)
        dra.await_released(kube, claim, dra.GENERIC_DRIVER)


def assert_kept(kube: Client, holder: Holder, outcome: Outcome) -> None:
    """The holder went through ``outcome`` and runs with the devices it had."""
    if outcome is Outcome.KEPT:
        got = await_pod(kube, holder.pod, running, within=NEW_POD_WITHIN)
        assert _container(got) == (holder.container_id, 0), outcome.value
        return
    if outcome is Outcome.RESTARTED:
        await_pod(
            kube,
            holder.pod,
            lambda got: _container(got)[0] not in (None, holder.container_id),
            within=NEW_POD_WITHIN,
        )
        assert _seen(pod_log(kube, holder.pod)) == holder.seen, outcome.value
        return
    from lightkube.resources.core_v1 import Pod

    rejected = watch_until(
        kube,
        Pod,
        lambda got: got.status.phase == "Failed",
        NEW_POD_WITHIN,
        namespace=NAMESPACE,
        fields={"metadata.name": holder.pod},
    ).status
    assert rejected.reason == "UnexpectedAdmissionError", rejected
    got = await_replica(
        kube,
        holder.owner,
        lambda got: got.metadata.name != holder.pod and _container(got)[0] is not None,
        within=NEW_POD_WITHIN,
    )
    assert len(_seen(pod_log(kube, got.metadata.name))) == len(holder.seen), outcome.value


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
        (claim,) = dra.pod_claims(kube, name)
    # Released after the node's event too (the kubelet retries Unprepare until the
    # driver is back): the claim goes with its pod, our driver removes its spec.
    dra.await_released(kube, claim, dra.GENERIC_DRIVER)


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
        plugins.await_release(kube, release)


def reboot(kube: Client, node: Node, releases: list[Release]) -> None:
    node.reboot()


Scenario = Callable[["Client", Node, list[Release]], None]
SCENARIOS: dict[str, tuple[Scenario, Outcome, Outcome]] = {
    # name: (what happens, what a device-plugin holder goes through, a DRA holder)
    "kubelet restart": (restart_kubelet, Outcome.KEPT, Outcome.KEPT),
    "plugin pods deleted": (delete_plugin_pods, Outcome.KEPT, Outcome.KEPT),
    "chart upgrade": (upgrade_chart, Outcome.KEPT, Outcome.KEPT),
    "reboot": (reboot, Outcome.REPLACED, Outcome.RESTARTED),
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_device_plugin_pods_keep_and_get_devices(
    kube: Client, node: Node, device_plugins: Release, dp_holders: list[Holder], scenario: str
) -> None:
    happen, outcome, _ = SCENARIOS[scenario]
    happen(kube, node, [device_plugins])
    plugins.await_allocatable(kube, node, plugins.full_capacity())
    for holder in dp_holders:
        assert_kept(kube, holder, outcome)
    assert_new_dp_pods_get_devices(kube, node)


@pytest.mark.parametrize(
    "scenario",
    list(SCENARIOS),
)
def test_dra_pods_keep_and_get_devices(
    kube: Client, node: Node, dra_drivers: Release, dra_holder: Holder, scenario: str
) -> None:
    happen, _, outcome = SCENARIOS[scenario]
    happen(kube, node, [dra_drivers])
    assert_kept(kube, dra_holder, outcome)
    assert_new_dra_pod_gets_device(kube)


def now() -> datetime.datetime:
    # Event times have whole seconds.
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0)


def await_health_event(
    kube: Client, node: Node, reason: str, words: str, since: datetime.datetime
) -> None:
    """A plugin's Event on the Node (accel_plugins/runtime/node_events.py) from ``since`` on,
    e.g. DeviceUnhealthy "<resource> device <id> is Unhealthy: node-vanished ..."."""
    from lightkube.resources.core_v1 import Event

    watch_until(
        kube,
        Event,
        lambda got: (
            got.reason == reason
            and words in (got.message or "")
            and got.lastTimestamp is not None
            and got.lastTimestamp >= since
        ),
        namespace="default",
        fields={"involvedObject.kind": "Node", "involvedObject.name": node.name},
    )


def test_a_device_unplugged_under_a_device_plugin_pod(
    kube: Client, node: Node, device_plugins: Release, dp_holders: list[Holder]
) -> None:
    holder = dp_holders[0]
    (gone,) = holder.seen
    resource = plugins.GENERIC_RESOURCE
    since = now()
    with unplugged(gone):
        # The plugin reports it Unhealthy: the kubelet counts only the healthy ones.
        plugins.await_allocatable(kube, node, {resource: str(len(DEVICES) - 1)})
        # The other channels: this plugin pod's /metrics, an Event on the Node.
        (device_id,) = allocations(kube, holder.pod, NAMESPACE)[0].device_ids
        ip = plugin_pod_ip(kube, device_plugins, "generic")
        (vanished,) = await_health_reason(ip, resource, "node-vanished")
        assert vanished["device"] == device_id
        await_health_event(kube, node, "DeviceUnhealthy", f"{resource} device {device_id} ", since)
        with pod(
            kube,
            "new",
            show_devices(),
            limits={plugins.GENERIC_RESOURCE: "1"},
            within=NEW_POD_WITHIN,
        ) as name:
            seen = seen_devices(pod_log(kube, name))
        assert len(seen) == 1
        assert gone not in seen
        assert_kept(kube, holder, Outcome.KEPT)  # a pod is never stopped for its device
    plugins.await_allocatable(kube, node, plugins.full_capacity())
    await_health_event(kube, node, "DeviceHealthy", f"{resource} device {device_id} ", since)
    assert_kept(kube, holder, Outcome.KEPT)


def test_a_device_unplugged_under_a_dra_pod(
    kube: Client, node: Node, dra_drivers: Release, dra_holder: Holder
) -> None:
    (gone,) = dra_holder.seen
    since = now()
    with unplugged(gone):
        # Without device taints (off in 1.34) the driver leaves an Unhealthy device out.
        dra.await_slices(kube, node, {dra.GENERIC_DRIVER: len(DEVICES) - 1})
        ip = plugin_pod_ip(kube, dra_drivers, "generic")
        (vanished,) = await_health_reason(ip, plugins.GENERIC_RESOURCE, "node-vanished")
        device_id = vanished["device"]
        await_health_event(kube, node, "DeviceUnhealthy", f"device {device_id} ", since)
        with (
            dra.claim_template(kube, "new", dra.GENERIC_CLASS) as template,
            pod(
                kube, "new-dra", show_devices(), claim_template=template, within=NEW_POD_WITHIN
            ) as name,
        ):
            seen = seen_devices(pod_log(kube, name))
        assert len(seen) == 1
        assert gone not in seen
        assert_kept(kube, dra_holder, Outcome.KEPT)
    dra.await_slices(kube, node, {dra.GENERIC_DRIVER: len(DEVICES)})
    await_health_event(kube, node, "DeviceHealthy", f"device {device_id} ", since)
    assert_kept(kube, dra_holder, Outcome.KEPT)
