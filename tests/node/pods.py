"""Test pods on the real node: made from the test image, read through their logs.

Each pod prints what it sees (its device nodes, its environment, ...) and then the
line ``END``; the tests read its log through the API server (which reads it from
the kubelet) up to that line, so what they check is what the container saw.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tests.node.images import TEST_IMAGE
from tests.node.watch import WAIT_BOUND, await_deleted, watch_until

if TYPE_CHECKING:
    from lightkube import Client

NAMESPACE = "default"
END = "END"
LOG_WITHIN = 60.0
_serial = itertools.count()

# Prints the device nodes under /dev (not the runtime's defaults) and the environment,
# then stays up so the pod keeps its devices.
SHOW_DEVICES = (
    "for d in $(ls /dev); do case $d in "
    "null|zero|full|random|urandom|tty|console|pts|shm|mqueue|ptmx|fd|stdin|stdout|stderr"
    "|termination-log|core) ;; *) echo DEV /dev/$d ;; esac; done; "
    f"env | sort | sed 's/^/ENV /'; echo {END}; exec sleep 100000"
)


def show_devices() -> list[str]:
    return ["sh", "-c", SHOW_DEVICES]


def pod_spec(
    command: Sequence[str],
    *,
    limits: Mapping[str, str] | None = None,
    claim_template: str | None = None,
    restart: str = "Never",
    node_name: str | None = None,
) -> dict[str, Any]:
    """A pod of the test image running ``command``, asking for ``limits`` or a claim;
    with ``node_name``, bound to that node directly (the scheduler never sees it)."""
    container: dict[str, Any] = {
        "name": "main",
        "image": TEST_IMAGE,
        "imagePullPolicy": "Never",
        "command": list(command),
    }
    spec: dict[str, Any] = {
        "containers": [container],
        "restartPolicy": restart,
        "terminationGracePeriodSeconds": 0,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
    }
    if limits:
        container["resources"] = {"limits": dict(limits)}
    if node_name:
        spec["nodeName"] = node_name
    if claim_template:
        spec["resourceClaims"] = [{"name": "dev", "resourceClaimTemplateName": claim_template}]
        container["resources"] = {"claims": [{"name": "dev"}]}
    return spec


def run_pod(
    kube: Client,
    prefix: str,
    command: Sequence[str],
    *,
    wait_running: bool = True,
    within: float = WAIT_BOUND,
    namespace: str = NAMESPACE,
    **request: Any,
) -> str:
    """Create a pod (a name of its own, starting with ``prefix``); await it running."""
    from lightkube.codecs import from_dict

    name = f"{prefix}-{next(_serial)}"
    kube.create(
        from_dict(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace},
                "spec": pod_spec(command, **request),
            }
        )
    )
    if wait_running:
        await_pod(kube, name, running, within, namespace=namespace)
    return name


def run_replica_set(kube: Client, prefix: str, command: Sequence[str], **request: Any) -> str:
    """A ReplicaSet of one such pod (a workload's controller replaces a rejected pod)."""
    from lightkube.codecs import from_dict

    name = f"{prefix}-{next(_serial)}"
    labels = {"accel-plugins.io/holder": name}
    kube.create(
        from_dict(
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "metadata": {"name": name, "namespace": NAMESPACE},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": pod_spec(command, restart="Always", **request),
                    },
                },
            }
        )
    )
    return name


def await_replica(kube: Client, owner: str, done: Any, within: float = WAIT_BOUND) -> Any:
    """A pod of the ReplicaSet ``owner`` once ``done(pod)`` holds."""
    from lightkube.resources.core_v1 import Pod

    return watch_until(
        kube, Pod, done, within, namespace=NAMESPACE, labels={"accel-plugins.io/holder": owner}
    )


def delete_replica_set(kube: Client, name: str) -> None:
    """Delete it and await its pods' end (the next test counts on their devices)."""
    from lightkube.resources.apps_v1 import ReplicaSet
    from lightkube.types import CascadeType

    with contextlib.suppress(Exception):
        kube.delete(ReplicaSet, name, namespace=NAMESPACE, cascade=CascadeType.FOREGROUND)
        await_deleted(kube, ReplicaSet, name, namespace=NAMESPACE)


def running(pod: Any) -> bool:
    return pod.status is not None and pod.status.phase in ("Running", "Succeeded")


def await_pod(
    kube: Client, name: str, done: Any, within: float = WAIT_BOUND, namespace: str = NAMESPACE
) -> Any:
    """The pod once ``done(pod)`` holds; a failed pod, or ``within`` seconds, ends the
    wait with its status."""
    from lightkube.resources.core_v1 import Pod

    def finished(pod: Any) -> bool:
        if pod.status is not None and pod.status.phase == "Failed":
            raise AssertionError(f"pod {name} failed: {pod.status}")
        return bool(done(pod))

    try:
        return watch_until(
            kube, Pod, finished, within, namespace=namespace, fields={"metadata.name": name}
        )
    except AssertionError as exc:
        got = kube.get(Pod, name, namespace=namespace)
        raise AssertionError(f"pod {name}: {exc}; its status: {got.status}") from None


def pod_log(kube: Client, name: str, namespace: str = NAMESPACE) -> str:
    """The running container's log up to its END line.

    Read whole and again until END is in it: the log is no API object to watch, and a
    followed log of a pod that keeps running, abandoned at END, left lightkube's
    connection pool stuck (the next request on it never got its response headers).
    """
    deadline = time.monotonic() + LOG_WITHIN
    while True:
        log = "".join(kube.log(name, namespace=namespace))
        lines = log.splitlines(keepends=True)
        if f"{END}\n" in lines:
            return "".join(lines[: lines.index(f"{END}\n")])
        assert time.monotonic() < deadline, f"pod {name} printed no {END} in {LOG_WITHIN} s: {log}"
        time.sleep(0.2)  # printed within milliseconds of the container's start


def seen_devices(log: str) -> set[str]:
    return {line[4:] for line in log.splitlines() if line.startswith("DEV ")}


def seen_env(log: str) -> dict[str, str]:
    pairs = (line[4:].split("=", 1) for line in log.splitlines() if line.startswith("ENV "))
    return {pair[0]: pair[1] for pair in pairs if len(pair) == 2}


def delete_pod(kube: Client, name: str, namespace: str = NAMESPACE) -> None:
    from lightkube.resources.core_v1 import Pod

    with contextlib.suppress(Exception):
        kube.delete(Pod, name, namespace=namespace, grace_period=0)


@contextlib.contextmanager
def pod(kube: Client, prefix: str, command: Sequence[str], **kwargs: Any) -> Iterator[str]:
    name = run_pod(kube, prefix, command, **kwargs)
    try:
        yield name
    finally:
        delete_pod(kube, name, kwargs.get("namespace", NAMESPACE))
