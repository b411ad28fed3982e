"""The chart's values for this node, and waits on what the plugins publish.

Two releases run side by side: one in device-plugin mode, one in DRA mode, each with
both backends (``nvidia --simulate`` and ``generic`` over the suite's /dev/accel-node*
devices). Their plugins share the node's devices but not the kubelet's accounting:
extended resources and ResourceClaims are separate.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.node.chart import Release
from tests.node.cluster import DEVICE_PREFIX, DEVICES, Node
from tests.node.watch import watch_until

if TYPE_CHECKING:
    from lightkube import Client

NAMESPACE = "accel-plugins"
DOMAIN = "accel-plugins.io"
GENERIC_RESOURCE = f"{DOMAIN}/{DEVICE_PREFIX}"
GPU_RESOURCE = "nvidia.com/gpu"
SIMULATED_PROFILE = "pcie-4gpu"  # four GPUs (accel_plugins/backends/nvidia/command.py)
SIMULATED_GPUS = 4
# DRA mode's NVIDIA driver runs on NVIDIA's mock NVML (../shared/nvidia-mock) instead, in a mock
# driver root on the host with real device nodes: its self-contained CDI devices (issue 35) then
# give a container of plain containerd its GPU's device node, as on a GPU node.
MOCK_PROFILE = "h100"
MOCK_GPUS = 8
# NFD's label for an NVIDIA PCI device, which the chart's nvidia nodeSelector asks for.
NVIDIA_NODE_LABEL = ("feature.node.kubernetes.io/pci-10de.present", "true")

Obj = dict[str, Any]


def values(node: Node, kubelet_api: str, nvidia_root: Path | None = None, **generic: Any) -> Obj:
    """Values for this node: the images imported here (never pulled), its devices. With
    ``nvidia_root`` (a mock driver root), NVIDIA's plugin serves its mock GPUs, not
    simulated ones: driverRoot is that root, mounted at its host path, where the plugin
    finds the mock library itself; MOCK_NVML_CONFIG names the profile, and no hook program
    is named in the CDI specs (this node has none to run)."""
    nvidia: Obj = {"extraArgs": [f"--simulate={SIMULATED_PROFILE}"]}
    if nvidia_root is not None:
        profile = {"name": "MOCK_NVML_CONFIG", "value": str(nvidia_root / "config/config.yaml")}
        nvidia = {
            "driverRoot": str(nvidia_root),
            "extraArgs": ["--nvidia-cdi-hook-path="],
            "extraEnv": [profile],
        }
    # No kube-proxy runs here, so the Service address the kubelet hands pods
    # (KUBERNETES_SERVICE_HOST) leads nowhere: the plugins reach the API server directly
    # (DRA drivers for their slices and claims; both modes for the node's health Events
    # and cordon annotation).
    extra_env = [
        {"name": "KUBERNETES_SERVICE_HOST", "value": node.ip},
        {"name": "KUBERNETES_SERVICE_PORT", "value": "6443"},
    ]
    return {
        "kubeletApi": kubelet_api,
        "common": {"imageRegistry": "localhost", "logFormat": "text"},
        "nvidia": {
            "enabled": True,
            "image": {"pullPolicy": "Never"},
            "extraArgs": nvidia["extraArgs"],
            "extraEnv": extra_env + nvidia.get("extraEnv", []),
        }
        | {k: v for k, v in nvidia.items() if k not in ("extraArgs", "extraEnv")},
        "generic": {
            "enabled": True,
            "image": {"pullPolicy": "Never"},
            "domain": DOMAIN,
            "devices": [
                {"name": DEVICE_PREFIX, "groups": [{"paths": [{"path": f"/dev/{DEVICE_PREFIX}*"}]}]}
            ],
            "extraEnv": extra_env,
        }
        | generic,
    }


def await_node(kube: Client, node: Node, done: Callable[[Any], bool]) -> Any:
    """The Node object once ``done(node)`` holds (bounded by the suite's test timeout)."""
    from lightkube.resources.core_v1 import Node as NodeObject

    return watch_until(kube, NodeObject, done, fields={"metadata.name": node.name})


def allocatable(got: Any) -> dict[str, str]:
    return dict(got.status.allocatable or {}) if got.status is not None else {}


def await_allocatable(kube: Client, node: Node, expected: dict[str, str]) -> None:
    await_node(kube, node, lambda got: expected.items() <= allocatable(got).items())


def await_rollout(kube: Client, name: str, namespace: str = NAMESPACE) -> None:
    """The DaemonSet's current generation scheduled, updated and Ready on the node."""
    from lightkube.resources.apps_v1 import DaemonSet

    def done(ds: Any) -> bool:
        status = ds.status
        return bool(
            status is not None
            and status.observedGeneration == ds.metadata.generation
            and status.desiredNumberScheduled >= 1
            and status.updatedNumberScheduled == status.desiredNumberScheduled
            and status.numberReady == status.desiredNumberScheduled
            and not status.numberUnavailable
        )

    watch_until(kube, DaemonSet, done, namespace=namespace, fields={"metadata.name": name})


def await_release(kube: Client, release: Release) -> None:
    """Every DaemonSet of the release rolled out on the node."""
    for name in release.daemonsets():
        await_rollout(kube, name, release.namespace)


def full_capacity() -> dict[str, str]:
    return {GENERIC_RESOURCE: str(len(DEVICES)), GPU_RESOURCE: str(SIMULATED_GPUS)}
