"""NVIDIA's CDI specs on a fake driver root: linker cache, driver files, devices, hooks.

Facts come from NVIDIA's sources: the device names from nvidia-container-toolkit
``pkg/nvcdi/namer.go`` (UUID; index ``0``, MIG ``<gpu>:<mig>``) and
``pkg/nvcdi/full-gpu-nvml.go``/``mig-device-nvml.go``; the driver files from
``pkg/nvcdi/driver-nvml.go`` and ``internal/discover/ipc.go``; the hooks and their
arguments from ``internal/discover/hooks.go``, ``symlinks.go``, ``ldconfig.go``
and ``compat_libs.go``; the mount options from ``internal/discover/mounts.go`` and
``ipc.go``; the linker cache layout from ``internal/ldcache/ldcache.go``; the IMEX
class from k8s-device-plugin ``internal/cdi/imex.go``. Every spec generated here
is checked against the CDI project's JSON schema (tests/support/cdi.py).

What a side-by-side run with NVIDIA's plugin v0.20.0 on an H200 showed (hack/peer_nvidia.py)
is pinned here with the rules from the toolkit v1.20.0 that plugin vendors: one device name
per GPU as the ID strategy says and no ``all`` (k8s-device-plugin ``internal/cdi/cdi.go``);
nodes described from the host's node (``internal/edits/device.go``); mounts and nodes
sorted by depth, then name (``pkg/nvcdi/transform/sorter.go``); the version a spec needs
(CDI ``specs-go/version.go``); programs found on ``PATH`` first (``pkg/lookup/path.go``);
firmware in every directory of the kernel's search path, its custom one first
(``getFirmwareSearchPaths``); the ``update-application-profile`` hook last
(``internal/discover/application_profile.go``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import struct
from pathlib import Path
from typing import Any

import pytest

from accel_plugins.backends.nvidia.cdi import ldcache
from accel_plugins.backends.nvidia.cdi.cdi_spec import (
    CdiOptions,
    NvidiaCdi,
    common_edits,
    describe_node,
    gpu_spec,
    imex_spec,
)
from accel_plugins.backends.nvidia.cdi.driver_files import DriverRoot
from accel_plugins.backends.nvidia.cdi.drm_nodes import has_graphics
from accel_plugins.backends.nvidia.container_contract import (
    ImexChannel,
    device_node,
    generated_mig_minors,
)
from accel_plugins.plugin.cdi import CdiDevice, CdiSpec, ContainerEdits
from accel_plugins.testing import FakeHost
from tests.support.cdi import LIBDIR, VERSION, assert_valid_spec, fake_driver_root
from tests.unit.backends.nvidia.test_nvidia_container_contract import node_of

# -- the linker cache ---------------------------------------------------------------------


def test_the_machines_own_linker_cache_lists_libc() -> None:
    if not Path(ldcache.LDCACHE).is_file():
        pytest.skip("this machine has no /etc/ld.so.cache")
    names = {e.name for e in ldcache.read(Path("/"))}
    assert "libc.so.6" in names


@pytest.mark.parametrize(
    ("case", "data", "machine", "expected"),
    [
        pytest.param(
            "new format alone",
            ldcache.build([("libcuda.so.1", "/usr/lib64/libcuda.so.1")], "x86_64"),
            "x86_64",
            [("libcuda.so.1", "/usr/lib64/libcuda.so.1")],
            id="new-format",
        ),
        pytest.param(
            "old table first (ld.so-1.7.0, then the 8-byte aligned new one)",
            ldcache.OLD_MAGIC
            + struct.pack("<I", 1)
            + b"\0" * 12
            + b"\0" * 4  # padding to 8
            + ldcache.build([("libz.so.1", "/lib/libz.so.1")], "aarch64"),
            "aarch64",
            [("libz.so.1", "/lib/libz.so.1")],  # offsets count from the new table's start
            id="old-then-new",
        ),
        pytest.param(
            "another architecture's entries are skipped",
            ldcache.build([("libcuda.so.1", "/usr/lib/aarch64-linux-gnu/libcuda.so.1")], "aarch64"),
            "x86_64",
            [],
            id="other-arch",
        ),
    ],
)
def test_linker_cache_formats(
    case: str, data: bytes, machine: str, expected: list[tuple[str, str]]
) -> None:
    assert [(e.name, e.path) for e in ldcache.parse(data, machine)] == expected


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"not a cache at all, just bytes", id="garbage"),
        pytest.param(ldcache.build([("a.so", "/a.so")])[:60], id="truncated"),
    ],
)
def test_a_broken_linker_cache_is_refused_and_read_as_empty(tmp_path: Path, data: bytes) -> None:
    with pytest.raises(ldcache.LdCacheError):
        ldcache.parse(data)
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "ld.so.cache").write_bytes(data)
    assert ldcache.read(tmp_path) == []


# -- the driver's files -------------------------------------------------------------------

LIBS = [
    f"{LIBDIR}/libGLX_nvidia.so.{VERSION}",
    f"{LIBDIR}/libcuda.so.{VERSION}",
    f"{LIBDIR}/libnvidia-ml.so.{VERSION}",
    f"{LIBDIR}/libnvidia-nvvm70.so.4",
    f"{LIBDIR}/libnvidia-ptxjitcompiler.so.{VERSION}",
    f"{LIBDIR}/vdpau/libvdpau_nvidia.so.{VERSION}",
]


@pytest.mark.parametrize(
    "in_cache",
    [pytest.param(True, id="through-the-linker-cache"), pytest.param(False, id="search-dirs")],
)
def test_driver_files_of_a_driver_root(tmp_path: Path, in_cache: bool) -> None:
    root = fake_driver_root(tmp_path, in_cache=in_cache)
    driver = DriverRoot(root, kernel_release="6.1.0", search_path="")
    assert driver.version() == VERSION
    assert driver.library_dirs(VERSION) == [LIBDIR]
    assert driver.libraries(VERSION) == LIBS  # not the 470 leftover, not libz
    assert driver.binaries() == ["/usr/bin/nvidia-smi", "/usr/bin/nvidia-persistenced"]
    assert driver.ipc() == [
        "/run/nvidia-persistenced/socket",
        "/var/run/nvidia-fabricmanager/socket",
    ]
    assert driver.firmware(VERSION) == [
        f"/lib/firmware/nvidia/{VERSION}/gsp_ga10x.bin",
        f"/lib/firmware/nvidia/{VERSION}/gsp_tu10x.bin",
    ]
    assert driver.host_path("/usr/bin/nvidia-smi") == f"{tmp_path}/usr/bin/nvidia-smi"


def test_absolute_links_resolve_inside_the_driver_root(tmp_path: Path) -> None:
    """A driver container's links point into its own tree, not the plugin's."""
    root = fake_driver_root(tmp_path)
    link = root / LIBDIR.lstrip("/") / "libnvidia-ml.so.1"
    link.unlink()
    link.symlink_to(f"{LIBDIR}/libnvidia-ml.so.{VERSION}")
    assert DriverRoot(root).version() == VERSION


def test_firmware_of_every_directory_the_kernels_custom_one_first(tmp_path: Path) -> None:
    root = fake_driver_root(tmp_path / "root")
    custom = tmp_path / "firmware_class_path"
    custom.write_text("/usr/local/nvidia/firmware\n")
    for directory in ("usr/local/nvidia/firmware", "lib/firmware/updates/6.1.0"):
        found = root / directory / "nvidia" / VERSION
        found.mkdir(parents=True)
        (found / "gsp_ga10x.bin").write_bytes(b"\0")
        (found / "other.bin").write_bytes(b"\0")  # not gsp*.bin
    driver = DriverRoot(root, kernel_release="6.1.0", firmware_class_path=custom)
    assert driver.firmware(VERSION) == [
        f"/usr/local/nvidia/firmware/nvidia/{VERSION}/gsp_ga10x.bin",
        f"/lib/firmware/updates/6.1.0/nvidia/{VERSION}/gsp_ga10x.bin",
        f"/lib/firmware/nvidia/{VERSION}/gsp_ga10x.bin",
        f"/lib/firmware/nvidia/{VERSION}/gsp_tu10x.bin",
    ]
    custom.write_text("")  # unset: the /lib/firmware directories alone
    assert DriverRoot(root, kernel_release="6.1.0", firmware_class_path=custom).firmware(
        VERSION
    ) == [
        f"/lib/firmware/updates/6.1.0/nvidia/{VERSION}/gsp_ga10x.bin",
        f"/lib/firmware/nvidia/{VERSION}/gsp_ga10x.bin",
        f"/lib/firmware/nvidia/{VERSION}/gsp_tu10x.bin",
    ]


def test_programs_are_found_on_path_first_as_found(tmp_path: Path) -> None:
    """The H200's driver lives in /usr/local/nvidia, on the plugin's PATH: NVIDIA mounted
    /usr/local/nvidia/bin/nvidia-smi there, not the /usr/bin link to it."""
    root = fake_driver_root(tmp_path)
    local_bin = root / "usr/local/nvidia/bin"
    local_bin.mkdir(parents=True)
    (local_bin / "nvidia-smi").write_text("#!/bin/sh\n")
    (local_bin / "nvidia-smi").chmod(0o755)
    (local_bin / "nvidia-persistenced").write_text("not executable")
    (local_bin / "nvidia-debugdump").mkdir()  # a directory is no program
    (root / "usr/bin/nvidia-cuda-mps-control").symlink_to("../local/nvidia/bin/nvidia-smi")
    driver = DriverRoot(root, search_path="relative/dir:/usr/local/nvidia/bin:/usr/bin")
    assert driver.binary_dirs()[:3] == ["/usr/local/nvidia/bin", "/usr/bin", "/usr/local/sbin"]
    assert driver.binaries() == [
        "/usr/local/nvidia/bin/nvidia-smi",
        "/usr/bin/nvidia-persistenced",
        "/usr/bin/nvidia-cuda-mps-control",  # a link is mounted where it was found
    ]


def test_an_empty_root_has_no_driver(tmp_path: Path) -> None:
    driver = DriverRoot(tmp_path)
    assert driver.version() is None
    assert (driver.binaries(), driver.ipc()) == ([], [])


# -- the gpu spec -------------------------------------------------------------------------

HOOK = "/usr/bin/nvidia-ctk"
HOOK_ENV = ["NVIDIA_CTK_DEBUG=false"]
LINKS = [
    f"libGLX_nvidia.so.{VERSION}::{LIBDIR}/libGLX_indirect.so.0",
    f"libGLX_nvidia.so.{VERSION}::{LIBDIR}/libGLX_nvidia.so.0",
    f"libcuda.so.1::{LIBDIR}/libcuda.so",
    f"libcuda.so.{VERSION}::{LIBDIR}/libcuda.so.1",
    f"libnvidia-ml.so.{VERSION}::{LIBDIR}/libnvidia-ml.so.1",
    f"libnvidia-ptxjitcompiler.so.{VERSION}::{LIBDIR}/libnvidia-ptxjitcompiler.so.1",
]


def hooks_json(path: str, names: list[str]) -> list[dict[str, Any]]:
    program = Path(path).name
    fixed = [program, "hook"] if program == "nvidia-ctk" else [program]
    args = {
        "create-symlinks": [a for link in LINKS for a in ("--link", link)],
        "enable-cuda-compat": [f"--host-driver-version={VERSION}"],
        "update-ldcache": ["--folder", LIBDIR, "--folder", f"{LIBDIR}/vdpau"],
        "disable-device-node-modification": [],
        "update-application-profile": [],
    }
    return [
        {
            "hookName": "createContainer",
            "path": path,
            "args": [*fixed, n, *args[n]],
            "env": HOOK_ENV,
        }
        for n in names
    ]


ALL_HOOKS = [
    "create-symlinks",
    "enable-cuda-compat",
    "update-ldcache",
    "disable-device-node-modification",
    "update-application-profile",
]


@pytest.mark.parametrize(
    ("options", "hooks"),
    [
        pytest.param(CdiOptions(), hooks_json(HOOK, ALL_HOOKS), id="default-nvidia-ctk"),
        pytest.param(
            CdiOptions(hook_path="/usr/local/nvidia/toolkit/nvidia-cdi-hook"),
            hooks_json("/usr/local/nvidia/toolkit/nvidia-cdi-hook", ALL_HOOKS),
            id="nvidia-cdi-hook-program",
        ),
        pytest.param(
            CdiOptions(disabled_hooks=("update-ldcache", "enable-cuda-compat")),
            hooks_json(
                HOOK,
                [
                    "create-symlinks",
                    "disable-device-node-modification",
                    "update-application-profile",
                ],
            ),
            id="two-disabled",
        ),
        pytest.param(CdiOptions(disabled_hooks=("all",)), [], id="all-disabled"),
        pytest.param(CdiOptions(hook_path=""), [], id="no-hook-program"),
    ],
)
def test_common_edits_golden(tmp_path: Path, options: CdiOptions, hooks: list[Any]) -> None:
    root = fake_driver_root(tmp_path / "driver")
    dev = FakeHost(tmp_path / "dev")
    dev.node("/dev/nvidiactl", major=195, minor=255)
    dev.node("/dev/nvidia-uvm", major=508, minor=0)
    for node in ("/dev/nvidiactl", "/dev/nvidia-uvm"):
        dev.local(node).chmod(0o666)  # as the driver makes them (mknod obeys the umask)
    driver = DriverRoot(root, kernel_release="6.1.0", search_path="")
    got = common_edits(driver, dev.root, options).to_json()
    file_options = ["ro", "nosuid", "nodev", "rbind", "rprivate"]
    ipc_options = ["nosuid", "nodev", "rbind", "rprivate", "noexec"]

    def mount(path: str, opts: list[str] = file_options) -> dict[str, Any]:
        return {"hostPath": f"{root}{path}", "containerPath": path, "options": opts}

    firmware = f"/lib/firmware/nvidia/{VERSION}"
    expected: dict[str, Any] = {
        "env": [f"NVIDIA_CTK_LIBCUDA_DIR={LIBDIR}", "NVIDIA_VISIBLE_DEVICES=void"],
        # only the nodes that exist; described from the host's node (a zero minor is left
        # out); sorted by depth, then name
        "deviceNodes": [
            {
                "path": "/dev/nvidia-uvm",
                "hostPath": f"{dev.root}/dev/nvidia-uvm",
                "major": 508,
                "fileMode": 0o666,
                "permissions": "rwm",
            },
            {
                "path": "/dev/nvidiactl",
                "hostPath": f"{dev.root}/dev/nvidiactl",
                "major": 195,
                "minor": 255,
                "fileMode": 0o666,
                "permissions": "rwm",
            },
        ],
        # by the depth of the container path, then by name
        "mounts": [
            mount("/run/nvidia-persistenced/socket", ipc_options),
            mount("/usr/bin/nvidia-persistenced"),
            mount("/usr/bin/nvidia-smi"),
            *(mount(p) for p in LIBS if "/vdpau/" not in p),
            mount("/var/run/nvidia-fabricmanager/socket", ipc_options),
            mount(f"{firmware}/gsp_ga10x.bin"),
            mount(f"{firmware}/gsp_tu10x.bin"),
            *(mount(p) for p in LIBS if "/vdpau/" in p),
        ],
    }
    if hooks:
        expected["hooks"] = hooks
    assert got == expected


def test_disable_ipc_discoverer_leaves_the_sockets_out(tmp_path: Path) -> None:
    driver = DriverRoot(fake_driver_root(tmp_path))
    options = CdiOptions(feature_flags=("disable-ipc-discoverer", "made-up-flag"))
    mounts = [m.container_path for m in common_edits(driver, tmp_path, options).mounts]
    assert not [m for m in mounts if "socket" in m]
    assert mounts


def test_without_a_driver_the_spec_holds_device_nodes_only(tmp_path: Path) -> None:
    edits = common_edits(DriverRoot(tmp_path), tmp_path, CdiOptions())
    assert edits.to_json() == {"env": ["NVIDIA_VISIBLE_DEVICES=void"]}


@pytest.mark.parametrize("strategy", ["uuid", "index"])
def test_one_device_per_gpu_and_mig_device_named_as_the_id_strategy_says(
    tmp_path: Path, strategy: str
) -> None:
    node = node_of("a100-mig")
    options = CdiOptions(device_id_strategy=strategy)
    spec = gpu_spec(node, DriverRoot(tmp_path), tmp_path, options, generated_mig_minors(4))
    whole = [g for g in node.gpus if not g.mig_enabled]
    migs = [m for g in node.gpus if g.mig_enabled for m in g.migs]
    if strategy == "uuid":
        names = [*(g.uuid for g in whole), *(m.uuid for m in migs)]
    else:
        names = [*(str(g.index) for g in whole), *(m.index for m in migs)]
    assert [d.name for d in spec.devices] == sorted(names)  # no "all": the plugin has none
    by_name = {d.name: d.edits for d in spec.devices}
    gpu = whole[0]
    name = gpu.uuid if strategy == "uuid" else str(gpu.index)
    assert [n.path for n in by_name[name].device_nodes] == [f"/dev/nvidia{gpu.minor}"]  # type: ignore[union-attr]
    first = node.gpus[0]
    mig = first.migs[0]
    minors = generated_mig_minors(4)
    gi = minors[f"gpu{first.minor}/gi{mig.gpu_instance}/access"]
    ci = minors[f"gpu{first.minor}/gi{mig.gpu_instance}/ci{mig.compute_instance}/access"]
    name = mig.uuid if strategy == "uuid" else mig.index
    assert [n.path for n in by_name[name].device_nodes] == [  # type: ignore[union-attr]
        f"/dev/nvidia{first.minor}",
        f"/dev/nvidia-caps/nvidia-cap{gi}",
        f"/dev/nvidia-caps/nvidia-cap{ci}",
    ]
    assert spec.to_json()["cdiVersion"] == "0.5.0"  # nodes under a temp dev root: hostPath


def test_nodes_under_dev_root_slash_make_a_0_3_0_spec(tmp_path: Path) -> None:
    """As NVIDIA's spec on the H200: UUID names, nodes at their own path -> 0.3.0."""
    node = node_of("pcie-4gpu")
    spec = gpu_spec(node, DriverRoot(tmp_path), Path("/"), CdiOptions(), {}).to_json()
    assert spec["cdiVersion"] == "0.3.0"
    assert all(
        "hostPath" not in n for d in spec["devices"] for n in d["containerEdits"]["deviceNodes"]
    )


@pytest.mark.parametrize(
    ("mode", "gid", "flags", "extra"),
    [
        pytest.param(0o666, 0, (), None, id="root-group-open-to-all"),
        pytest.param(0o660, 44, (), [44], id="video-group-only"),
        pytest.param(0o666, 44, (), None, id="group-but-open-to-all"),
        pytest.param(0o660, 44, ("no-additional-gids-for-device-nodes",), None, id="flag-off"),
    ],
)
def test_a_node_s_group_is_an_extra_group_of_the_container_unless_open_to_all(
    tmp_path: Path, mode: int, gid: int, flags: tuple[str, ...], extra: list[int] | None
) -> None:
    """internal/edits/device.go getAdditionalGIDs: the node's group, where it is not root
    and the node is not readable and writable by everyone."""
    dev = FakeHost(tmp_path)
    dev.node("/dev/nvidia0", major=195, minor=0)
    os.chown(dev.local("/dev/nvidia0"), 0, gid)
    dev.local("/dev/nvidia0").chmod(mode)
    node = describe_node(device_node(tmp_path, "/dev/nvidia0"), CdiOptions(feature_flags=flags))
    described = CdiSpec(
        "k8s.device-plugin.nvidia.com/gpu", (CdiDevice("x", ContainerEdits(device_nodes=(node,))),)
    ).to_json()
    got = described["devices"][0]["containerEdits"]["deviceNodes"][0]
    assert got.get("gid") == (gid or None)
    assert got.get("fileMode") == mode
    assert got.get("additionalGids") == extra
    assert described["cdiVersion"] == ("0.7.0" if extra else "0.5.0")  # hostPath: temp dev root


@pytest.mark.parametrize("profile", ["pcie-4gpu", "dgx-h100", "a100-mig"])
@pytest.mark.parametrize("driver", [True, False], ids=["driver", "no-driver"])
def test_every_generated_spec_is_valid_cdi(tmp_path: Path, profile: str, driver: bool) -> None:
    root = fake_driver_root(tmp_path) if driver else tmp_path
    node = node_of(profile)
    cdi = NvidiaCdi(
        CdiOptions(spec_dir=tmp_path / "cdi"),
        driver_root=root,
        dev_root=root,
        imex_channels=(ImexChannel("0"),),
    )
    paths = cdi.write(node, generated_mig_minors(len(node.gpus)))
    assert [p.name for p in paths] == [
        "k8s.device-plugin.nvidia.com-gpu.json",
        "k8s.device-plugin.nvidia.com-imex-channel.json",
    ]
    for path in paths:
        assert_valid_spec(json.loads(path.read_text()))


def test_imex_channel_spec(tmp_path: Path) -> None:
    spec = imex_spec([ImexChannel("0")], tmp_path).to_json()
    assert_valid_spec(spec)
    assert spec == {
        "cdiVersion": "0.5.0",
        "kind": "k8s.device-plugin.nvidia.com/imex-channel",
        "devices": [
            {
                "name": "0",
                "containerEdits": {
                    "deviceNodes": [
                        {
                            "path": "/dev/nvidia-caps-imex-channels/channel0",
                            "hostPath": f"{tmp_path}/dev/nvidia-caps-imex-channels/channel0",
                            "permissions": "rwm",
                        }
                    ]
                },
            }
        ],
    }
    assert imex_spec([], tmp_path).devices == ()  # no channels: no file (see the writer)


def test_specs_are_written_once_rewritten_on_change_and_removed(tmp_path: Path) -> None:
    node = node_of("pcie-4gpu")
    cdi = NvidiaCdi(CdiOptions(spec_dir=tmp_path / "cdi"), driver_root=tmp_path, dev_root=tmp_path)
    (path,) = cdi.write(node, {})
    inode = path.stat().st_ino
    cdi.write(node, {})
    assert path.stat().st_ino == inode  # unchanged: not rewritten
    fewer = dataclasses.replace(node, gpus=node.gpus[:2])
    cdi.write(fewer, {})
    assert path.stat().st_ino != inode  # replaced by rename, never edited in place
    assert len(json.loads(path.read_text())["devices"]) == 2  # one per GPU
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no temporaries
    cdi.remove()
    assert list(path.parent.iterdir()) == []


@pytest.mark.parametrize(
    ("mounted", "read_from"),
    [
        pytest.param(True, "container", id="driver-root-mounted-at-container-path"),
        pytest.param(False, "host", id="no-container-path-reads-the-driver-root"),
    ],
)
def test_files_read_in_the_container_driver_root_are_named_at_the_host_driver_root(
    tmp_path: Path, mounted: bool, read_from: str
) -> None:
    """NVIDIA's plugin-manager.go: files found under the container's driver root
    (``--driver-root-ctr-path``, where the chart mounts the host's) and named in the spec
    under ``--nvidia-driver-root`` (its root transform, driver root -> target driver root)."""
    container = tmp_path / "driver-root"
    host = tmp_path / "run" / "nvidia" / "driver"
    fake_driver_root(container if mounted else host)
    cdi = NvidiaCdi(
        CdiOptions(spec_dir=tmp_path / "cdi"),
        driver_root=host,
        dev_root=host,
        container_driver_root=container,
    )
    driver = cdi.driver()
    assert driver.root == (container if read_from == "container" else host)
    edits = common_edits(driver, host, CdiOptions())
    smi = next(m for m in edits.mounts if m.container_path == "/usr/bin/nvidia-smi")
    assert smi.host_path == f"{host}/usr/bin/nvidia-smi"


def test_a_gpu_with_drm_nodes_gets_them_and_their_by_path_links(tmp_path: Path) -> None:
    """internal/info/drm (every entry of the PCI device's drm directory) and
    dgpu/by-path-hooks.go (the by-path links that point at one of those nodes)."""
    node = node_of("pcie-4gpu")
    first, second = node.gpus[0], node.gpus[1]
    sys_root = tmp_path / "sys"
    for name in ("card1", "renderD128"):
        (sys_root / "bus/pci/devices" / first.pci_bus_id / "drm" / name).mkdir(parents=True)
    dev = FakeHost(tmp_path / "host")
    dev.node(f"/dev/nvidia{first.minor}", major=195, minor=first.minor)
    dev.node("/dev/dri/card1", major=226, minor=1)
    dev.node("/dev/dri/renderD128", major=226, minor=128)
    by_path = dev.local("/dev/dri/by-path")
    by_path.mkdir()
    (by_path / f"pci-{first.pci_bus_id}-card").symlink_to("../card1")
    (by_path / f"pci-{first.pci_bus_id}-render").symlink_to("../renderD128")
    (by_path / f"pci-{second.pci_bus_id}-card").symlink_to("../card1")  # not the second's node
    spec = gpu_spec(node, DriverRoot(tmp_path / "driver"), dev.root, CdiOptions(), {}, sys_root)
    devices = {d.name: d.edits.to_json() for d in spec.devices}
    mine = devices[first.uuid]
    assert [n["path"] for n in mine["deviceNodes"]] == [
        f"/dev/nvidia{first.minor}",
        "/dev/dri/card1",
        "/dev/dri/renderD128",
    ]
    (links_hook,) = mine["hooks"]
    assert links_hook["args"] == [
        "nvidia-ctk",
        "hook",
        "create-symlinks",
        "--link",
        f"../card1::{by_path}/pci-{first.pci_bus_id}-card",
        "--link",
        f"../renderD128::{by_path}/pci-{first.pci_bus_id}-render",
    ]
    assert "hooks" not in devices[second.uuid]
    assert [n["path"] for n in devices[second.uuid]["deviceNodes"]] == [
        f"/dev/nvidia{second.minor}"
    ]


@pytest.mark.parametrize(
    ("profile", "graphics"),
    [("1g.24gb+gfx", True), ("1g.10gb", False), ("1g.10gb+me", False), ("2g.20gb+gfx+me", True)],
)
def test_mig_devices_with_graphics_get_the_drm_nodes(profile: str, graphics: bool) -> None:
    assert has_graphics(profile) is graphics
