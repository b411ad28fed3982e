"""device_names: the one mapping of a backend's tree to DRA device names, used by both sides."""

from __future__ import annotations

import logging

import pytest

from accel_plugins.dra.model import device_names
from accel_plugins.plugin.device import Device, tree
from accel_plugins.plugin.dra_names import DraNamer, dra_device_name


class _ByIndex:
    """A namer like NVIDIA's DRA driver: ``gpu-<n>``; replicas (``::``) left out."""

    def dra_device_name(self, resource: str, device: Device) -> str | None:
        if "::" in device.id:
            return None
        return f"gpu-{device.id.removeprefix('GPU')}"


class _Bad:
    def dra_device_name(self, resource: str, device: Device) -> str | None:
        return "Not_A_Label"


def test_default_names_are_dra_device_name_of_the_id() -> None:
    devices = tree({"example.com/a": [Device("card0"), Device("Card/1")]})
    named = device_names(devices)
    assert sorted(named) == sorted([dra_device_name("card0"), dra_device_name("Card/1")])
    assert named["card0"].resource == "example.com/a"
    assert named["card0"].device.id == "card0"


def test_a_namer_names_and_leaves_out() -> None:
    devices = tree({"nvidia.com/gpu": [Device("GPU0"), Device("GPU1"), Device("GPU1::0")]})
    namer: DraNamer = _ByIndex()
    assert isinstance(namer, DraNamer)
    assert sorted(device_names(devices, namer)) == ["gpu-0", "gpu-1"]


def test_a_name_that_is_not_a_label_is_left_out(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR):
        assert device_names(tree({"r.io/x": [Device("a")]}), _Bad()) == {}
    assert "not a DNS label" in caplog.text


def test_a_name_taken_twice_goes_to_the_first_resource_in_sorted_order(
    caplog: pytest.LogCaptureFixture,
) -> None:
    devices = tree({"z.io/b": [Device("dev0")], "a.io/a": [Device("dev0")]})
    with caplog.at_level(logging.ERROR):
        named = device_names(devices)
    assert named["dev0"].resource == "a.io/a"
    assert "taken by a.io/a" in caplog.text


@pytest.mark.parametrize(
    ("profile", "strategy", "resource", "expected"),
    [
        # k8s-dra-driver-gpu GpuInfo.CanonicalName: "gpu-<minor>".
        pytest.param("pcie-4gpu", "none", "nvidia.com/gpu", "gpu-{minor}", id="whole-gpu"),
        # MIG devices: NVIDIA's name needs the GPU instance profile and placement, which
        # discovery does not read; the framework's name of the MIG UUID stands.
        pytest.param("a100-mig", "mixed", "nvidia.com/mig-1g.5gb", "{default}", id="mig"),
    ],
)
def test_nvidia_names_whole_gpus_as_nvidias_dra_driver_does(
    profile: str, strategy: str, resource: str, expected: str
) -> None:
    from accel_plugins.backends.nvidia.facts import gpu_facts
    from accel_plugins.backends.nvidia.resources import build_resources
    from tests.fixtures.nvidia import simulated_backend
    from tests.unit.backends.nvidia.test_nvidia_container_contract import node_of

    backend, _ = simulated_backend(profile, mig_strategy=strategy)
    devices = build_resources(node_of(profile), strategy)[resource]
    assert isinstance(backend, DraNamer)
    for device in devices:
        name = backend.dra_device_name(resource, device)
        minor = gpu_facts(device).minor
        assert name == expected.format(minor=minor, default=dra_device_name(device.id))
    # A time-sliced replica keeps the framework's name too.
    shared = Device(f"{devices[0].id}::1", facts=gpu_facts(devices[0]).as_replica(1, devices[0].id))
    assert backend.dra_device_name(resource, shared) == dra_device_name(shared.id)
