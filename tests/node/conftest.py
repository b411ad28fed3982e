"""Fixtures of the real-node suite (docs/node-tests.md).

- ``node``: the single-node Kubernetes of tests/node/cluster.py for the whole session,
  with the test image imported; torn down by PID at the end, whatever failed.
- ``kube``: an admin lightkube Client on it (the tests run inside the node's network
  namespace, so it reaches the API server, the pods and their /metrics directly).

The node runs Kubernetes v1.34. A module marked ``pytest.mark.node_version("1.36")`` runs
on a v1.36 node instead (``node_version`` parametrizes the session's fixtures, so the
v1.34 node and everything on it are torn down before the v1.36 node boots; one node at a
time). Those modules run last; the project's images are built once for both nodes.

The suite runs only when named (``pytest tests/node``): a plain ``pytest`` leaves it out,
since it takes the machine's kubelet ports and minutes. Where the machine cannot run a
node, its tests skip with the reason; under ``CI=true`` they fail instead.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.node import dra, plugins
from tests.node.chart import Release, installed
from tests.node.cluster import (
    DEFAULT_VERSION,
    VERSION_SUFFIX,
    Node,
    NodeStartError,
    NodeUnavailable,
    running_node,
)
from tests.node.images import ImageUnavailable, write_test_image
from tests.support.chart import ROOT

if TYPE_CHECKING:
    from lightkube import Client

HERE = Path(__file__).parent
TEST_TIMEOUT = 600
VERSION_MARK = "node_version"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{VERSION_MARK}(version): run on a real node of this Kubernetes version "
        f"(one of {', '.join(VERSION_SUFFIX)}), not the default {DEFAULT_VERSION} (tests/node)",
    )


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if collection_path.parent != HERE or not collection_path.name.startswith("test_"):
        return None
    named = any(Path(arg.split("::")[0]).resolve().is_relative_to(HERE) for arg in config.args)
    return None if named else True


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A module marked ``node_version`` gets its node of that version: ``node_version``
    parametrized for the session, so the node and what depends on it are set up again."""
    marker = metafunc.definition.get_closest_marker(VERSION_MARK)
    if marker is None or "node_version" not in metafunc.fixturenames:
        return
    (version,) = marker.args
    assert version in VERSION_SUFFIX, f"no node of Kubernetes {version}: {list(VERSION_SUFFIX)}"
    metafunc.parametrize(
        "node_version", [version], indirect=True, scope="session", ids=[f"v{version}"]
    )


@pytest.hookimpl(trylast=True)  # after pytest's own reordering by fixture
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The first test to ask for the project's images waits for their build (minutes);
    # every later wait ends on an event, so the bound matters only for a stuck one.
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(pytest.mark.timeout(TEST_TIMEOUT))
    # The default version's tests first, each other version's after them: every node boots
    # once (a version's tests between two of another's would boot that one twice).
    items.sort(key=lambda item: _version(item) != DEFAULT_VERSION)


def _version(item: pytest.Item) -> str:
    marker = item.get_closest_marker(VERSION_MARK) if item.path.is_relative_to(HERE) else None
    return str(marker.args[0]) if marker is not None else DEFAULT_VERSION


def unavailable(reason: str) -> None:
    """Skip outside CI; under CI=true the node is required, so fail."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"the real node cannot run here: {reason}", pytrace=False)
    pytest.skip(f"the real node cannot run here: {reason}")


@dataclass
class ImageBuild:
    """hack/build-node-images, started before the node's namespace is entered (it needs
    the machine's network for pip and apt) and running while the node boots."""

    out: Path
    log: Path
    process: subprocess.Popen[bytes] | None
    reason: str = ""  # why no build runs
    started: float = field(default_factory=time.monotonic)


TIMINGS: dict[str, float] = {}
LOGS_ENV = "ACCEL_NODE_LOGS"
LOGS: list[Path] = []


@pytest.fixture(scope="session")
def image_build(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ImageBuild]:
    out = tmp_path_factory.mktemp("node-images")
    log = out / "build.log"
    missing = [tool for tool in ("buildah", "mmdebstrap") if shutil.which(tool) is None]
    if missing:
        yield ImageBuild(out, log, None, f"{' and '.join(missing)} not installed")
        return
    with log.open("wb") as handle:
        process = subprocess.Popen(
            [str(ROOT / "hack" / "build-node-images"), str(out)],
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    build = ImageBuild(out, log, process)
    try:
        yield build
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.fixture(scope="session")
def node_version(request: pytest.FixtureRequest) -> str:
    """The node's Kubernetes version: the default, or a module's ``node_version`` mark."""
    return str(getattr(request, "param", DEFAULT_VERSION))


def timing(what: str, node: Node) -> str:
    """A TIMINGS key: ``what``, naming the node's version where it is not the default."""
    return what if node.version == DEFAULT_VERSION else f"{what} (v{node.version})"


@pytest.fixture(scope="session")
def node(
    image_build: ImageBuild, node_version: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Node]:
    pytest.importorskip("lightkube", reason="the [dra] extra (lightkube) is not installed")
    # The daemons' and pods' logs outlive the node (CI keeps $ACCEL_NODE_LOGS); another
    # version's in a folder of their own.
    logs = Path(os.environ.get(LOGS_ENV) or tmp_path_factory.mktemp("node-logs"))
    if node_version != DEFAULT_VERSION:
        logs /= f"v{node_version}"
    LOGS.append(logs)
    with tempfile.TemporaryDirectory(prefix="node-images-") as workdir:
        started_at = time.monotonic()
        try:
            with running_node(
                lambda _: [write_test_image(Path(workdir))], logs=logs, version=node_version
            ) as started:
                TIMINGS[timing("node start to Ready", started)] = time.monotonic() - started_at
                yield started
        except (NodeUnavailable, ImageUnavailable, NodeStartError) as exc:
            unavailable(f"v{node_version}: {exc}")


@pytest.fixture(scope="session")
def project_images(node: Node, image_build: ImageBuild) -> list[str]:
    """The project's two images, built from this checkout's ./Dockerfile, in containerd."""
    if image_build.process is None:
        unavailable(f"no image build: {image_build.reason}")
        return []
    code = image_build.process.wait()  # built once: the next node finds it done
    TIMINGS.setdefault("image build (from session start)", time.monotonic() - image_build.started)
    if code != 0:
        tail = "\n".join(image_build.log.read_text(errors="replace").splitlines()[-30:])
        unavailable(f"hack/build-node-images exited {code}:\n{tail}")
    started = time.monotonic()
    images = []
    for line in (image_build.out / "images.txt").read_text().splitlines():
        archive, image = line.split()
        node.ctr("images", "import", archive)
        images.append(image)
    TIMINGS[timing("image import", node)] = time.monotonic() - started
    return images


@pytest.fixture(scope="session")
def device_plugins(kube: Client, node: Node, project_images: list[str]) -> Iterator[Release]:
    """The chart in device-plugin mode, its resources in the node's allocatable."""

    def ready() -> None:
        plugins.await_allocatable(kube, node, plugins.full_capacity())

    with running_release(kube, node, "dp", "device-plugin", ready) as release:
        yield release


@pytest.fixture(scope="session")
def nvidia_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A mock driver root for NVIDIA's mock NVML, on the host (the node's hostPath)."""
    from tests.support.nvidia_mock import MockNvmlUnavailable, mock_driver_root

    root = tmp_path_factory.mktemp("nvidia-driver-root")
    try:
        mock_driver_root(root, plugins.MOCK_PROFILE)
    except MockNvmlUnavailable as exc:
        unavailable(f"NVIDIA's mock NVML: {exc}")
    root.chmod(0o755)  # hostPath: the plugin pod's user reads it
    return root


@pytest.fixture(scope="session")
def dra_drivers(
    kube: Client, node: Node, project_images: list[str], nvidia_root: Path
) -> Iterator[Release]:
    """The chart in DRA mode: its drivers running (NVIDIA's on its mock NVML), their
    ResourceSlices published."""

    def ready() -> None:
        devices = {dra.GENERIC_DRIVER: 3, dra.GPU_DRIVER: plugins.MOCK_GPUS}
        dra.await_slices(kube, node, devices)

    with running_release(kube, node, "dra", "dra", ready, nvidia_root) as release:
        yield release


@contextlib.contextmanager
def running_release(
    kube: Client,
    node: Node,
    name: str,
    kubelet_api: str,
    ready: Callable[[], None],
    nvidia_root: Path | None = None,
    values: dict[str, Any] | None = None,
) -> Iterator[Release]:
    """A release of the chart for this node (``values``, or the suite's for
    ``kubelet_api``), rolled out and ``ready``; its time recorded."""
    started = time.monotonic()
    if values is None:
        values = plugins.values(node, kubelet_api, nvidia_root)
    with (
        label_for_nvidia(kube, node),
        installed(kube, name, plugins.NAMESPACE, values) as release,
    ):
        plugins.await_release(kube, release)
        ready()
        TIMINGS[timing(f"{kubelet_api} release ready", node)] = time.monotonic() - started
        yield release


@contextlib.contextmanager
def label_for_nvidia(kube: Client, node: Node) -> Iterator[None]:
    """The label node-feature-discovery puts on a node with an NVIDIA PCI device."""
    from lightkube.resources.core_v1 import Node as NodeObject

    key, value = plugins.NVIDIA_NODE_LABEL
    kube.patch(NodeObject, node.name, {"metadata": {"labels": {key: value}}})
    yield


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if TIMINGS:
        terminalreporter.section("real node timings")
        for what, seconds in TIMINGS.items():
            terminalreporter.write_line(f"{what}: {seconds:.1f} s")
    for logs in LOGS:
        terminalreporter.write_line(f"the node's logs (daemons and pods): {logs}")


@pytest.fixture(scope="session")
def kube(node: Node) -> Iterator[Client]:
    from lightkube import Client, KubeConfig

    client = Client(KubeConfig.from_dict(node.kubeconfig()), field_manager="helm", trust_env=False)
    yield client
    client.close()
