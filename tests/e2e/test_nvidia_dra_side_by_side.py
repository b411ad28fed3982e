"""Our NVIDIA DRA driver beside NVIDIA's own, on NVIDIA's mock NVML (issue 35).

For each of NVIDIA's mock profiles, NVIDIA's DRA kubelet plugin (``gpu-kubelet-plugin``,
dra-driver-nvidia-gpu 95932046, from ``../shared/nvidia-mock``) and ``accel-plugins
nvidia --kubelet-api dra`` run in turn on the same mock driver root (laid out as NVIDIA's
mock CI lays it out) against one real API server, each as its own node, each found by
the kubelet emulator through plugin-watcher registration. Then, device by device:

- the slices: every attribute NVIDIA publishes, with the same name, type and value, in
  ours; capacities written alike (``80Gi``); our extra attributes only those
  docs/where-we-differ.md lists;
- one claim for ``gpu-1`` prepared by each: the container edits its CDI IDs resolve to
  (the spec's edits and the device's) are the same: device nodes, mounts, hooks with
  their arguments, environment. The IDs themselves differ on purpose (NVIDIA writes a
  spec per claim, we name the devices of our node-wide spec: where-we-differ.md);
- a claim of ``gpu-1`` time-sliced (``GpuConfig`` with interval ``Default``, NVIDIA's
  ``TimeSlicingSettings`` gate on, as it must be for NVIDIA's driver to take one): the
  same container edits again (time-slicing changes none; NVIDIA's sets the interval
  with nvidia-smi, a stand-in here);
- a claim with MPS: refused by both (NVIDIA's ``MPSSupport`` gate is off by default, and
  its MPS needs a control-daemon Deployment this test does not run; ours serves MPS over
  the MPS replicas of the node's config file, which this node has none of).

No mock profile has MIG enabled, so MIG devices are compared by neither. Needs root
(the device nodes are mknod'ed) and ``../shared/nvidia-mock``; skips saying which is
missing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from lightkube import AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node
from lightkube.resources.resource_v1 import ResourceClaim, ResourceClaimStatus
from lightkube.types import PatchType

from accel_plugins.conformance.envtest import ApiServer
from accel_plugins.kubelet_emulator import Kubelet
from accel_plugins.kubelet_emulator.dra import DraClaim
from accel_plugins.testing import short_tempdir
from tests.e2e.test_kubelet_admit_claims import published
from tests.fixtures.dra_kube import delete_slices
from tests.support.nvidia_mock import (
    PROFILES,
    MockNvmlUnavailable,
    mock_driver_root,
    nvidia_dra_plugin,
)
from tests.support.repo import ROOT

DRIVER = "gpu.nvidia.com"
LAUNCH = "import sys; from accel_plugins.launch import main; sys.exit(main())"
TIMEOUT = 60.0
# Ours beyond NVIDIA's, each with its reason in docs/where-we-differ.md.
OUR_EXTRA_ATTRIBUTES = {"index", "resource", "numa", "resource.kubernetes.io/numaNode"}
PREPARED = {  # case -> NVIDIA's GpuConfig sharing (None: none); both must prepare these
    "plain": None,
    "time-slicing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Default"}},
}
REFUSED = {"mps": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50}}}
pytestmark = pytest.mark.timeout(300)


@dataclass
class Run:
    """What one driver did on one profile."""

    devices: dict[str, dict[str, Any]]  # slice device name -> the device as the API has it
    edits: dict[str, dict[str, Any]]  # case -> the container edits of its claim for gpu-1
    refused: dict[str, str]  # case -> the claim's error


@dataclass
class Setup:
    profile: str
    root: Path  # the mock driver root
    env: dict[str, str]
    work: Path
    kubeconfig: Path
    plugin: Path  # NVIDIA's gpu-kubelet-plugin


def nvidia_argv(s: Setup, node: str, dirs: Mapping[str, Path]) -> list[str]:
    return [
        str(s.plugin), "--node-name", node, "--kubeconfig", str(s.kubeconfig),
        "--image-name", "any", "--nvidia-cdi-hook-path", str(s.work / "nvidia-cdi-hook"),
        "--nvidia-driver-root", str(s.root), "--container-driver-root", str(s.root),
        "--host-root", "/", "--cdi-root", str(dirs["cdi"]),
        "--kubelet-registrar-directory-path", str(dirs["registry"]),
        "--kubelet-plugins-directory-path", str(dirs["plugins"]),
        "--feature-gates", "TimeSlicingSettings=true",
    ]  # fmt: skip


def our_argv(s: Setup, node: str, dirs: Mapping[str, Path]) -> list[str]:
    return [
        sys.executable, "-c", LAUNCH, "nvidia", "--kubelet-api", "dra", "--node-name", node,
        "--kubeconfig", str(s.kubeconfig), "--kubelet-plugins-dir", str(dirs["plugins"]),
        "--plugins-registry-dir", str(dirs["registry"]), "--dra-cdi-spec-dir", str(dirs["cdi"]),
        "--state-dir", str(dirs["state"]), "--metrics-address", "",
        "--nvidia-driver-root", str(s.root),
        "--nvidia-cdi-hook-path", str(s.work / "nvidia-cdi-hook"),
    ]  # fmt: skip


@contextlib.asynccontextmanager
async def running(argv: Sequence[str], env: Mapping[str, str], log: Path) -> AsyncIterator[None]:
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            *argv, cwd=ROOT, env={**os.environ, **env}, stdout=out, stderr=out,
            stdin=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
    try:
        yield
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 20)
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def claim_for(
    kube: AsyncClient, namespace: str, name: str, node: str, parameters: dict[str, Any] | None
) -> DraClaim:
    """A claim of one GPU, allocated to ``gpu-1`` of ``node`` as the scheduler would."""
    config = []
    if parameters is not None:
        opaque = {"driver": DRIVER, "parameters": parameters}
        config = [{"requests": ["gpu"], "opaque": opaque}]
    created = await kube.create(
        cast(
            ResourceClaim,
            ResourceClaim.from_dict(
                {
                    "metadata": {"name": name, "namespace": namespace},
                    "spec": {
                        "devices": {
                            "requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}],
                            "config": config,
                        }
                    },
                }
            ),
        )
    )
    assert created.metadata is not None
    assert created.metadata.uid is not None
    result = {"request": "gpu", "driver": DRIVER, "pool": node, "device": "gpu-1"}
    allocation: dict[str, Any] = {
        "devices": {
            "results": [result],
            "config": [{"source": "FromClaim", **c} for c in config],
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            ]
        },
    }
    reserved = [{"resource": "pods", "name": f"pod-{name}", "uid": f"{created.metadata.uid}-pod"}]
    await kube.patch(
        ResourceClaimStatus,
        name,
        {"status": {"allocation": allocation, "reservedFor": reserved}},
        namespace=namespace,
        patch_type=PatchType.MERGE,
    )
    return DraClaim(namespace=namespace, name=name, uid=created.metadata.uid)


def resolved_edits(cdi_dir: Path, cdi_ids: Sequence[str]) -> dict[str, Any]:
    """What a runtime gives the container for ``cdi_ids``: each spec's edits and each
    device's, by kind of edit (device nodes and mounts by path, hooks in order)."""
    specs = []
    for path in sorted(cdi_dir.iterdir()):
        if path.suffix in (".json", ".yaml"):
            specs.append(yaml.safe_load(path.read_text()))  # JSON is YAML
    edits: dict[str, list[Any]] = {"deviceNodes": [], "mounts": [], "hooks": [], "env": []}
    sources: list[dict[str, Any]] = []
    for cdi_id in cdi_ids:
        kind, _, name = cdi_id.partition("=")
        (spec,) = [s for s in specs if s["kind"] == kind]
        if not any(source is spec for source in sources):
            sources.append(spec)  # a spec's own edits come once, however many devices
        (device,) = [d for d in spec["devices"] if d["name"] == name]
        sources.append(device)
    for source in sources:
        for key, values in (source.get("containerEdits") or {}).items():
            edits[key] += values
    return {
        "deviceNodes": sorted(edits["deviceNodes"], key=lambda n: n["path"]),
        "mounts": sorted(edits["mounts"], key=lambda m: m["containerPath"]),
        "hooks": edits["hooks"],
        "env": sorted(edits["env"]),
    }


async def run_driver(
    which: str, s: Setup, kube: AsyncClient, namespace: str, node: str, gpus: int
) -> Run:
    await kube.create(Node(metadata=ObjectMeta(name=node)))
    try:
        return await _run_driver(which, s, kube, namespace, node, gpus)
    finally:
        await delete_slices(kube, node)
        await kube.delete(Node, node)


async def _run_driver(
    which: str, s: Setup, kube: AsyncClient, namespace: str, node: str, gpus: int
) -> Run:
    with short_tempdir("sbs-") as short:
        dirs = {name: short / name for name in ("plugins", "registry", "cdi", "state", "dp")}
        for path in dirs.values():
            path.mkdir()
        argv = nvidia_argv(s, node, dirs) if which == "nvidia" else our_argv(s, node, dirs)
        log = s.work / f"{which}.log"
        kubelet = Kubelet(dirs["dp"], plugins_registry_dir=dirs["registry"], plugin_timeout=10.0)
        async with kubelet, running(argv, s.env, log):
            try:
                await kubelet.wait_for(lambda k: DRIVER in k.dra.names, timeout=TIMEOUT)
                found = await asyncio.wait_for(published(kube, node, DRIVER), TIMEOUT)
            except TimeoutError:
                pytest.fail(f"{which} did not come up:\n{log.read_text()[-3000:]}")
            devices = {d.name: d.to_dict() for d in found.spec.devices or []}
            assert len(devices) == gpus, log.read_text()[-3000:]
            client = kubelet.dra.client(DRIVER)
            edits: dict[str, dict[str, Any]] = {}
            refused: dict[str, str] = {}
            for case, sharing in [*PREPARED.items(), *REFUSED.items()]:
                parameters = None if sharing is None else gpu_config(sharing)
                claim = await claim_for(kube, namespace, f"{which}-{case}", node, parameters)
                prepared = (await client.prepare([claim], timeout=30))[claim.uid]
                if case in REFUSED:
                    refused[case] = prepared.error
                else:
                    assert prepared.error == "", (case, log.read_text()[-3000:])
                    ((device, cdi_ids),) = [(d.device, d.cdi_ids) for d in prepared.devices]
                    assert device == "gpu-1"
                    edits[case] = resolved_edits(dirs["cdi"], cdi_ids)
                assert await client.unprepare([claim]) == {claim.uid: ""}
    return Run(devices, edits, refused)


def gpu_config(sharing: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig", "sharing": sharing}


@pytest.fixture
def setup(tmp_path: Path, request: pytest.FixtureRequest) -> Setup:
    profile: str = request.param
    try:
        env = mock_driver_root(tmp_path / "root", profile)
        plugin = nvidia_dra_plugin(tmp_path / "bin")
    except MockNvmlUnavailable as exc:
        pytest.skip(str(exc))
    hook = tmp_path / "nvidia-cdi-hook"  # named in the hooks, never run (no runtime here)
    hook.write_text("#!/bin/sh\nexit 0\n")
    hook.chmod(0o755)
    return Setup(profile, tmp_path / "root", env, tmp_path, tmp_path / "kubeconfig", plugin)


@pytest.mark.parametrize("setup", PROFILES, indirect=True)
async def test_our_nvidia_dra_driver_publishes_and_prepares_as_nvidias_does(
    setup: Setup, kube: AsyncClient, kube_apiserver: ApiServer, kube_namespace: str
) -> None:
    setup.kubeconfig.write_text(yaml.safe_dump(kube_apiserver.kubeconfig()))
    config = yaml.safe_load((setup.root / "config" / "config.yaml").read_text())
    gpus = len(config["devices"])
    theirs = await run_driver("nvidia", setup, kube, kube_namespace, f"nv-{setup.profile}", gpus)
    ours = await run_driver("ours", setup, kube, kube_namespace, f"ours-{setup.profile}", gpus)

    assert sorted(ours.devices) == sorted(theirs.devices)  # gpu-0 ... gpu-<n-1>
    for device, their in theirs.devices.items():
        our = ours.devices[device]
        assert our.get("capacity") == their.get("capacity"), device
        their_attributes, our_attributes = their["attributes"], our["attributes"]
        for attribute, value in their_attributes.items():
            assert our_attributes.get(attribute) == value, (device, attribute)
        assert set(our_attributes) - set(their_attributes) <= OUR_EXTRA_ATTRIBUTES, device

    for case in PREPARED:
        assert json.dumps(ours.edits[case], sort_keys=True, indent=1) == json.dumps(
            theirs.edits[case], sort_keys=True, indent=1
        ), case
    assert all(theirs.refused.values()), theirs.refused
    assert all(ours.refused.values()), ours.refused
