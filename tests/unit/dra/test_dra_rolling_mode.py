"""--dra-rolling-update auto: pod-named sockets only where the kubelet serves several
registrations of one driver (1.33+, the kubeletplugin library's RollingUpdate doc
comment: "This depends on support in the kubelet which was added in Kubernetes 1.33")."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("lightkube", reason="the [dra] extra (lightkube) is not installed")

import httpx2

from accel_plugins.dra.driver import DraSettings
from accel_plugins.dra.kube.rolling import parse_version, rolling_settings

UID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"


@pytest.mark.parametrize(
    ("text", "version"),
    [
        pytest.param("v1.34.9", (1, 34), id="release"),
        pytest.param("v1.33.0-rc.1+abc", (1, 33), id="pre-release"),
        pytest.param("1.36.2", (1, 36), id="no-v"),
        pytest.param("", None, id="empty"),
        pytest.param("unknown", None, id="not-a-version"),
    ],
)
def test_kubelet_versions(text: str, version: tuple[int, int] | None) -> None:
    assert parse_version(text) == version


class NodeOf:
    """The API boundary: a Node whose kubelet says ``version`` (an exception: raised)."""

    def __init__(self, version: str | Exception) -> None:
        self.version = version

    async def get(self, _resource: Any, name: str) -> Any:
        if isinstance(self.version, Exception):
            raise self.version
        info = SimpleNamespace(kubeletVersion=self.version)
        return SimpleNamespace(status=SimpleNamespace(nodeInfo=info))


@pytest.mark.parametrize(
    ("mode", "uid", "kubelet", "kept"),
    [
        pytest.param("auto", UID, "v1.33.0", True, id="auto-1.33-side-by-side"),
        pytest.param("auto", UID, "v1.36.2", True, id="auto-1.36"),
        pytest.param("auto", UID, "v1.32.9", False, id="auto-1.32-fixed-names"),
        pytest.param("auto", UID, "", False, id="auto-unknown-version-fixed-names"),
        pytest.param("auto", UID, httpx2.ConnectError("refused"), False, id="auto-node-unreadable"),
        pytest.param("auto", "", "v1.34.9", False, id="auto-without-a-pod-uid"),
        pytest.param("on", UID, "v1.32.9", True, id="on-whatever-the-kubelet"),
    ],
)
async def test_the_pod_uid_is_kept_where_pods_can_serve_side_by_side(
    tmp_path: Path, mode: str, uid: str, kubelet: str | Exception, kept: bool
) -> None:
    settings = DraSettings(
        driver_name="gpu.nvidia.com",
        node_name="n1",
        kubelet_plugins_dir=tmp_path,
        instance_uid=uid,
    )
    chosen = await rolling_settings(NodeOf(kubelet), settings, mode)  # type: ignore[arg-type]
    assert chosen.instance_uid == (uid if kept else "")
    assert chosen.socket_path.name == (f"dra-{uid}.sock" if kept else "dra.sock")
