"""`accel-plugins kubelet --admit` of a pod with resource claims, against a real API server.

Everything is real: kube-apiserver and etcd (accel_plugins/conformance/envtest.py), an
``accel-plugins generic --kubelet-api dra`` (or ``nvidia --simulate``) process publishing its
ResourceSlices as its node's kubelet identity and registering through the
emulator's plugin watcher, and the emulator as its own process. No scheduler
runs (../shared/k8s has none), so the test allocates the claim as the
scheduler would: it evaluates the DeviceClass's selector against the
published slice and writes ``status.allocation`` (the API server validates it).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

pytest.importorskip("lightkube", reason="the [dra] extra (lightkube) is not installed")

from lightkube import ApiError, AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Pod, ServiceAccount
from lightkube.resources.resource_v1 import (
    DeviceClass,
    ResourceClaim,
    ResourceClaimStatus,
    ResourceSlice,
)
from lightkube.types import PatchType

from accel_plugins.conformance.envtest import ApiServer
from accel_plugins.testing import short_tempdir
from tests.e2e.test_dra_kube_slices import attrs
from tests.e2e.test_kubelet_admit_cli import fake_node
from tests.fixtures.dra_kube import NodeClient
from tests.support.cdi import assert_valid_spec_file

ROOT = Path(__file__).resolve().parents[2]
DRIVER = "generic.accel-plugins.io"
WANTED = "/dev/accel2"
TIMEOUT = 30.0


@dataclass(frozen=True)
class BackendCase:
    """A backend in DRA mode: its argv, driver, the attribute a DeviceClass selects one
    device by, and a line its CDI edits must hold."""

    driver: str
    attribute: str
    value: str | int
    edit: str

    def argv(self, tmp_path: Path) -> list[str]:
        if self.driver == DRIVER:
            return fake_node(tmp_path)
        return ["nvidia", "--simulate", "pcie-4gpu", "--metrics-address", ""]

    @property
    def selector(self) -> str:
        value = json.dumps(self.value)
        return (
            f'device.driver == "{self.driver}" && '
            f'device.attributes["{self.driver}"].{self.attribute} == {value}'
        )

    def selects(self, device: Any) -> bool:
        """The selector, evaluated here as the scheduler's CEL would."""
        return attrs(device).get(self.attribute) == self.value


GENERIC = BackendCase(
    DRIVER, "path", WANTED, f"device nodes:\n          {WANTED} -> {WANTED} (mrw)\n"
)
NVIDIA = BackendCase("gpu.nvidia.com", "index", 2, "NVIDIA_VISIBLE_DEVICES=GPU-")
BACKENDS = [pytest.param(GENERIC, id="generic"), pytest.param(NVIDIA, id="nvidia-simulated")]
pytestmark = pytest.mark.timeout(120)
_names = (f"admit-{i}" for i in itertools.count())


async def device_class(kube: AsyncClient, selector: str) -> str:
    """A DeviceClass selecting one device by a CEL expression on our attributes."""
    name = f"{next(_names)}.accel-plugins.io"
    await kube.create(
        cast(
            DeviceClass,
            DeviceClass.from_dict(
                {
                    "metadata": {"name": name},
                    "spec": {"selectors": [{"cel": {"expression": selector}}]},
                }
            ),
        )
    )
    return name


@pytest.fixture
async def accel_class(kube: AsyncClient) -> AsyncIterator[str]:
    name = await device_class(kube, GENERIC.selector)
    yield name
    await kube.delete(DeviceClass, name)


def write_kubeconfig(path: Path, config: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(config))
    return path


async def published(kube: AsyncClient, node: str, driver: str) -> ResourceSlice:
    """The node's first slice with devices, as the watch delivers it.

    A loaded API server may answer a watch with "Timeout: Too large resource
    version" (its watch cache behind etcd for longer than it waits, 3 s): the
    watch is started again, as client-go's reflector does.
    """
    while True:
        try:
            async for _, item in kube.watch(ResourceSlice, fields={"spec.nodeName": node}):
                if item.spec.driver == driver and item.spec.devices:
                    return item
        except ApiError as exc:
            if "Too large resource version" not in (exc.status.message or ""):
                raise
            continue
        raise AssertionError("the watch ended")


def selected_device(found: ResourceSlice, case: BackendCase) -> str:
    """What the class's CEL selector picks, evaluated here as the scheduler would."""
    for device in found.spec.devices or []:
        if case.selects(device):
            return device.name
    raise AssertionError(f"no device with {case.attribute} {case.value} in {found.metadata}")


async def allocated_claim(
    kube: AsyncClient,
    namespace: str,
    device_class: str,
    node: str,
    device: str | None,
    driver: str = DRIVER,
    owner_pod: tuple[str, str] | None = None,
) -> tuple[str, str]:
    """A claim of one device of ``device_class``; allocated to ``device`` unless None;
    controlled by the pod ``owner_pod`` (name, UID), as a claim from a template is."""
    name = next(_names)
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if owner_pod is not None:
        pod_name, pod_uid = owner_pod
        owner = {"apiVersion": "v1", "kind": "Pod", "name": pod_name, "uid": pod_uid}
        metadata["ownerReferences"] = [owner | {"controller": True}]
    created = await kube.create(
        cast(
            ResourceClaim,
            ResourceClaim.from_dict(
                {
                    "metadata": metadata,
                    "spec": {
                        "devices": {
                            "requests": [
                                {"name": "accel", "exactly": {"deviceClassName": device_class}}
                            ]
                        }
                    },
                }
            ),
        )
    )
    assert created.metadata is not None
    assert created.metadata.uid is not None
    if device is not None:
        allocation = {
            "devices": {
                "results": [{"request": "accel", "driver": driver, "pool": node, "device": device}]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
        }
        await kube.patch(
            ResourceClaimStatus,
            name,
            {"status": {"allocation": allocation}},
            namespace=namespace,
            patch_type=PatchType.MERGE,
        )
    return name, created.metadata.uid


def pod_document(namespace: str, claim: str, node: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "resourceClaims": [{"name": "accel", "resourceClaimName": claim}],
        "containers": [
            {"name": "main", "image": "x", "resources": {"claims": [{"name": "accel"}]}},
            {
                "name": "helper",
                "image": "x",
                "resources": {"claims": [{"name": "accel", "request": "accel"}]},
            },
            {"name": "plain", "image": "x"},
        ],
    }
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "trainer", "namespace": namespace},
        "spec": spec,
    }


def pod_manifest(path: Path, namespace: str, claim: str) -> Path:
    path.write_text(yaml.safe_dump(pod_document(namespace, claim)))
    return path


async def bound_pod(kube: AsyncClient, namespace: str, claim: str, node: str) -> str:
    """The pod as the scheduler leaves it: bound to ``node``, the claim reserved for it.

    The driver reads the claim as its node's kubelet identity, which the Node
    authorizer allows only for claims of pods bound to that node.
    """
    await kube.create(ServiceAccount(metadata=ObjectMeta(name="default", namespace=namespace)))
    created = await kube.create(cast(Pod, Pod.from_dict(pod_document(namespace, claim, node))))
    assert created.metadata is not None
    assert created.metadata.uid is not None
    await reserve(kube, namespace, claim, created.metadata.uid)
    return created.metadata.uid


async def reserve(kube: AsyncClient, namespace: str, claim: str, pod_uid: str) -> None:
    """``status.reservedFor`` the pod ``trainer``, as the scheduler writes it."""
    reserved = [{"resource": "pods", "name": "trainer", "uid": pod_uid}]
    await kube.patch(
        ResourceClaimStatus,
        claim,
        {"status": {"reservedFor": reserved}},
        namespace=namespace,
        patch_type=PatchType.MERGE,
    )


async def readable_by_node(client: AsyncClient, namespace: str, claim: str) -> None:
    """Wait until the node may read the claim. The Node authorizer learns of the pod
    through a watch, and there is no event to await for that: retry the GET."""
    while True:
        try:
            await client.get(ResourceClaim, claim, namespace=namespace)
            return
        except ApiError as exc:
            if exc.status.code != 403:
                raise
        await asyncio.sleep(0.05)


async def spawn(*argv: str, log: Path | None = None) -> asyncio.subprocess.Process:
    out: Any = asyncio.subprocess.PIPE
    if log is not None:
        out = log.open("wb")
    try:
        return await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "accel_plugins.cli.main",
            *argv,
            cwd=ROOT,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=out if log is not None else asyncio.subprocess.STDOUT,
        )
    finally:
        if log is not None:
            out.close()


async def read_until(proc: asyncio.subprocess.Process, marker: str) -> str:
    """Output up to and including the first line holding ``marker``."""
    assert proc.stdout is not None
    lines: list[str] = []
    while True:
        line = (await proc.stdout.readline()).decode()
        if not line:
            raise AssertionError("the emulator exited:\n" + "".join(lines))
        lines.append(line)
        if marker in line:
            return "".join(lines)


async def stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.kill()
        await proc.wait()


@contextlib.asynccontextmanager
async def dra_plugin(
    case: BackendCase, tmp_path: Path, root: Path, node: str, kubeconfig: Path
) -> AsyncIterator[asyncio.subprocess.Process]:
    """The backend in DRA mode as its own process, as ``node``'s kubelet identity; the
    registration socket under ``root/registry``, claim specs under ``root/cdi``."""
    plugin = await spawn(
        *case.argv(tmp_path),
        "--kubelet-api",
        "dra",
        "--node-name",
        node,
        "--kubeconfig",
        str(kubeconfig),
        "--kubelet-plugins-dir",
        str(root / "plugins"),
        "--plugins-registry-dir",
        str(root / "registry"),
        "--dra-cdi-spec-dir",
        str(root / "cdi"),
        log=tmp_path / "plugin.log",
    )
    try:
        yield plugin
        plugin.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(plugin.wait(), TIMEOUT) == 0
    finally:
        await stop(plugin)


def emulator_argv(root: Path, kubeconfig: Path, pod: Path) -> list[str]:
    return [
        "kubelet",
        "--plugin-dir",
        str(root / "device-plugins"),
        "--plugins-registry-dir",
        str(root / "registry"),
        "--kubeconfig",
        str(kubeconfig),
        "--cdi-spec-dir",
        str(root / "cdi"),
        "--admit",
        str(pod),
        "--admit-timeout",
        str(TIMEOUT),
    ]


async def admit_once(root: Path, kubeconfig: Path, manifest: Path, expect: int = 0) -> str:
    """Run the emulator with ``--once`` on ``manifest``; its output, exit code checked."""
    once = await spawn(*emulator_argv(root, kubeconfig, manifest), "--once")
    try:
        output = (await asyncio.wait_for(once.communicate(), TIMEOUT))[0].decode()
    finally:
        await stop(once)
    assert once.returncode == expect, output
    return output


def kubeconfigs(tmp_path: Path, server: ApiServer, node: str) -> tuple[Path, Path]:
    """Kubeconfig files for the admin (the emulator) and for ``node`` (the plugin)."""
    admin = write_kubeconfig(tmp_path / "admin.kubeconfig", server.kubeconfig())
    return admin, write_kubeconfig(tmp_path / "node.kubeconfig", server.node_kubeconfig(node))


def check_prepared(
    output: str, case: BackendCase, key: str, node: str, device: str, uid: str
) -> None:
    """The claims section of the emulator's output for the pod of :func:`pod_document`."""
    cdi_id = f"k8s.{case.driver}/claim={uid}-accel"
    claims = output.partition(f"pod {key}: resource claims prepared\n")[2]
    assert claims, output
    assert f"{case.driver} {node}/{device} (accel)" in claims
    assert f"container main:\n    claim accel: CDI devices {cdi_id}\n" in claims
    assert f"container helper:\n    claim accel/accel: CDI devices {cdi_id}\n" in claims
    assert "container plain:" not in claims  # it names no claim
    assert case.edit in claims, output  # read from the claim's CDI spec


@pytest.mark.parametrize("case", BACKENDS)
async def test_a_pod_with_a_claim_is_prepared_printed_and_unprepared(
    kube: AsyncClient,
    kube_apiserver: ApiServer,
    kube_node: str,
    node_client: NodeClient,
    kube_namespace: str,
    tmp_path: Path,
    case: BackendCase,
) -> None:
    namespace = kube_namespace
    admin, as_node = kubeconfigs(tmp_path, kube_apiserver, kube_node)
    selecting = await device_class(kube, case.selector)
    with short_tempdir("admitdra-") as root:
        async with dra_plugin(case, tmp_path, root, kube_node, as_node):
            found = await asyncio.wait_for(published(kube, kube_node, case.driver), TIMEOUT)
            device = selected_device(found, case)
            claim, uid = await allocated_claim(
                kube, namespace, selecting, kube_node, device, case.driver
            )
            await bound_pod(kube, namespace, claim, kube_node)
            await asyncio.wait_for(
                readable_by_node(node_client(kube_node), namespace, claim), TIMEOUT
            )
            pod = pod_manifest(tmp_path / "pod.yaml", namespace, claim)
            emulator = emulator_argv(root, admin, pod)
            key = f"{namespace}/trainer"
            spec = root / "cdi" / f"k8s.{case.driver}_claim_{uid}.json"

            # --once: prepared, printed, unprepared at the end.
            output = await admit_once(root, admin, pod)
            assert f"claim accel: ResourceClaim {namespace}/{claim} ({uid})" in output
            check_prepared(output, case, key, kube_node, device, uid)
            assert f"pod {key}: resource claims unprepared" in output
            assert not spec.exists()

            # Kept running: the spec is there (and valid CDI) until the emulator stops.
            running = await spawn(*emulator)
            try:
                shown = await asyncio.wait_for(read_until(running, f"from {spec}"), TIMEOUT)
                assert f"k8s.{case.driver}/claim={uid}-accel" in shown
                written = assert_valid_spec_file(spec)
                assert written["kind"] == f"k8s.{case.driver}/claim"
                assert [d["name"] for d in written["devices"]] == [f"{uid}-accel"]
                running.send_signal(signal.SIGTERM)
                rest = (await asyncio.wait_for(running.communicate(), TIMEOUT))[0].decode()
            finally:
                await stop(running)
            assert running.returncode == 0, rest
            assert f"pod {key}: resource claims unprepared" in rest
            assert not spec.exists()
    await kube.delete(DeviceClass, selecting)


@pytest.mark.parametrize(
    ("case", "message"),
    [
        pytest.param(
            "missing",
            'fetch ResourceClaim no-such-claim: resourceclaims.resource.k8s.io "no-such-claim" '
            "not found",
            id="claim-missing",
        ),
        pytest.param("unallocated", ": not allocated", id="claim-not-allocated"),
        pytest.param(
            "reserved", "is not allowed to use ResourceClaim", id="claim-reserved-for-another-pod"
        ),
    ],
)
async def test_a_claim_that_cannot_be_prepared_fails_the_pod(
    kube: AsyncClient,
    kube_apiserver: ApiServer,
    kube_namespace: str,
    accel_class: str,
    tmp_path: Path,
    case: str,
    message: str,
) -> None:
    namespace = kube_namespace
    admin = write_kubeconfig(tmp_path / "admin.kubeconfig", kube_apiserver.kubeconfig())
    claim = "no-such-claim"
    if case != "missing":
        device = "accel-0" if case == "reserved" else None
        claim, _uid = await allocated_claim(kube, namespace, accel_class, "node-x", device)
    if case == "reserved":
        reserved = {"status": {"reservedFor": [{"resource": "pods", "name": "other", "uid": "u"}]}}
        await kube.patch(
            ResourceClaimStatus, claim, reserved, namespace=namespace, patch_type=PatchType.MERGE
        )
    pod = pod_manifest(tmp_path / "pod.yaml", namespace, claim)
    with short_tempdir("admitdra-") as root:
        proc = await spawn(
            "kubelet",
            "--plugin-dir",
            str(root),
            "--kubeconfig",
            str(admin),
            "--admit",
            str(pod),
            "--once",
            "--admit-timeout",
            "1",
        )
        output = (await asyncio.wait_for(proc.communicate(), TIMEOUT))[0].decode()
    assert proc.returncode == 1, output
    assert (
        f"pod {namespace}/trainer: resource claims not prepared: prepare dynamic resources: "
        in (output)
    )
    assert message in output
