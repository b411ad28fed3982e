"""The kubelet emulator's DRA side against our DRA driver, over real sockets.

The plugin watcher registers a ``DRAPlugin`` the way the kubelet's DRA handler
does (pkg/kubelet/cm/dra/plugin/registration.go: the service names
``v1.DRAPlugin``/``v1beta1.DRAPlugin``, v1 preferred; the driver name a DNS
subdomain), and :class:`~accel_plugins.kubelet_emulator.dra.DraClient` calls what the
kubelet calls: NodePrepareResources, NodeUnprepareResources, NodeWatchResources.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from accel_plugins.kubelet_emulator import Kubelet
from accel_plugins.kubelet_emulator.dra import SERVICE_V1, SERVICE_V1BETA1, DraClaim, DraClient
from accel_plugins.plugin.device import Device, DeviceNode, Health, tree
from tests.fixtures.dra_plugin import DRIVER, NODE, FakeClaims, RunningDriver
from tests.fixtures.framework import ScriptedBackend
from tests.fixtures.plugin_watcher import StubRegistrar, plugin_info

RESOURCE = "example.com/card"


def cards(*health: Health) -> ScriptedBackend:
    return ScriptedBackend(
        tree(
            {
                RESOURCE: [
                    Device(f"card{i}", health=h, nodes=(DeviceNode(f"/dev/card{i}"),))
                    for i, h in enumerate(health)
                ]
            }
        )
    )


async def registered(kubelet: Kubelet) -> DraClient:
    await kubelet.wait_for(lambda k: DRIVER in k.dra.names, what=f"DRA driver {DRIVER}")
    return kubelet.dra.client(DRIVER)


async def test_the_emulator_registers_our_driver_and_prepares_a_claim(
    watching_kubelet: Kubelet, registry_dir: Path, start_driver: Any
) -> None:
    claims = FakeClaims()
    ref = claims.add("uid-1", ("gpu", "card1"))
    running: RunningDriver = await start_driver(
        cards(Health.HEALTHY, Health.HEALTHY), claims, plugins_registry_dir=registry_dir
    )
    client = await registered(watching_kubelet)
    assert client.service == SERVICE_V1
    assert client.endpoint == running.settings.socket_path
    await asyncio.wait_for(running.driver.wait_registered(), 5)

    claim = DraClaim(namespace=ref.namespace, name=ref.name, uid=ref.uid)
    result = (await client.prepare([claim]))["uid-1"]
    assert result.error == ""
    assert [(d.requests, d.pool, d.device) for d in result.devices] == [(("gpu",), NODE, "card1")]
    assert result.cdi_ids == (f"k8s.{DRIVER}/claim=uid-1-gpu",)
    assert await client.unprepare([claim]) == {"uid-1": ""}

    missing = DraClaim(namespace="default", name="gone", uid="uid-2")
    assert "not found" in (await client.prepare([missing]))["uid-2"].error


async def test_the_emulator_reads_the_health_stream(
    watching_kubelet: Kubelet, registry_dir: Path, start_driver: Any
) -> None:
    await start_driver(
        cards(Health.HEALTHY, Health.UNHEALTHY), FakeClaims(), plugins_registry_dir=registry_dir
    )
    client = await registered(watching_kubelet)
    async for devices in client.watch_health():
        assert [(d.pool, d.device, d.health) for d in devices] == [
            (NODE, "card0", "Healthy"),
            (NODE, "card1", "Unhealthy"),
        ]
        break


async def test_a_stopped_driver_is_deregistered(
    watching_kubelet: Kubelet, registry_dir: Path, start_driver: Any
) -> None:
    running: RunningDriver = await start_driver(
        cards(Health.HEALTHY), FakeClaims(), plugins_registry_dir=registry_dir
    )
    await registered(watching_kubelet)
    await running.stop()
    await watching_kubelet.wait_for(lambda k: DRIVER not in k.dra.names, what="deregistration")


@pytest.mark.parametrize(
    ("versions", "service", "refusal"),
    [
        pytest.param(["v1beta1.DRAPlugin"], SERVICE_V1BETA1, None, id="1.32-driver-v1beta1"),
        pytest.param(["v1beta1.DRAPlugin", "v1.DRAPlugin"], SERVICE_V1, None, id="v1-preferred"),
        pytest.param(["v1alpha4.DRAPlugin"], None, "none of the supported services", id="old"),
        pytest.param(["v1beta1"], None, "none of the supported services", id="device-plugin-ver"),
    ],
)
async def test_registration_is_validated_as_the_kubelet_does(
    watching_kubelet: Kubelet,
    registry_dir: Path,
    registrars: list[StubRegistrar],
    versions: list[str],
    service: str | None,
    refusal: str | None,
) -> None:
    registrar = StubRegistrar(
        registry_dir / "stub-reg.sock",
        plugin_info(DRIVER, "/run/stub/dra.sock", kind="DRAPlugin", versions=versions),
    )
    registrars.append(registrar)
    await registrar.start()
    registered_ok, error = await registrar.wait_for_status()
    if refusal is None:
        assert (registered_ok, error) == (True, "")
        assert watching_kubelet.dra.client(DRIVER).service == service
    else:
        assert not registered_ok
        assert refusal in error
        assert DRIVER not in watching_kubelet.dra.names


async def test_a_driver_name_that_is_not_a_dns_subdomain_is_refused(
    watching_kubelet: Kubelet, registry_dir: Path, registrars: list[StubRegistrar]
) -> None:
    registrar = StubRegistrar(
        registry_dir / "bad-reg.sock",
        plugin_info("Not_A_Domain", "/run/x.sock", kind="DRAPlugin", versions=["v1.DRAPlugin"]),
    )
    registrars.append(registrar)
    await registrar.start()
    registered_ok, error = await registrar.wait_for_status()
    assert not registered_ok
    assert "not a DNS subdomain" in error
