"""NVIDIA time-slicing and MPS in DRA mode, through the DRA gRPC service on real sockets.

One simulated node sharing GPUs both ways (tests/dra_sharing_fixtures.py),
from one config file as the device plugin reads it. Two claims on
the two replicas of one GPU share it; each prepared answer carries the
device-plugin path's container contract (NVIDIA's ``internal/plugin/server.go``
``getAllocateResponse``: ``NVIDIA_VISIBLE_DEVICES`` of the shared GPU;
``internal/plugin/mps.go`` ``updateReponse``: ``CUDA_MPS_PIPE_DIRECTORY``, the
pipe directory and ``/dev/shm`` mounts), plus the CUDA MPS client limits a
claim's ``GpuConfig`` asks for. Invalid parameters fail their claim alone, with
the field named (NVIDIA/k8s-dra-driver-gpu ``api/nvidia.com/resource/v1beta1``
``sharing.go`` and ``validate.go``).
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from accel_plugins.api import dra_health_v1_pb2 as health_v1
from accel_plugins.api import dra_v1_pb2 as v1
from accel_plugins.backends.generic.backend import GenericBackend
from accel_plugins.backends.generic.config import parse_config
from accel_plugins.backends.nvidia.backend import NvidiaBackend
from accel_plugins.backends.nvidia.facts import gpu_facts
from accel_plugins.dra.model import AllocatedDevice, ClaimRef, OpaqueConfig, ResolvedClaim
from accel_plugins.plugin.dra_names import dra_device_name
from tests.dra_sharing_fixtures import (
    GPU_CONFIG,
    MPS,
    TIME_SLICED,
    gpu_config,
    sharing_node,
)
from tests.fixtures.dra_plugin import DRIVER, NODE, FakeClaims, RunningDriver
from tests.fixtures.generic import FakeHost
from tests.support.cdi import assert_valid_spec_file


@pytest.fixture
def node(tmp_path: Path) -> tuple[NvidiaBackend, Path]:
    return sharing_node(tmp_path)


@pytest.fixture
def nvidia(node: tuple[NvidiaBackend, Path]) -> NvidiaBackend:
    return node[0]


@pytest.fixture
def mps_root(node: tuple[NvidiaBackend, Path]) -> Path:
    return node[1]


def replicas(running: RunningDriver, resource: str) -> list[tuple[str, str]]:
    """(DRA name, GPU UUID) of each replica of ``resource``, replica order (not the shared
    GPU's name, which the kubelet side also knows for consumable capacity)."""
    named = running.driver.inventory.devices
    found = [
        (n, d.device)
        for n, d in named.items()
        if d.resource == resource and n == dra_device_name(d.device.id)
    ]
    found.sort(key=lambda item: gpu_facts(item[1]).replica or 0)
    return [(name, gpu_facts(device).uuid) for name, device in found]


def claim(claims: FakeClaims, uid: str, device: str, *configs: Mapping[str, Any]) -> ClaimRef:
    ref = ClaimRef(uid=uid, namespace="default", name=f"claim-{uid}")
    claims.claims[uid] = ResolvedClaim(
        ref,
        (AllocatedDevice("gpu", DRIVER, NODE, device),),
        tuple(OpaqueConfig(dict(c), index=i) for i, c in enumerate(configs)),
    )
    return ref


async def prepare(running: RunningDriver, *refs: ClaimRef) -> Any:
    request = v1.NodePrepareResourcesRequest(
        claims=[v1.Claim(namespace=r.namespace, uid=r.uid, name=r.name) for r in refs]
    )
    return (await running.v1.NodePrepareResources(request, timeout=10)).claims


def edits(running: RunningDriver, uid: str) -> dict[str, Any]:
    spec = assert_valid_spec_file(running.settings.cdi_spec_dir / f"k8s.{DRIVER}_claim_{uid}.json")
    edits: dict[str, Any] = spec["devices"][0]["containerEdits"]
    return edits


def env(running: RunningDriver, uid: str) -> dict[str, str]:
    return dict(e.split("=", 1) for e in edits(running, uid)["env"])


async def first_tree(running: RunningDriver) -> None:
    """Return once the driver serves the backend's first tree (the health stream's first
    non-empty list)."""
    stream: Any = running.health_v1.NodeWatchResources(
        health_v1.NodeWatchResourcesRequest(), timeout=10
    )
    while not (await stream.read()).devices:
        pass
    stream.cancel()


async def started(start_driver: Any, nvidia: NvidiaBackend, claims: FakeClaims) -> RunningDriver:
    running: RunningDriver = await start_driver(nvidia, claims)
    await first_tree(running)
    return running


# -- two claims share one GPU ---------------------------------------------------------


async def test_two_claims_share_one_time_sliced_gpu(
    start_driver: Any, nvidia: NvidiaBackend
) -> None:
    claims = FakeClaims()
    running = await started(start_driver, nvidia, claims)
    (first, uuid), (second, same) = replicas(running, TIME_SLICED)
    assert same == uuid  # two replicas of GPU 0
    a = claim(claims, "uid-a", first)
    b = claim(claims, "uid-b", second, gpu_config({"strategy": "TimeSlicing"}))

    answers = await prepare(running, a, b)

    assert [answers[u].error for u in ("uid-a", "uid-b")] == ["", ""]
    for uid in ("uid-a", "uid-b"):
        assert env(running, uid) == {"NVIDIA_VISIBLE_DEVICES": uuid}


async def test_two_claims_share_one_mps_gpu_each_with_its_limits(
    start_driver: Any, nvidia: NvidiaBackend, mps_root: Path
) -> None:
    claims = FakeClaims()
    running = await started(start_driver, nvidia, claims)
    (first, uuid), (second, same) = replicas(running, MPS)
    assert same == uuid  # two replicas of GPU 1
    limited = gpu_config(
        {
            "strategy": "MPS",
            "mpsConfig": {
                "defaultActiveThreadPercentage": 50,
                "defaultPinnedDeviceMemoryLimit": "2Gi",
                "defaultPerDevicePinnedMemoryLimit": {uuid: "1Gi"},
            },
        }
    )
    a = claim(claims, "uid-a", first, limited)
    b = claim(claims, "uid-b", second)  # no parameters: the daemon's defaults

    answers = await prepare(running, a, b)

    assert [answers[u].error for u in ("uid-a", "uid-b")] == ["", ""]
    pipe = f"/mps/{MPS}/pipe"
    contract = {"NVIDIA_VISIBLE_DEVICES": uuid, "CUDA_MPS_PIPE_DIRECTORY": pipe}
    assert env(running, "uid-a") == {
        **contract,
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=1024M",  # the per-device entry wins
    }
    assert env(running, "uid-b") == contract
    for uid in ("uid-a", "uid-b"):
        assert edits(running, uid)["mounts"] == [
            {"hostPath": str(mps_root / MPS / "pipe"), "containerPath": pipe, "options": ["bind"]},
            {"hostPath": str(mps_root / "shm"), "containerPath": "/dev/shm", "options": ["bind"]},
        ]


async def test_two_claims_allocated_one_shared_gpu_under_consumable_capacity(
    start_driver: Any, nvidia: NvidiaBackend
) -> None:
    """With consumable capacity the slices offer GPU 0 once (``gpu-0``, its two replicas'
    shares) and the scheduler gives it to both claims; each is prepared as a replica."""
    claims = FakeClaims()
    running = await started(start_driver, nvidia, claims)
    (_, uuid), _ = replicas(running, TIME_SLICED)
    a, b = claim(claims, "uid-a", "gpu-0"), claim(claims, "uid-b", "gpu-0")

    answers = await prepare(running, a, b)

    assert [answers[u].error for u in ("uid-a", "uid-b")] == ["", ""]
    assert [d.device_name for d in answers["uid-a"].devices] == ["gpu-0"]
    for uid in ("uid-a", "uid-b"):
        assert env(running, uid) == {"NVIDIA_VISIBLE_DEVICES": uuid}


async def test_a_class_config_is_overridden_by_the_claims_own(
    start_driver: Any, nvidia: NvidiaBackend
) -> None:
    """Configs apply in order (class first, then claim); the last one wins."""
    claims = FakeClaims()
    running = await started(start_driver, nvidia, claims)
    (device, _), _ = replicas(running, MPS)
    ref = claim(
        claims,
        "uid-a",
        device,
        gpu_config({"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 10}}),
        gpu_config({"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 30}}),
    )
    assert (await prepare(running, ref))["uid-a"].error == ""
    assert env(running, "uid-a")["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "30"


# -- invalid parameters ---------------------------------------------------------------

WHERE = "status.allocation.devices.config[0].opaque.parameters"


@pytest.mark.parametrize(
    ("resource", "parameters", "message"),
    [
        pytest.param(
            TIME_SLICED,
            gpu_config({"strategy": "Sliced"}),
            "sharing.strategy: unknown GPU sharing strategy 'Sliced'",
            id="unknown-strategy",
        ),
        pytest.param(
            TIME_SLICED,
            gpu_config({"strategy": "Fabric"}),
            "sharing.strategy: fabric GPU sharing strategy is not enabled",
            id="fabric-strategy",
        ),
        pytest.param(
            TIME_SLICED,
            gpu_config({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Eternal"}}),
            "sharing.timeSlicingConfig.interval: unknown time-slice interval 'Eternal'",
            id="unknown-interval",
        ),
        pytest.param(
            TIME_SLICED,
            gpu_config({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}),
            "sharing.timeSlicingConfig.interval: Long: only Default is served",
            id="interval-not-applied",
        ),
        pytest.param(
            TIME_SLICED,
            gpu_config({"strategy": "TimeSlicing", "mpsConfig": {}}),
            "sharing.mpsConfig: cannot be used with the TimeSlicing strategy",
            id="mps-config-with-time-slicing",
        ),
        pytest.param(
            TIME_SLICED,
            gpu_config({"strategy": "MPS"}),
            "sharing.strategy: MPS needs GPUs shared by the node's MPS control daemon",
            id="mps-on-a-time-sliced-gpu",
        ),
        pytest.param(
            MPS,
            gpu_config({"strategy": "TimeSlicing"}),
            "sharing.strategy: TimeSlicing, but nvidia.com/gpu.mps devices are MPS replicas",
            id="time-slicing-on-mps-replicas",
        ),
        pytest.param(
            MPS,
            gpu_config({"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 101}}),
            "sharing.mpsConfig.defaultActiveThreadPercentage: must not be greater than 100",
            id="thread-percentage-over-100",
        ),
        pytest.param(
            MPS,
            gpu_config({"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": -1}}),
            "sharing.mpsConfig.defaultActiveThreadPercentage: must not be negative",
            id="thread-percentage-negative",
        ),
        pytest.param(
            MPS,
            gpu_config({"strategy": "MPS", "mpsConfig": {"defaultPinnedDeviceMemoryLimit": "1Ki"}}),
            "sharing.mpsConfig.defaultPinnedDeviceMemoryLimit: '1Ki' is below 1Mi",
            id="pinned-limit-below-a-mib",
        ),
        pytest.param(
            MPS,
            gpu_config(
                {"strategy": "MPS", "mpsConfig": {"defaultPinnedDeviceMemoryLimit": "lots"}}
            ),
            "sharing.mpsConfig.defaultPinnedDeviceMemoryLimit: 'lots' is not a quantity",
            id="pinned-limit-not-a-quantity",
        ),
        pytest.param(
            MPS,
            gpu_config(
                {
                    "strategy": "MPS",
                    "mpsConfig": {"defaultPerDevicePinnedMemoryLimit": {"1": "1Gi"}},
                }
            ),
            "sharing.mpsConfig.defaultPerDevicePinnedMemoryLimit[1]: invalid device",
            id="per-device-index-out-of-range",
        ),
        pytest.param(
            MPS,
            gpu_config({"strategy": "MPS", "mpsconfig": {}}),
            "sharing.mpsconfig: unknown field",
            id="misspelt-field",
        ),
        pytest.param(
            TIME_SLICED,
            {**GPU_CONFIG, "kind": "MigDeviceConfig"},
            "kind: 'MigDeviceConfig' is not 'GpuConfig'",
            id="other-kind",
        ),
        pytest.param(
            TIME_SLICED,
            {**GPU_CONFIG, "apiVersion": "resource.nvidia.com/v1"},
            "apiVersion: 'resource.nvidia.com/v1' is not 'resource.nvidia.com/v1beta1'",
            id="other-api-version",
        ),
    ],
)
async def test_invalid_parameters_fail_their_claim_naming_the_field(
    start_driver: Any,
    nvidia: NvidiaBackend,
    resource: str,
    parameters: dict[str, Any],
    message: str,
) -> None:
    claims = FakeClaims()
    running = await started(start_driver, nvidia, claims)
    (bad_device, _), (good_device, _) = replicas(running, resource)
    bad = claim(claims, "uid-bad", bad_device, parameters)
    good = claim(claims, "uid-good", good_device)

    answers = await prepare(running, bad, good)

    assert answers["uid-bad"].error.startswith(f"{WHERE}.{message.split(':')[0]}")
    assert message in answers["uid-bad"].error
    assert answers["uid-good"].error == ""  # the other claim of the call is prepared
    assert not (running.settings.cdi_spec_dir / f"k8s.{DRIVER}_claim_uid-bad.json").exists()


# -- generic devices with count ---------------------------------------------------------

SQUAT_COUNT = """
devices:
  - name: serial
    groups:
      - paths: [{path: /dev/ttyUSB0}]
        count: 2
"""


async def test_two_claims_share_a_generic_device_offered_count_times(
    start_driver: Any, fake_host: FakeHost
) -> None:
    """squat's ``count`` (generic-device-plugin README: a group "can be scheduled
    count times") makes one unit two DRA devices; a claim on each gets the same node."""
    fake_host.node("/dev/ttyUSB0")
    backend = GenericBackend(parse_config(textwrap.dedent(SQUAT_COUNT)), fake_host.settings())
    claims = FakeClaims()
    running: RunningDriver = await start_driver(backend, claims)
    await first_tree(running)
    # The two copies by their own names (the kubelet side also knows the shared name).
    first, second = sorted(
        n for n, d in running.driver.inventory.devices.items() if n == d.device.id
    )
    a, b = claim(claims, "uid-a", first), claim(claims, "uid-b", second)

    answers = await prepare(running, a, b)

    assert [answers[u].error for u in ("uid-a", "uid-b")] == ["", ""]
    for uid in ("uid-a", "uid-b"):
        assert [n["path"] for n in edits(running, uid)["deviceNodes"]] == ["/dev/ttyUSB0"]


async def test_parameters_for_a_backend_that_takes_none_fail_the_claim(
    start_driver: Any, fake_host: FakeHost
) -> None:
    fake_host.node("/dev/ttyUSB0")
    backend = GenericBackend(parse_config(textwrap.dedent(SQUAT_COUNT)), fake_host.settings())
    claims = FakeClaims()
    running: RunningDriver = await start_driver(backend, claims)
    await first_tree(running)
    device, named = sorted(running.driver.inventory.devices.items())[0]
    ref = claim(claims, "uid-a", device, {"anything": True})
    assert (await prepare(running, ref))["uid-a"].error == (
        f"{WHERE}: driver {DRIVER} takes no opaque parameters for resource {named.resource}"
    )
