"""The node itself: registered and Ready, in its own network namespace, running pods."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tests.node import host
from tests.node.cluster import NETNS, Node
from tests.node.pods import END, pod_log, run_pod

if TYPE_CHECKING:
    from lightkube import Client


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
