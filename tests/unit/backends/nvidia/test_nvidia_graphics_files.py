"""The driver's graphics files in NVIDIA's CDI spec, on a fake driver root.

Rules from nvidia-container-toolkit v1.20.0 (as k8s-device-plugin v0.20.0 vendors it),
``internal/discover/graphics.go``: configuration files (every copy under ``/etc`` and
``$XDG_DATA_DIRS``), Vulkan files (the first copy, at ``/etc/vulkan/...`` in the
container), the EGL platform libraries, X.Org's driver and GLX module (first found), and
the GBM, Vulkan-producer and GLX links of a first ``create-symlinks`` hook. On the H200,
NVIDIA's spec mounted ``/usr/share/vulkan/icd.d/nvidia_icd.json`` at
``/etc/vulkan/icd.d/nvidia_icd.json`` and linked ``gbm/nvidia-drm_gbm.so`` to
``../libnvidia-allocator.so.1`` (hack/peer_nvidia.py).
"""

from __future__ import annotations

from pathlib import Path

from accel_plugins.backends.nvidia.cdi.cdi_spec import CdiOptions, common_edits
from accel_plugins.backends.nvidia.cdi.driver_files import DriverRoot
from accel_plugins.backends.nvidia.cdi.graphics_files import Graphics, GraphicsFile
from tests.support.cdi import LIBDIR, VERSION, fake_driver_root

FILES = (
    "usr/share/glvnd/egl_vendor.d/10_nvidia.json",
    "etc/glvnd/egl_vendor.d/10_nvidia.json",
    "usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json",
    "etc/vulkan/icd.d/nvidia_icd.json",
    "usr/share/vulkan/icd.d/nvidia_icd.json",  # a second copy: the /etc one wins
    "usr/share/vulkan/implicit_layer.d/nvidia_layers.json",
    "usr/lib/xorg/modules/drivers/nvidia_drv.so",
    f"usr/lib/xorg/modules/extensions/libglxserver_nvidia.so.{VERSION}",
    f"{LIBDIR.lstrip('/')}/libnvidia-allocator.so.{VERSION}",
    f"{LIBDIR.lstrip('/')}/libnvidia-egl-gbm.so.1.1.2",
    f"{LIBDIR.lstrip('/')}/libnvidia-egl-wayland.so.1",  # not *.so.*.*: left out
)


def graphics_root(tmp_path: Path) -> Path:
    root = fake_driver_root(tmp_path)
    for name in FILES:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"")
    return root


def test_graphics_files_and_where_the_container_gets_them(tmp_path: Path) -> None:
    root = graphics_root(tmp_path)
    graphics = Graphics(DriverRoot(root, machine="x86_64"), VERSION, xdg_data_dirs="")
    assert graphics.files() == [
        GraphicsFile(
            f"{LIBDIR}/libnvidia-egl-gbm.so.1.1.2", f"{LIBDIR}/libnvidia-egl-gbm.so.1.1.2"
        ),
        GraphicsFile(
            "/usr/lib/xorg/modules/drivers/nvidia_drv.so",
            "/usr/lib/xorg/modules/drivers/nvidia_drv.so",
        ),
        GraphicsFile(
            f"/usr/lib/xorg/modules/extensions/libglxserver_nvidia.so.{VERSION}",
            f"/usr/lib/xorg/modules/extensions/libglxserver_nvidia.so.{VERSION}",
        ),
        GraphicsFile(
            "/etc/glvnd/egl_vendor.d/10_nvidia.json", "/etc/glvnd/egl_vendor.d/10_nvidia.json"
        ),
        GraphicsFile(
            "/usr/share/glvnd/egl_vendor.d/10_nvidia.json",
            "/usr/share/glvnd/egl_vendor.d/10_nvidia.json",
        ),
        GraphicsFile(
            "/usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json",
            "/usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json",
        ),
        GraphicsFile("/etc/vulkan/icd.d/nvidia_icd.json", "/etc/vulkan/icd.d/nvidia_icd.json"),
        GraphicsFile(
            "/usr/share/vulkan/implicit_layer.d/nvidia_layers.json",
            "/etc/vulkan/implicit_layer.d/nvidia_layers.json",
        ),
    ]
    assert graphics.links() == [
        f"../libnvidia-allocator.so.1::{LIBDIR}/gbm/nvidia-drm_gbm.so",
        f"libglxserver_nvidia.so.{VERSION}::/usr/lib/xorg/modules/extensions/libglxserver_nvidia.so",
    ]


def test_xdg_data_dirs_replace_the_default_share_directories(tmp_path: Path) -> None:
    root = graphics_root(tmp_path)
    (root / "opt/share/vulkan/icd.d").mkdir(parents=True)
    (root / "opt/share/vulkan/icd.d/nvidia_icd.x86_64.json").write_bytes(b"")
    graphics = Graphics(DriverRoot(root, machine="x86_64"), VERSION, xdg_data_dirs="/opt/share")
    paths = [(f.path, f.container_path) for f in graphics.files()]
    assert ("/usr/share/glvnd/egl_vendor.d/10_nvidia.json",) * 2 not in paths
    assert (
        "/opt/share/vulkan/icd.d/nvidia_icd.x86_64.json",
        "/etc/vulkan/icd.d/nvidia_icd.x86_64.json",
    ) in paths


def test_the_graphics_links_hook_comes_first(tmp_path: Path) -> None:
    root = graphics_root(tmp_path)
    driver = DriverRoot(root, kernel_release="6.1.0", search_path="")
    edits = common_edits(driver, tmp_path, CdiOptions())
    first, second = edits.hooks[0], edits.hooks[1]
    assert first.args[:3] == ("nvidia-ctk", "hook", "create-symlinks")
    assert f"../libnvidia-allocator.so.1::{LIBDIR}/gbm/nvidia-drm_gbm.so" in first.args
    assert second.args[:3] == ("nvidia-ctk", "hook", "create-symlinks")  # the driver's links
    assert edits.hooks[-1].args[2] == "update-application-profile"
    mounted = {m.container_path: m.host_path for m in edits.mounts}
    assert (
        mounted["/etc/vulkan/icd.d/nvidia_icd.json"] == f"{root}/etc/vulkan/icd.d/nvidia_icd.json"
    )
