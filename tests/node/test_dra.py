"""DRA mode on a real node: the chart's DeviceClass, a ResourceClaimTemplate, a pod.

The scheduler allocates the pod's claim from our drivers' ResourceSlices, the kubelet
asks our DaemonSet's driver to prepare it, and containerd injects the claim's CDI device
(the spec the driver wrote under /var/run/cdi, accel_plugins/dra/claim_cdi.py). When the
pod goes, the controller manager's resource-claim controller deletes the claim it made
from the template (the claim's owner is the pod: kubernetes/kubernetes
pkg/controller/resourceclaim/controller.go), the kubelet unprepares it, and the driver
removes the spec.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from accel_plugins.conformance.report import render_table
from tests.node import dra
from tests.node.chart import Release
from tests.node.cluster import CDI_RUN_DIR, DEVICES, KUBELET_ROOT, Node
from tests.node.pods import (
    delete_pod,
    pod_log,
    run_pod,
    seen_devices,
    seen_env,
    show_devices,
)

if TYPE_CHECKING:
    from lightkube import Client


@pytest.mark.parametrize(
    ("device_class", "driver"),
    [(dra.GENERIC_CLASS, dra.GENERIC_DRIVER), (dra.GPU_CLASS, dra.GPU_DRIVER)],
    ids=["generic", "nvidia"],
)
def test_a_claim_from_the_charts_device_class_reaches_the_container_through_cdi(
    kube: Client, dra_drivers: Release, device_class: str, driver: str
) -> None:
    with dra.claim_template(kube, f"one-{driver.split('.')[0]}", device_class) as template:
        name = run_pod(kube, "dra", show_devices(), claim_template=template)
        try:
            log = pod_log(kube, name)
            (claim,) = dra.pod_claims(kube, name)
            (allocated,) = dra.allocated_devices(claim)
            spec = dra.claim_spec(claim, driver)
            if driver == dra.GENERIC_DRIVER:
                assert spec.is_file(), f"no CDI spec {spec} for the prepared claim"
        finally:
            delete_pod(kube, name)
        assert allocated.startswith(f"{driver}/")
        seen = seen_devices(log)
        if driver == dra.GENERIC_DRIVER:
            assert len(seen) == 1
            assert seen <= {str(d) for d in DEVICES}
        else:
            # NVIDIA's mock GPUs, as NVIDIA's DRA driver hands one out (issue 35): a
            # self-contained CDI device of the node's spec gives plain containerd the GPU's
            # device node and the control nodes; no runtime hook needs a device list.
            minor = allocated.rsplit("/gpu-", 1)[1]
            assert f"/dev/nvidia{minor}" in seen, seen
            assert {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"} <= seen
            assert len({d for d in seen if d.removeprefix("/dev/nvidia").isdigit()}) == 1
            assert seen_env(log)["NVIDIA_VISIBLE_DEVICES"] == "void"
        # Released: the claim deleted with its pod, its spec (if any) removed by our driver.
        dra.await_released(kube, claim, driver)


@pytest.mark.parametrize("driver", [dra.GENERIC_DRIVER, dra.GPU_DRIVER], ids=["generic", "nvidia"])
def test_the_charts_drivers_pass_the_conformance_kit_on_the_node(
    node: Node, dra_drivers: Release, driver: str, tmp_path: Path
) -> None:
    """The kit (docs/conformance.md) against the chart's running drivers, beside the real
    kubelet: its plugin watcher on the kubelet's registry, the CDI specs in /var/run/cdi.
    A running driver cannot be restarted by the kit: restart and reboot are skipped (the
    node's own reboot test covers ours), and so is what the chart does not turn on."""
    from accel_plugins.conformance.command import conform
    from accel_plugins.conformance.report import Status
    from accel_plugins.conformance.runner import Target

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps(node.kubeconfig()))
    target = Target(
        driver=driver,
        node=node.name,
        registry=KUBELET_ROOT / "plugins_registry",
        cdi_dirs=(Path("/etc/cdi"), CDI_RUN_DIR),
        workdir=tmp_path,
    )
    outcomes = asyncio.run(conform(target, str(kubeconfig), only=(), skip=(), owned=False))
    report = render_table(driver, outcomes)
    assert [o.check.id for o in outcomes if o.status is Status.FAILED] == [], report
    skipped = {o.check.id for o in outcomes if o.status is Status.SKIPPED}
    assert skipped <= {"restart", "reboot", "taints", "shares"}, report
