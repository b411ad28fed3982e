"""The CDI specs of NVIDIA devices, as NVIDIA's plugin writes them for its CDI strategies.

NVIDIA's plugin (``internal/cdi/cdi.go``, ``cmd/nvidia-device-plugin/plugin-manager.go``)
writes, with vendor ``k8s.device-plugin.nvidia.com``, the class ``gpu`` through the
NVIDIA Container Toolkit's generator (``pkg/nvcdi``) and, when IMEX channels are
configured, the class ``imex-channel`` (``internal/cdi/imex.go``). Here:

``k8s.device-plugin.nvidia.com/gpu`` (file ``k8s.device-plugin.nvidia.com-gpu.json``)
  - one device per GPU without MIG, holding ``/dev/nvidia<minor>``, and one per MIG
    device, holding the parent's node and the GI and CI capability nodes; each named
    as the device-ID strategy says: by UUID, or by index (``0``, ``<gpu>:<mig>``).
    No ``all`` device (``nvidia-ctk cdi generate`` adds one, the plugin does not);
  - edits every container gets: the control nodes that exist, the driver's files
    (``driver_files.py``: libraries, utilities, IPC sockets, firmware;
    ``graphics_files.py``: EGL, Vulkan, X.Org) mounted read-only,
    ``NVIDIA_VISIBLE_DEVICES=void`` (so a legacy runtime hook that also runs adds
    nothing) and ``NVIDIA_CTK_LIBCUDA_DIR``, and NVIDIA's OCI hooks run by the
    configured hook program (``nvidiaCTKPath``): ``create-symlinks`` (graphics
    links, then libcuda.so and the sonames), ``enable-cuda-compat``,
    ``update-ldcache`` (the library directories), ``disable-device-node-modification``,
    ``update-application-profile``. ``--cdi-disable-hooks`` names hooks to leave out
    (``all``: every one); an empty hook path means none.
  - device nodes as the CDI library records them (``lstat`` of the host's node:
    numbers, permission bits, group; ``rwm``); mounts ordered by the depth of their
    container path, then by name, and nodes likewise (the toolkit's spec sorter).

Checked side by side with NVIDIA's plugin v0.20.0 on an H200 (``hack/peer_nvidia.py``).
``k8s.device-plugin.nvidia.com/imex-channel``
  - one device per IMEX channel found at start, named by its ID, holding its node.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from accel_plugins.backends.nvidia.cdi.driver_files import DriverRoot
from accel_plugins.backends.nvidia.cdi.drm_nodes import by_path_links, drm_nodes, has_graphics
from accel_plugins.backends.nvidia.cdi.graphics_files import Graphics
from accel_plugins.backends.nvidia.container_contract import (
    CDI_IMEX_KIND,
    CDI_KIND,
    ImexChannel,
    device_node,
    gpu_nodes,
    host_path,
    mig_nodes,
)
from accel_plugins.backends.nvidia.discovery import Node
from accel_plugins.plugin.cdi import (
    DEFAULT_SPEC_DIR,
    CdiDevice,
    CdiHook,
    CdiMount,
    CdiNode,
    CdiSpec,
    CdiSpecWriter,
    ContainerEdits,
)
from accel_plugins.plugin.device import DeviceNode

log = logging.getLogger(__name__)

GPU_KIND = CDI_KIND
IMEX_KIND = CDI_IMEX_KIND
CONTROL_NODES = (
    "/dev/nvidia-modeset",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidia-uvm",
    "/dev/nvidiactl",
)
"""The control nodes in the toolkit's order (pkg/nvcdi/common-nvml.go); only those that exist."""
FILE_OPTIONS = ("ro", "nosuid", "nodev", "rbind", "rprivate")
IPC_OPTIONS = ("nosuid", "nodev", "rbind", "rprivate", "noexec")
HOOK_STAGE = "createContainer"
HOOK_ENV = ("NVIDIA_CTK_DEBUG=false",)
CREATE_SYMLINKS = "create-symlinks"
ENABLE_CUDA_COMPAT = "enable-cuda-compat"
UPDATE_LDCACHE = "update-ldcache"
DISABLE_DEVICE_NODE_MODIFICATION = "disable-device-node-modification"
UPDATE_APPLICATION_PROFILE = "update-application-profile"
HOOKS = (
    CREATE_SYMLINKS,
    ENABLE_CUDA_COMPAT,
    UPDATE_LDCACHE,
    DISABLE_DEVICE_NODE_MODIFICATION,
    UPDATE_APPLICATION_PROFILE,
)
NODE_PERMISSIONS = "rwm"
SYS_ROOT = Path("/sys")
ALL_HOOKS = "all"
FEATURE_DISABLE_IPC = "disable-ipc-discoverer"
FEATURE_NO_GIDS = "no-additional-gids-for-device-nodes"
FEATURE_FLAGS = (FEATURE_DISABLE_IPC, FEATURE_NO_GIDS)
"""The toolkit's feature flags this writer honours."""
_EXTRA_LINKS = (
    # library name pattern -> (link target, link name): pkg discover/symlinks.go
    ("libcuda.so.*", "libcuda.so.1", "libcuda.so"),
    ("libGLX_nvidia.so.*", "", "libGLX_indirect.so.0"),
    ("libnvidia-opticalflow.so.*", "libnvidia-opticalflow.so.1", "libnvidia-opticalflow.so"),
)


@dataclass(frozen=True, slots=True)
class CdiOptions:
    """Where and how the specs are written (flags ``--cdi-spec-dir``, ``--nvidia-cdi-hook-path``,
    ``--cdi-disable-hooks``, ``--cdi-feature-flags``)."""

    spec_dir: Path = DEFAULT_SPEC_DIR
    hook_path: str = "/usr/bin/nvidia-ctk"
    disabled_hooks: tuple[str, ...] = ()
    feature_flags: tuple[str, ...] = ()
    device_id_strategy: str = "uuid"

    def hook_enabled(self, name: str) -> bool:
        if not self.hook_path:
            return False
        return name not in self.disabled_hooks and ALL_HOOKS not in self.disabled_hooks


def hook(options: CdiOptions, name: str, *args: str) -> CdiHook:
    """A hook as the toolkit writes it: ``nvidia-ctk hook <name>``, ``nvidia-cdi-hook <name>``."""
    program = PurePosixPath(options.hook_path).name
    fixed = (program, "hook") if program == "nvidia-ctk" else (program,)
    return CdiHook(HOOK_STAGE, options.hook_path, (*fixed, name, *args), HOOK_ENV)


def _is_library(name: str) -> bool:
    """``lib?*.so`` with nothing or a version after it (discover/ldconfig.go isLibName)."""
    if not fnmatch.fnmatchcase(name, "lib?*.so*"):
        return False
    tail = name.split(".so")[-1]
    return tail == "" or tail.startswith(".")


def _symlinks(driver: DriverRoot, libraries: Sequence[str]) -> list[str]:
    """``target::link`` pairs the create-symlinks hook makes beside the mounted libraries.

    The soname link is the symbolic link the driver's installer made beside the
    library (NVIDIA reads the soname from the ELF header; the installer names the
    link after it), then the ``.so`` link when the host has one.
    """
    links: dict[str, None] = {}
    for path in libraries:
        directory, name = str(PurePosixPath(path).parent), PurePosixPath(path).name
        for pattern, target, link in _EXTRA_LINKS:
            if fnmatch.fnmatchcase(name, pattern):
                links[f"{target or name}::{directory}/{link}"] = None
        host_links = driver.symlinks_in(directory)
        sonames = [n for n, points_to in host_links.items() if points_to == name and n != name]
        for soname in sorted(sonames, key=len)[:1]:
            links[f"{name}::{directory}/{soname}"] = None
            dev_link = soname.split(".so")[0] + ".so"
            if dev_link != soname and dev_link in host_links:
                links[f"{soname}::{directory}/{dev_link}"] = None
    return list(links)


def describe_node(node: DeviceNode, options: CdiOptions) -> CdiNode:
    """A node as the CDI library records it (moby's ``DeviceFromPath`` on the host's node,
    ``lstat``): its numbers, its permission bits and its group, ``rwm``; a path that is
    not a device node gets its path alone. A group other than root on a node not open
    to everyone is also an extra group of the container (unless ``no-additional-gids``)."""
    try:
        st = os.lstat(node.host_path)
    except OSError:
        return CdiNode(node.container_path, node.host_path, NODE_PERMISSIONS)
    if not (stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)):
        return CdiNode(node.container_path, node.host_path, NODE_PERMISSIONS)
    mode = st.st_mode & 0o777
    gids: tuple[int, ...] = ()
    open_to_all = mode & 0o006 == 0o006
    if st.st_gid and not open_to_all and FEATURE_NO_GIDS not in options.feature_flags:
        gids = (st.st_gid,)
    return CdiNode(
        node.container_path,
        node.host_path,
        NODE_PERMISSIONS,
        major=os.major(st.st_rdev),
        minor=os.minor(st.st_rdev),
        file_mode=mode,
        gid=st.st_gid,
        additional_gids=gids,
    )


def _depth_then_name(path: str) -> tuple[int, str]:
    return (path.count("/"), path)


def sorted_edits(edits: ContainerEdits, common: ContainerEdits | None = None) -> ContainerEdits:
    """Each entry once, less what ``common`` already gives; mounts and nodes ordered by
    the depth of their container path, then by name (the toolkit's ``transform`` dedupe,
    simplify and sort). Env and hooks keep their order."""
    base = common or ContainerEdits()
    mounts = [m for m in dict.fromkeys(edits.mounts) if m not in base.mounts]
    nodes = [n for n in dict.fromkeys(edits.device_nodes) if n not in base.device_nodes]
    return ContainerEdits(
        env=tuple(e for e in dict.fromkeys(edits.env) if e not in base.env),
        device_nodes=tuple(sorted(nodes, key=lambda n: _depth_then_name(_node_path(n)))),
        mounts=tuple(sorted(mounts, key=lambda m: _depth_then_name(m.container_path))),
        hooks=tuple(h for h in dict.fromkeys(edits.hooks) if h not in base.hooks),
    )


def _node_path(node: DeviceNode | CdiNode) -> str:
    return node.container_path if isinstance(node, DeviceNode) else node.path


def common_edits(driver: DriverRoot, dev_root: Path, options: CdiOptions) -> ContainerEdits:
    """What every container naming a GPU gets: control nodes, driver files, env, hooks."""
    nodes = tuple(
        describe_node(device_node(dev_root, p), options)
        for p in CONTROL_NODES
        if Path(host_path(dev_root, p)).exists()
    )
    unknown = [f for f in options.feature_flags if f not in FEATURE_FLAGS]
    if unknown:
        log.warning(
            "CDI feature flags not supported by this plugin, ignored: %s", ", ".join(unknown)
        )
    version = driver.version()
    if version is None:
        log.warning(
            "no NVIDIA driver (libnvidia-ml.so.1) under the driver root %s: the CDI spec holds "
            "the device nodes only",
            driver.root,
        )
        return sorted_edits(
            ContainerEdits(env=("NVIDIA_VISIBLE_DEVICES=void",), device_nodes=nodes)
        )
    libraries = driver.libraries(version)
    graphics = Graphics(driver, version)
    ipc = [] if FEATURE_DISABLE_IPC in options.feature_flags else driver.ipc()
    mounts = (
        *(
            CdiMount(driver.host_path(f.path), f.container_path, FILE_OPTIONS)
            for f in graphics.files()
        ),
        *(CdiMount(driver.host_path(p), p, FILE_OPTIONS) for p in libraries),
        *(CdiMount(driver.host_path(p), p, IPC_OPTIONS) for p in ipc),
        *(CdiMount(driver.host_path(p), p, FILE_OPTIONS) for p in driver.firmware(version)),
        *(CdiMount(driver.host_path(p), p, FILE_OPTIONS) for p in driver.binaries()),
    )
    hooks: list[CdiHook] = []
    graphics_links = graphics.links()
    if graphics_links and options.hook_enabled(CREATE_SYMLINKS):
        args = (a for x in graphics_links for a in ("--link", x))
        hooks.append(hook(options, CREATE_SYMLINKS, *args))
    links = _symlinks(driver, libraries)
    if links and options.hook_enabled(CREATE_SYMLINKS):
        hooks.append(hook(options, CREATE_SYMLINKS, *(a for x in links for a in ("--link", x))))
    if options.hook_enabled(ENABLE_CUDA_COMPAT):
        hooks.append(hook(options, ENABLE_CUDA_COMPAT, f"--host-driver-version={version}"))
    folders = list(
        dict.fromkeys(
            str(PurePosixPath(p).parent) for p in libraries if _is_library(PurePosixPath(p).name)
        )
    )
    if folders and options.hook_enabled(UPDATE_LDCACHE):
        hooks.append(hook(options, UPDATE_LDCACHE, *(a for f in folders for a in ("--folder", f))))
    if options.hook_enabled(DISABLE_DEVICE_NODE_MODIFICATION):
        hooks.append(hook(options, DISABLE_DEVICE_NODE_MODIFICATION))
    if options.hook_enabled(UPDATE_APPLICATION_PROFILE):
        hooks.append(hook(options, UPDATE_APPLICATION_PROFILE))
    env = (
        f"NVIDIA_CTK_LIBCUDA_DIR={':'.join(driver.library_dirs(version))}",
        "NVIDIA_VISIBLE_DEVICES=void",
    )
    edits = ContainerEdits(env=env, device_nodes=nodes, mounts=mounts, hooks=tuple(hooks))
    return sorted_edits(edits)


def gpu_devices(
    node: Node,
    dev_root: Path,
    mig_minors: Mapping[str, int],
    options: CdiOptions,
    sys_root: Path = SYS_ROOT,
) -> list[CdiDevice]:
    """Each GPU without MIG and each MIG device, named by UUID or by index as
    ``options.device_id_strategy`` says (NVIDIA's plugin gives the generator one namer),
    with its DRM nodes and their by-path links where it has graphics (``drm_nodes.py``)."""
    by_index = options.device_id_strategy == "index"
    devices: list[CdiDevice] = []

    def add(uuid: str, index: str, nodes: tuple[DeviceNode, ...], bus: str | None) -> None:
        hooks: tuple[CdiHook, ...] = ()
        if bus is not None:
            nodes += drm_nodes(sys_root, dev_root, bus)
            links = by_path_links(dev_root, bus, nodes)
            if links and options.hook_enabled(CREATE_SYMLINKS):
                args = (a for x in links for a in ("--link", x))
                hooks = (hook(options, CREATE_SYMLINKS, *args),)
        described = tuple(describe_node(n, options) for n in nodes)
        edits = ContainerEdits(device_nodes=described, hooks=hooks)
        devices.append(CdiDevice(index if by_index else uuid, edits))

    for gpu in node.gpus:
        if not gpu.mig_enabled:
            add(gpu.uuid, str(gpu.index), gpu_nodes(dev_root, gpu.minor), gpu.pci_bus_id)
    for gpu in node.gpus:
        for mig in gpu.migs if gpu.mig_enabled else ():
            nodes = mig_nodes(
                dev_root, gpu.minor, mig.gpu_instance, mig.compute_instance, mig_minors
            )
            add(mig.uuid, mig.index, nodes, gpu.pci_bus_id if has_graphics(mig.profile) else None)
    return devices


def gpu_spec(
    node: Node,
    driver: DriverRoot,
    dev_root: Path,
    options: CdiOptions,
    mig_minors: Mapping[str, int],
    sys_root: Path = SYS_ROOT,
) -> CdiSpec:
    common = common_edits(driver, dev_root, options)
    devices = sorted(
        (
            CdiDevice(d.name, sorted_edits(d.edits, common))
            for d in gpu_devices(node, dev_root, mig_minors, options, sys_root)
        ),
        key=lambda d: d.name,
    )
    return CdiSpec(GPU_KIND, tuple(devices), common)


def imex_spec(
    channels: Sequence[ImexChannel], dev_root: Path, options: CdiOptions | None = None
) -> CdiSpec:
    described = options or CdiOptions()
    return CdiSpec(
        IMEX_KIND,
        tuple(
            CdiDevice(
                c.id,
                ContainerEdits(
                    device_nodes=(describe_node(device_node(dev_root, c.path), described),)
                ),
            )
            for c in channels
        ),
    )


class NvidiaCdi:
    """Writes the NVIDIA backend's specs when it starts serving; removes them when it stops,
    unless ``kept_after_exit`` (DRA mode: a prepared claim names this spec's devices, and a
    container of it restarting while the plugin is away must still find them, as it finds
    a claim's own spec)."""

    def __init__(
        self,
        options: CdiOptions,
        *,
        driver_root: Path,
        dev_root: Path,
        imex_channels: Sequence[ImexChannel] = (),
        container_driver_root: Path | None = None,
        sys_root: Path = SYS_ROOT,
        kept_after_exit: bool = False,
    ) -> None:
        self.kept_after_exit = kept_after_exit
        self.options = options
        self.sys_root = sys_root
        self.driver_root = driver_root
        self.dev_root = dev_root
        self.imex_channels = tuple(imex_channels)
        self.container_driver_root = container_driver_root
        self.writer = CdiSpecWriter(options.spec_dir)

    def driver(self) -> DriverRoot:
        """The driver's files read where this container sees the host's driver root
        (``--driver-root-ctr-path`` when that directory exists, as the chart mounts it),
        named in the spec where the host has them (``--nvidia-driver-root``)."""
        read = self.container_driver_root
        if read is None or not read.is_dir():
            read = self.driver_root
        return DriverRoot(read, host_root=self.driver_root)

    def specs(self, node: Node, mig_minors: Mapping[str, int]) -> list[CdiSpec]:
        driver = self.driver()
        return [
            gpu_spec(node, driver, self.dev_root, self.options, mig_minors, self.sys_root),
            imex_spec(self.imex_channels, self.dev_root, self.options),
        ]

    def write(self, node: Node, mig_minors: Mapping[str, int]) -> list[Path]:
        """Write (or rewrite what changed); OSError when the directory is not writable."""
        self.writer.sync(self.specs(node, mig_minors))
        return self.writer.paths

    def restore(self) -> list[Path]:
        """Write again what is missing or changed on disk (OSError when not writable)."""
        return self.writer.restore()

    def remove(self) -> None:
        self.writer.remove_all()
