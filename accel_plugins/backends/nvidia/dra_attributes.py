"""NVIDIA devices as DRA devices: the attribute names of NVIDIA's k8s-dra-driver-gpu.

So a DeviceClass or claim written for NVIDIA's driver (driver ``gpu.nvidia.com``,
``device.attributes["gpu.nvidia.com"].productName``, ``.type == "gpu"``,
``.cudaComputeCapability``...) selects our devices too. Per device: ``type``
(``gpu`` or ``mig``), ``uuid``, ``productName``, ``architecture``,
``cudaComputeCapability``, ``driverVersion``, ``cudaDriverVersion`` (versions,
as NVIDIA publishes them), the standard ``resource.kubernetes.io/pciBusID`` and
``pcieRoot``, ``brand`` (NVML's brand under go-nvlib's names: ``Nvidia``,
``Tesla``...) and capacity ``memory``, written as NVIDIA writes it (a quantity
in binary units: ``80Gi``); MIG devices add ``profile`` and ``parentUUID``.
Ours beyond NVIDIA's: ``index`` (a GPU's NVML index), ``parentIndex`` (a MIG
device's GPU), ``replica`` for time-sliced or MPS replicas (docs/nvidia.md).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from accel_plugins.backends.nvidia.facts import known_gpu
from accel_plugins.backends.nvidia.labels.node_labels import LabelFacts
from accel_plugins.backends.nvidia.nvml import normalize_bus_id
from accel_plugins.plugin.device import Device
from accel_plugins.plugin.dra_attributes import (
    DraAttributeValue,
    DraDeviceInfo,
    DraVersion,
    pci_attributes,
)

DRIVER_NAME = (
    "gpu.nvidia.com"  # NVIDIA's DRA driver name: its DeviceClass gpu.nvidia.com selects it
)
MIB = 1 << 20
# NVML's nvmlBrandType_t values as go-nvlib names them (GetBrandAsString), which NVIDIA's
# driver publishes; a value past the table is "Unknown", as there.
BRANDS = (
    "Unknown", "Quadro", "Tesla", "NVS", "Grid", "GeForce", "Titan", "NvidiaVApps",
    "NvidiaVPC", "NvidiaVCS", "NvidiaVWS", "NvidiaCloudGaming", "QuadroRTX", "NvidiaRTX",
    "Nvidia", "GeForceRTX", "TitanRTX",
)  # fmt: skip


def brand_name(value: int) -> str:
    return BRANDS[value] if 0 <= value < len(BRANDS) else "Unknown"


def architecture(major: int, minor: int) -> str | None:
    """go-nvlib's architecture names, from the compute capability."""
    if major == 7:
        return "Volta" if minor < 5 else "Turing"
    if major == 8:
        return "Ampere" if minor < 9 else "Ada Lovelace"
    return {
        3: "Kepler",
        5: "Maxwell",
        6: "Pascal",
        9: "Hopper",
        10: "Blackwell",
        12: "Blackwell",
    }.get(major)


def cuda_version(nvml_value: int) -> DraVersion:
    """NVML's CUDA driver version integer (12040) as ``12.4.0``."""
    return DraVersion(f"{nvml_value // 1000}.{nvml_value % 1000 // 10}.0")


def describe(
    device: Device, system: LabelFacts | None, sys_root: Path = Path("/sys")
) -> DraDeviceInfo:
    """A GPU, MIG device or replica; devices without GPU facts get nothing."""
    facts = known_gpu(device)
    if facts is None:
        return DraDeviceInfo()
    attributes: dict[str, DraAttributeValue] = {
        "type": facts.kind,
        "uuid": facts.uuid,
        "productName": facts.name,
        "brand": brand_name(facts.brand),
    }
    if facts.kind == "mig":
        attributes["parentIndex"] = facts.gpu_index
        if facts.parent_uuid:
            attributes["parentUUID"] = facts.parent_uuid
        if facts.mig_profile:
            attributes["profile"] = facts.mig_profile
    else:
        attributes["index"] = facts.gpu_index
    if facts.replica is not None:
        attributes["replica"] = facts.replica
    if system is not None:
        capability = system.compute_capability.get(facts.gpu_uuid)
        if capability is not None:
            arch = architecture(*capability)
            if arch is not None:
                attributes["architecture"] = arch
            attributes["cudaComputeCapability"] = DraVersion(f"{capability[0]}.{capability[1]}.0")
        # A driver version that is not X.Y[.Z] is left out (NVIDIA's driver refuses to start).
        with contextlib.suppress(ValueError):
            attributes["driverVersion"] = DraVersion.loose(system.driver_version)
        if system.cuda_driver_version > 0:
            attributes["cudaDriverVersion"] = cuda_version(system.cuda_driver_version)
    attributes.update(pci_attributes(normalize_bus_id(facts.pci_bus_id), sys_root))
    return DraDeviceInfo(attributes=attributes, capacity={"memory": facts.memory_mib * MIB})
