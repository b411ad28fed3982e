"""Fixtures for the DRA API side against a real API server (tests/envtest.py).

- ``kube_apiserver``: etcd and kube-apiserver for the whole session (they take
  seconds and hundreds of MB to start), so tests work on their own node names.
- ``apiservers``: ``apiservers(kind)`` is the session's API server of that
  :class:`ServerKind` (another version, other feature gates), started on first
  use; a test module overrides ``kube_apiserver`` with one to run its tests there.
- ``every_dra_version``: imported into a test module, it overrides
  ``kube_apiserver`` so that each test there runs against 1.34 (resource.k8s.io
  v1), 1.33 (v1beta2, v1beta1) and 1.36 (v1); a binary missing from the assets
  skips its cases with that reason. :func:`served` says which version a client's
  server speaks, :func:`resource_types` gives lightkube's types of it.
- ``kube``: an admin lightkube AsyncClient on the session's API server.
- ``kube_node``: a Node object of a name no other test uses (one the API
  server has a kubelet token for), its slices and itself deleted at teardown.
- ``node_client``: ``node_client(name)`` is a client acting as that node's kubelet.
- ``kube_namespace``: a Namespace of its own for the test's claims and pods.

Skipped, with the reason, when ``KUBEBUILDER_ASSETS`` is unset or lightkube
(the ``[dra]`` extra) is not installed.
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
import weakref
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING

import pytest

from tests.envtest import NODES, ApiServer, EnvtestUnavailable, api_server, assets

if TYPE_CHECKING:
    from lightkube import AsyncClient

    from accel_plugins.dra.kube.api import ResourceApi


_names: Iterator[str] = iter(NODES)
_namespaces: Iterator[str] = (f"test-{i}" for i in itertools.count())
NodeClient = Callable[[str], "AsyncClient"]


def _lightkube() -> None:
    pytest.importorskip("lightkube", reason="the [dra] extra (lightkube) is not installed")


@dataclass(frozen=True)
class ServerKind:
    """An API server binary of the assets and the flags it needs to serve DRA."""

    name: str  # the test ID
    binary: str = "kube-apiserver"
    feature_gates: Mapping[str, bool] = field(default_factory=dict, hash=False)
    runtime_config: Mapping[str, bool] = field(default_factory=dict, hash=False)


V1_34 = ServerKind("v1.34")
# DRADeviceTaints is alpha (off by default) in 1.34: the slice field is kept only with it.
V1_34_TAINTS = ServerKind("v1.34+DRADeviceTaints", feature_gates={"DRADeviceTaints": True})
# ../shared/k8s/README.md: 1.33 serves DRA (v1beta2 preferred, v1beta1) only with these.
V1_33 = ServerKind(
    "v1.33",
    "kube-apiserver-v1.33",
    feature_gates={"DynamicResourceAllocation": True},
    runtime_config={"resource.k8s.io/v1beta1": True, "resource.k8s.io/v1beta2": True},
)
V1_36 = ServerKind("v1.36", "kube-apiserver-v1.36")
# KEP-5004 (extended resources backed by DRA) is alpha, off by default, in 1.34: the
# DeviceClass field and the scheduler's claim for a pod's nvidia.com/gpu need the gate.
V1_34_EXTENDED = ServerKind(
    "v1.34+DRAExtendedResource", feature_gates={"DRAExtendedResource": True}
)
SCHEDULED = (V1_34, V1_34_EXTENDED)  # the kinds a kube-scheduler runs against
DRA_VERSIONS = (V1_34, V1_33, V1_36)
ServerOf = Callable[[ServerKind], ApiServer]


@pytest.fixture(scope="session")
def apiservers() -> Iterator[ServerOf]:
    started: dict[str, ApiServer] = {}
    with contextlib.ExitStack() as stack:

        def server(kind: ServerKind) -> ApiServer:
            if kind.name not in started:
                try:
                    assets()
                    started[kind.name] = stack.enter_context(
                        api_server(
                            kind.binary,
                            feature_gates=kind.feature_gates,
                            runtime_config=kind.runtime_config,
                            scheduler=kind in SCHEDULED,
                        )
                    )
                except EnvtestUnavailable as exc:
                    pytest.skip(f"no real API server {kind.name}: {exc}")
            return started[kind.name]

        yield server


@pytest.fixture(scope="session")
def kube_apiserver(apiservers: ServerOf) -> ApiServer:
    return apiservers(V1_34)


@pytest.fixture(name="kube_apiserver", params=[pytest.param(k, id=k.name) for k in DRA_VERSIONS])
def every_dra_version(request: pytest.FixtureRequest, apiservers: ServerOf) -> ApiServer:
    return apiservers(request.param)


_served: weakref.WeakKeyDictionary[AsyncClient, ResourceApi] = weakref.WeakKeyDictionary()


async def served(kube: AsyncClient) -> ResourceApi:
    """The resource.k8s.io version the client's API server serves (newest), asked once."""
    from accel_plugins.dra.kube.api import ApiVersions

    if kube not in _served:
        _served[kube] = await ApiVersions(kube).get()
    return _served[kube]


def resource_types(api: ResourceApi) -> ModuleType:
    """lightkube.resources.resource_<version>: DeviceClass, ResourceClaim, ... of ``api``."""
    return importlib.import_module(f"lightkube.resources.resource_{api.version}")


@pytest.fixture
async def kube(kube_apiserver: ApiServer) -> AsyncIterator[AsyncClient]:
    _lightkube()
    from lightkube import KubeConfig

    from accel_plugins.dra.kube import make_client

    client = make_client(KubeConfig.from_dict(kube_apiserver.kubeconfig()))
    yield client
    await client.close()


@pytest.fixture
async def node_client(kube_apiserver: ApiServer) -> AsyncIterator[NodeClient]:
    _lightkube()
    from lightkube import KubeConfig

    from accel_plugins.dra.kube import make_client

    clients: list[AsyncClient] = []

    def make(node: str) -> AsyncClient:
        config = KubeConfig.from_dict(kube_apiserver.node_kubeconfig(node))
        clients.append(make_client(config))
        return clients[-1]

    yield make
    for client in clients:
        await client.close()


async def delete_slices(kube: AsyncClient, node: str) -> None:
    api = await served(kube)
    async for item in kube.list(api.slice_type, fields={"spec.nodeName": node}):
        assert item.metadata is not None
        assert item.metadata.name is not None
        await kube.delete(api.slice_type, item.metadata.name)


@pytest.fixture
async def kube_node(kube: AsyncClient) -> AsyncIterator[str]:
    """A fresh Node (no controller manager runs, so nothing else touches it)."""
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import Node

    try:
        name = next(_names)
    except StopIteration:
        pytest.fail(f"more Nodes asked for than the API server has tokens for ({len(NODES)})")
    await kube.create(Node(metadata=ObjectMeta(name=name)))
    yield name
    await delete_slices(kube, name)
    with contextlib.suppress(Exception):
        await kube.delete(Node, name)


@pytest.fixture
async def kube_namespace(kube: AsyncClient) -> AsyncIterator[str]:
    """A fresh Namespace. Deleting it only marks it: no namespace controller runs to empty it."""
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import Namespace

    name = next(_namespaces)
    await kube.create(Namespace(metadata=ObjectMeta(name=name)))
    yield name
    with contextlib.suppress(Exception):
        await kube.delete(Namespace, name)
