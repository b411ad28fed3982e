"""A node reboot as the kubelet emulator sees it: every CDI name it gets resolves on disk.

After a reboot the kubelet prepares the claims of the pods it starts again
(its DRA manager calls NodePrepareResources for each claim of a pod it runs,
pkg/kubelet/cm/dra/manager.go) and hands the CDI names to the runtime, which
looks them up in /etc/cdi and /var/run/cdi; /var/run/cdi is a tmpfs the reboot
emptied, the driver's checkpoint survived (kubernetes/kubernetes#141433). The
emulator's ClaimPreparer plays the kubelet and resolves each name as a
runtime does (accel_plugins/kubelet_emulator/cdi.py); our driver runs on real sockets.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from accel_plugins.kubelet_emulator import Kubelet
from accel_plugins.kubelet_emulator.claims import ClaimPreparer, PodClaims
from accel_plugins.plugin.device import Device, DeviceNode, tree
from tests.e2e.test_kubelet_claim_preparer import TableReader, pod
from tests.fixtures.dra_plugin import DRIVER, FakeClaims, RunningDriver, SpecKeepingBackend


def cards(spec_dir: Path) -> SpecKeepingBackend:
    devices = [Device(f"card{i}", nodes=(DeviceNode(f"/dev/card{i}"),)) for i in range(2)]
    return SpecKeepingBackend(tree({"example.com/card": devices}), spec_dir)


def names(outcome: PodClaims) -> list[str]:
    assert outcome.error == ""
    return [i for c in outcome.containers for _, ids in c.cdi_ids for i in ids]


async def test_after_a_reboot_every_cdi_name_of_a_restarted_pod_resolves(
    watching_kubelet: Kubelet, registry_dir: Path, start_driver: Any, dra_root: Path
) -> None:
    spec_dir = dra_root / "cdi"
    boot_id = dra_root / "boot_id"
    boot_id.write_text("boot-1\n")
    settings = {"plugins_registry_dir": registry_dir, "boot_id_path": boot_id}
    reader, source = TableReader(), FakeClaims()
    reader.add("gpu", "uid-1", "card0")
    source.add("uid-1", ("accel", "card0"), name="gpu")

    first: RunningDriver = await start_driver(cards(spec_dir), source, **settings)
    kubelet = ClaimPreparer(watching_kubelet, reader, cdi_spec_dirs=[spec_dir], driver_timeout=5)
    before = names(await kubelet.prepare(pod("trainer", "gpu")))
    assert before == [f"k8s.{DRIVER}/claim=uid-1-accel", SpecKeepingBackend.NAME]
    assert all(kubelet.cdi_edits(n) is not None for n in before)

    # The reboot: the driver stops, the tmpfs is gone, the kernel draws a new boot ID,
    # and the kubelet comes back knowing the pod and its claim.
    await first.stop()
    shutil.rmtree(spec_dir)
    boot_id.write_text("boot-2\n")
    await start_driver(cards(spec_dir), source, **settings)
    kubelet = ClaimPreparer(watching_kubelet, reader, cdi_spec_dirs=[spec_dir], driver_timeout=5)
    after = names(await kubelet.prepare(pod("trainer", "gpu")))

    assert after == before
    for name in after:  # what the runtime would do with each name: find its edits
        assert kubelet.cdi_edits(name) is not None, f"{name}: no spec defines it"
    assert len(source.calls) == 1  # answered from the checkpoint
