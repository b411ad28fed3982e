"""The node itself: registered and Ready, in its own network namespace, running pods."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.node import host, plugins
from tests.node.chart import Release
from tests.node.cluster import NETNS, Node
from tests.node.pods import END, pod_log, run_pod

if TYPE_CHECKING:
    from lightkube import Client

    from tests.node.conftest import ImageBuild


def test_node_registers_ready_at_the_veth_address(node: Node, kube: Client) -> None:
    from lightkube.resources.core_v1 import Node as NodeObject

    got = kube.get(NodeObject, node.name)
    assert got.status is not None
    conditions = {c.type: c.status for c in got.status.conditions or []}
    addresses = {a.type: a.address for a in got.status.addresses or []}
    assert conditions["Ready"] == "True"
    assert addresses["InternalIP"] == NETNS.address
    assert got.status.nodeInfo is not None
    assert got.status.nodeInfo.kubeletVersion.startswith("v1.34")
    assert got.status.nodeInfo.containerRuntimeVersion.startswith("containerd://2.")


def test_the_node_runs_in_its_own_network_namespace(node: Node) -> None:
    # This process entered it (tests/node/netns.py) and the kubelet inherited it.
    named = NETNS.path.stat().st_ino
    assert Path(f"/proc/{node.pid('kubelet')}/ns/net").stat().st_ino == named
    assert Path("/proc/self/ns/net").stat().st_ino == named


def test_the_kubelet_set_only_the_sysctls_recorded_for_restore(node: Node) -> None:
    # Each is written back at teardown; a sysctl it changed that is not in the list would
    # stay changed on the machine.
    assert set(host.KUBELET_SYSCTLS) >= {
        "vm/overcommit_memory",
        "kernel/panic",
        "kernel/panic_on_oops",
    }
    assert host.read_sysctls()["vm/overcommit_memory"] == "1"  # the kubelet's value


def test_a_pod_runs_from_the_imported_test_image(node: Node, kube: Client) -> None:
    pod = run_pod(kube, "hello", ["sh", "-c", f"echo hello from $(cat /proc/1/comm); echo {END}"])
    assert pod_log(kube, pod).strip() == "hello from sh"


def archive_digests(archive: Path) -> set[str]:
    """The manifest and config digests of the image in an OCI archive."""
    with tarfile.open(archive) as tar:

        def blob(name: str) -> Any:
            member = tar.extractfile(name)
            assert member is not None, f"{archive}: no {name}"
            return json.load(member)

        (manifest,) = blob("index.json")["manifests"]
        digest = manifest["digest"]
        config = blob(f"blobs/{digest.replace(':', '/')}")["config"]["digest"]
    return {digest, config}


def test_the_charts_pods_run_the_images_built_from_this_checkout(
    kube: Client, image_build: ImageBuild, device_plugins: Release, dra_drivers: Release
) -> None:
    from lightkube.resources.core_v1 import Pod

    built = {}
    for line in (image_build.out / "images.txt").read_text().splitlines():
        archive, image = line.split()
        built[image] = archive_digests(Path(archive))
    statuses = []
    for got in kube.list(Pod, namespace=plugins.NAMESPACE):
        assert got.status is not None
        statuses.extend(got.status.containerStatuses or [])
    assert len(statuses) == 2 * len(built)  # both releases, both backends
    for status in statuses:
        assert status.image in built, status.image
        # The runtime's image ID names the digest of the archive imported this run.
        assert any(d in status.imageID for d in built[status.image]), status.imageID
