"""DRA in production on a real node (issue 31): a chart upgrade that loses no Prepare and
touches no slice, and a driver waiting for a handover that its liveness probe leaves be.

The upgrade: the chart's DRA DaemonSets roll with maxSurge 1 / maxUnavailable 0, so the
new pod (sockets named after its UID, the kubelet 1.33+ registers both) serves before
the DaemonSet controller removes the old one. Pods with claims keep starting throughout;
the kubelet reports a Prepare it could not make as an Event ``FailedPrepareDynamicResources``
(pkg/kubelet/events). The slices are watched for the whole upgrade.

The handover: a generic DRA driver pod from the chart's render with the per-node switch
on, started while the device-plugin release still serves our resources on the node, waits
(alive, not ready) for longer than its liveness probe's failure window.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from tests.node import dra, plugins
from tests.node.chart import Release, apply, render
from tests.node.cluster import Node
from tests.node.pods import NAMESPACE, await_pod, delete_pod, run_pod
from tests.node.watch import watch_until

if TYPE_CHECKING:
    from pathlib import Path

    from lightkube import Client

OUR_DRIVERS = {dra.GENERIC_DRIVER, dra.GPU_DRIVER}
ROLLOUT_BOUND = 120.0


def our_slices(kube: Client, node: Node) -> dict[str, tuple[str, str]]:
    """Our drivers' slices on the node: name -> (uid, resourceVersion)."""
    from lightkube.resources.resource_v1 import ResourceSlice

    found: list[Any] = list(kube.list(ResourceSlice, fields={"spec.nodeName": node.name}))
    return {
        s.metadata.name: (s.metadata.uid, s.metadata.resourceVersion)
        for s in found
        if s.spec.driver in OUR_DRIVERS
    }


def dra_pods(kube: Client, release: Release) -> dict[str, str]:
    """The release's DRA driver pods: uid -> name."""
    from lightkube.resources.core_v1 import Pod

    found: list[Any] = list(kube.list(Pod, namespace=release.namespace))
    return {
        p.metadata.uid: p.metadata.name for p in found if p.metadata.name.startswith(release.name)
    }


class SliceEvents(threading.Thread):
    """Every watch event on our drivers' slices from ``version`` on."""

    def __init__(self, kube: Client, node: Node, version: str) -> None:
        super().__init__(daemon=True)
        from lightkube import Client, KubeConfig

        self._kube = Client(KubeConfig.from_dict(node.kubeconfig()), trust_env=False)
        self._node = node.name
        self._version = version
        self.seen: list[tuple[str, str]] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        from lightkube.resources.resource_v1 import ResourceSlice

        item: Any
        try:
            for kind, item in self._kube.watch(
                ResourceSlice,
                fields={"spec.nodeName": self._node},
                resource_version=self._version,
            ):
                if self.stopped.is_set():
                    return
                if item.spec.driver in OUR_DRIVERS:
                    self.seen.append((kind, item.metadata.name))
        except Exception as exc:  # a closed client ends the thread
            if not self.stopped.is_set():
                self.seen.append(("ERROR", repr(exc)))


class ClaimTraffic(threading.Thread):
    """Pods with a claim from the generic class, one after another, each run to its end."""

    def __init__(self, kube: Client, template: str) -> None:
        super().__init__(daemon=True)
        self._kube = kube
        self._template = template
        self.finished = 0
        self.failures: list[str] = []
        self.stopped = threading.Event()
        self._progress = threading.Condition()

    def await_finished(self, count: int, within: float) -> None:
        with self._progress:
            done = self._progress.wait_for(lambda: self.finished >= count, within)
        assert done, f"{self.finished} of {count} pods with claims ran ({self.failures})"

    def run(self) -> None:
        while not self.stopped.is_set():
            name = run_pod(
                self._kube,
                "roll",
                ["sh", "-c", "exit 0"],
                claim_template=self._template,
                wait_running=False,
            )
            try:
                await_pod(self._kube, name, _succeeded, within=60)
                with self._progress:
                    self.finished += 1
                    self._progress.notify_all()
            except AssertionError as exc:
                self.failures.append(str(exc)[:300])
                return  # one is enough to fail the test
            finally:
                delete_pod(self._kube, name)


def _succeeded(pod: Any) -> bool:
    return pod.status is not None and pod.status.phase == "Succeeded"


# The kubelet's own GET of a claim refused by the Node authorizer, whose graph of pods and
# claims lagged behind the kubelet's pod watch on a loaded machine (seen in 3 of 5 runs of
# this test there; the kubelet retries and the pod runs): the call never reached a driver.
AUTHORIZER_LAG = "no relationship found between node"


def failed_prepares(kube: Client, since: float) -> list[str]:
    from lightkube.resources.core_v1 import Event

    return [
        f"{e.involvedObject.name}: {e.message}"
        for e in kube.list(Event, namespace=NAMESPACE)
        if e.reason == "FailedPrepareDynamicResources"
        and AUTHORIZER_LAG not in (e.message or "")
        and e.lastTimestamp is not None
        and e.lastTimestamp.timestamp() >= since
    ]


def test_a_chart_upgrade_under_continuous_prepares_fails_none_and_keeps_the_slices(
    kube: Client, node: Node, dra_drivers: Release, nvidia_root: Path
) -> None:
    from lightkube.resources.resource_v1 import ResourceSlice

    before = our_slices(kube, node)
    old_pods = dra_pods(kube, dra_drivers)
    listed: Any = kube.list(ResourceSlice, chunk_size=1)
    next(iter(listed))  # the list's resourceVersion comes with its first page
    version = listed.resourceVersion
    events = SliceEvents(kube, node, version)
    events.start()
    started = time.time() - 1  # Event timestamps have whole seconds
    with dra.claim_template(kube, "rollout", dra.GENERIC_CLASS) as template:
        traffic = ClaimTraffic(kube, template)
        traffic.start()
        try:
            traffic.await_finished(1, 60)
            values = plugins.values(node, "dra", nvidia_root)
            values["common"]["podAnnotations"] = {"accel-plugins.io/rollout": "upgrade"}
            apply(kube, dra_drivers, values)
            plugins.await_release(kube, dra_drivers)
            rolled = traffic.finished
            traffic.await_finished(rolled + 2, 60)
        finally:
            traffic.stopped.set()
            traffic.join(90)
            events.stopped.set()
    new_pods = dra_pods(kube, dra_drivers)
    after = our_slices(kube, node)
    assert traffic.failures == []
    assert failed_prepares(kube, started) == []
    assert not set(old_pods) & set(new_pods), "the DaemonSets did not roll"
    # The same objects, never deleted, created or written: the new pods adopted them.
    assert after == before
    assert events.seen == [], events.seen


# The probe's failure window in this test: first probe after 1 s, then one a second, two
# failures restart the container; the wait below lasts several windows.
LIVENESS = {"initialDelaySeconds": 1, "periodSeconds": 1, "failureThreshold": 2}
WAITED = 8.0


def waiting_driver_pod(node: Node, release: Release, values: dict[str, Any]) -> dict[str, Any]:
    """The generic DRA driver's pod as the chart renders it with the per-node switch on,
    bound to the node, under the DRA release's ServiceAccount, with a short liveness window."""
    objects = render(release.name, release.namespace, values)
    (template,) = [
        o["spec"]["template"]
        for o in objects
        if o["kind"] == "DaemonSet"
        and "generic" in o["metadata"]["name"]
        and "--kubelet-api=dra" in o["spec"]["template"]["spec"]["containers"][0]["args"]
    ]
    (account,) = [
        o["spec"]["template"]["spec"]["serviceAccountName"]
        for o in release.objects
        if o["kind"] == "DaemonSet" and "generic" in o["metadata"]["name"]
    ]
    spec = template["spec"]
    spec.pop("affinity", None)
    spec.pop("nodeSelector", None)  # the switch's label: bound to the node directly instead
    spec["nodeName"] = node.name
    spec["serviceAccountName"] = account
    container = spec["containers"][0]
    container["livenessProbe"].update(LIVENESS)
    container["readinessProbe"]["periodSeconds"] = 1
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "waiting-dra-driver", "namespace": release.namespace},
        "spec": spec,
    }


def test_a_driver_waiting_for_the_handover_outlives_its_liveness_window(
    kube: Client, node: Node, device_plugins: Release, dra_drivers: Release, nvidia_root: Path
) -> None:
    from lightkube.codecs import from_dict
    from lightkube.resources.core_v1 import Pod

    values = plugins.values(node, "dra", nvidia_root)
    values["kubeletApiSwitch"] = {"enabled": True}
    manifest = waiting_driver_pod(node, dra_drivers, values)
    name, namespace = manifest["metadata"]["name"], manifest["metadata"]["namespace"]
    kube.create(from_dict(manifest))
    try:
        watch_until(kube, Pod, _started, 60, namespace=namespace, fields={"metadata.name": name})
        # The device-plugin release serves our resources on this node: the driver waits.
        time.sleep(WAITED)  # what must not happen has no event: a window without it
        pod: Any = kube.get(Pod, name, namespace=namespace)
        log = "".join(kube.log(name, namespace=namespace))
    finally:
        kube.delete(Pod, name, namespace=namespace, grace_period=0)
    (status,) = pod.status.containerStatuses
    assert status.restartCount == 0, log
    assert not status.ready, "ready while it waits for the other mode"
    assert "waiting for the other mode" in log, log


def _started(pod: Any) -> bool:
    statuses = (pod.status and pod.status.containerStatuses) or []
    return any(s.state is not None and s.state.running is not None for s in statuses)
